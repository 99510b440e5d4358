//! The spaces a segment keeps in DRAM column by column, growing or sealed alike: the sparse
//! ones (vectors and postings) and the multivector ones.

use std::sync::{Arc, RwLock};

use super::multi_column::MultiColumn;
use super::sparse_column::SparseColumn;
use super::sparse_postings::DiskPostings;
use super::SegmentHit;
use crate::config::CollectionConfig;
use crate::vectors::{PointVectors, SparseVector};

/// Every point's sparse vector of one space, by offset.
pub(crate) type SparseVectors = Vec<Option<SparseVector>>;
/// Every point's multivector (rows back to back) of one space, by offset.
pub(crate) type MultiVectors = Vec<Option<Vec<f32>>>;

pub(crate) struct Columns {
    /// One per sparse space of the collection.
    sparse: Vec<SparseColumn>,
    /// One per multivector space.
    multi: Vec<MultiColumn>,
    /// The collection's spaces by name, for `has_vector` filters: replaced when a space
    /// is added or deleted.
    names: RwLock<Arc<SpaceNames>>,
}

/// Which space a name is, of a collection's dense, sparse and multivector spaces.
pub(crate) enum NamedSpace {
    Dense(usize),
    Sparse(usize),
    Multi(usize),
}

/// The collection's space names by index (`None`: a deleted space, which no name finds).
pub(crate) struct SpaceNames {
    dense: Vec<Option<String>>,
    sparse: Vec<Option<String>>,
    multi: Vec<Option<String>>,
}

impl SpaceNames {
    fn of(config: &CollectionConfig) -> Self {
        let live = |name: &str, removed: bool| (!removed).then(|| name.to_string());
        Self {
            dense: (config.dense.iter())
                .map(|s| live(&s.name, s.removed))
                .collect(),
            sparse: (config.sparse.iter())
                .map(|s| live(&s.name, s.removed))
                .collect(),
            multi: (config.multi.iter())
                .map(|s| live(&s.name, s.removed))
                .collect(),
        }
    }

    pub fn find(&self, name: &str) -> Option<NamedSpace> {
        let at = |list: &[Option<String>]| list.iter().position(|n| n.as_deref() == Some(name));
        at(&self.dense)
            .map(NamedSpace::Dense)
            .or_else(|| at(&self.sparse).map(NamedSpace::Sparse))
            .or_else(|| at(&self.multi).map(NamedSpace::Multi))
    }
}

impl Columns {
    /// Empty columns for `config`'s spaces.
    pub fn new(config: &CollectionConfig) -> Self {
        Self::stored(config, Vec::new(), Vec::new(), Vec::new(), 0)
    }

    /// Columns of `len` points from stored vectors; a space the store has no column for
    /// (added to the collection after it was written) holds none.
    /// `on_ssd[i]`: sparse space i's posting lists on SSD, where the segment has them.
    pub fn stored(
        config: &CollectionConfig,
        sparse: Vec<SparseVectors>,
        multi: Vec<MultiVectors>,
        mut on_ssd: Vec<Option<DiskPostings>>,
        len: usize,
    ) -> Self {
        on_ssd.resize_with(sparse.len(), || None);
        let mut sparse: Vec<SparseColumn> = sparse
            .into_iter()
            .zip(on_ssd)
            .map(|(vectors, disk)| match disk {
                Some(d) => SparseColumn::with_disk(vectors, d),
                None => SparseColumn::from_vectors(vectors),
            })
            .collect();
        sparse.resize_with(config.sparse.len(), || {
            SparseColumn::from_vectors(vec![None; len])
        });
        let mut rows = multi.into_iter();
        let multi = config
            .multi
            .iter()
            .map(|space| {
                MultiColumn::from_vectors(space, rows.next().unwrap_or_else(|| vec![None; len]))
            })
            .collect();
        Self {
            sparse,
            multi,
            names: RwLock::new(Arc::new(SpaceNames::of(config))),
        }
    }

    pub fn names(&self) -> Arc<SpaceNames> {
        Arc::clone(&self.names.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// Follows the collection's spaces after one was added or deleted: names, and an empty
    /// column of `len` points for each space added.
    pub fn follow(&mut self, config: &CollectionConfig, len: usize) {
        self.sparse
            .resize_with(config.sparse.len().max(self.sparse.len()), || {
                SparseColumn::from_vectors(vec![None; len])
            });
        for space in config.multi.iter().skip(self.multi.len()) {
            self.multi
                .push(MultiColumn::from_vectors(space, vec![None; len]));
        }
        self.rename(config);
    }

    /// Takes the collection's space names as they are now (a sealed segment's columns
    /// are shared, so only the names change there).
    pub fn rename(&self, config: &CollectionConfig) {
        *self.names.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(SpaceNames::of(config));
    }

    /// Appends the next point's sparse vectors and multivectors (moved out of `vectors`).
    pub fn push(&mut self, vectors: &mut PointVectors) {
        for (i, column) in self.sparse.iter_mut().enumerate() {
            column.push(vectors.sparse.get_mut(i).and_then(Option::take));
        }
        for (i, column) in self.multi.iter_mut().enumerate() {
            column.push(vectors.multi.get_mut(i).and_then(Option::take));
        }
    }

    pub fn sparse_vector(&self, space: usize, offset: u32) -> Option<&SparseVector> {
        self.sparse.get(space).and_then(|c| c.get(offset))
    }

    pub fn multi_vector(&self, space: usize, offset: u32) -> Option<&[f32]> {
        self.multi.get(space).and_then(|c| c.get(offset))
    }

    /// The sparse vectors and multivectors of the point at `offset`, by space.
    pub fn at(&self, offset: u32) -> (Vec<Option<SparseVector>>, Vec<Option<Vec<f32>>>) {
        (
            self.sparse.iter().map(|c| c.get(offset).cloned()).collect(),
            self.multi
                .iter()
                .map(|c| c.get(offset).map(<[f32]>::to_vec))
                .collect(),
        )
    }

    /// Every point's sparse vectors and multivectors, by space (what a seal writes).
    pub fn all(&self) -> (Vec<SparseVectors>, Vec<MultiVectors>) {
        (
            self.sparse.iter().map(|c| c.vectors().to_vec()).collect(),
            self.multi.iter().map(|c| c.vectors().to_vec()).collect(),
        )
    }

    pub fn search_sparse(
        &self,
        space: usize,
        query: &SparseVector,
        k: usize,
        accept: &dyn Fn(u32) -> bool,
    ) -> crate::Result<Vec<SegmentHit>> {
        self.sparse
            .get(space)
            .map_or_else(|| Ok(Vec::new()), |c| c.search(query, k, accept))
    }

    pub fn search_multi(
        &self,
        space: usize,
        rows: &[f32],
        k: usize,
        accept: &dyn Fn(u32) -> bool,
    ) -> Vec<SegmentHit> {
        self.multi
            .get(space)
            .map_or_else(Vec::new, |c| c.search(rows, k, accept))
    }

    /// Points `live` takes with a vector in sparse space `space`, and how many hold each of
    /// `terms`.
    pub fn sparse_frequencies(
        &self,
        space: usize,
        terms: &[u32],
        live: &dyn Fn(u32) -> bool,
    ) -> crate::Result<(u64, Vec<u64>)> {
        self.sparse
            .get(space)
            .map_or(Ok((0, vec![0; terms.len()])), |c| {
                c.frequencies(terms, live)
            })
    }

    /// `sparse_frequencies` of every offset but the `dead` ones.
    pub fn sparse_frequencies_except(
        &self,
        space: usize,
        terms: &[u32],
        dead: &roaring::RoaringBitmap,
    ) -> crate::Result<(u64, Vec<u64>)> {
        self.sparse
            .get(space)
            .map_or(Ok((0, vec![0; terms.len()])), |c| {
                c.frequencies_except(terms, dead)
            })
    }

    pub fn dram_bytes(&self) -> usize {
        self.sparse
            .iter()
            .map(SparseColumn::dram_bytes)
            .sum::<usize>()
            + self
                .multi
                .iter()
                .map(MultiColumn::dram_bytes)
                .sum::<usize>()
    }
}
