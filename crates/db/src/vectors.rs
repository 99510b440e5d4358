//! A point's vectors. A collection has named spaces, dense (a fixed dimension and metric)
//! and sparse (term ids with weights); a point has a vector in any subset of them. Users
//! name spaces (`NamedVectors`); inside the database a space is its index in the
//! collection's config (`PointVectors`), which never changes once the space exists.

use std::collections::BTreeMap;

/// A sparse vector: weights of a few of many dimensions (term ids), kept sorted by index.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SparseVector {
    pub indices: Vec<u32>,
    pub values: Vec<f32>,
}

/// Most non-zero entries one sparse vector may have.
pub const MAX_SPARSE_ENTRIES: usize = 1 << 20;

impl SparseVector {
    /// The vector sorted by index, refused (with the reason) when its two lists differ in
    /// length, a value is not finite, or an index repeats.
    pub fn checked(self) -> Result<Self, String> {
        let Self { indices, values } = self;
        if indices.len() != values.len() {
            return Err(format!(
                "sparse vector has {} indices and {} values; they must be as many",
                indices.len(),
                values.len()
            ));
        }
        if indices.len() > MAX_SPARSE_ENTRIES {
            return Err(format!(
                "sparse vector has {} entries; at most {MAX_SPARSE_ENTRIES}",
                indices.len()
            ));
        }
        if let Some(bad) = values.iter().find(|v| !v.is_finite()) {
            return Err(format!(
                "sparse vector holds a value that is not finite ({bad})"
            ));
        }
        let mut pairs: Vec<(u32, f32)> = indices.into_iter().zip(values).collect();
        pairs.sort_unstable_by_key(|&(i, _)| i);
        if let Some(w) = pairs.windows(2).find(|w| w[0].0 == w[1].0) {
            return Err(format!("sparse vector repeats index {}", w[0].0));
        }
        Ok(Self {
            indices: pairs.iter().map(|&(i, _)| i).collect(),
            values: pairs.iter().map(|&(_, v)| v).collect(),
        })
    }

    pub fn len(&self) -> usize {
        self.indices.len()
    }

    pub fn is_empty(&self) -> bool {
        self.indices.is_empty()
    }

    /// Entries as (index, value), ascending by index.
    pub fn entries(&self) -> impl Iterator<Item = (u32, f32)> + '_ {
        self.indices
            .iter()
            .copied()
            .zip(self.values.iter().copied())
    }
}

/// One vector as a user writes or reads it.
#[derive(Clone, Debug, PartialEq)]
pub enum Vector {
    Dense(Vec<f32>),
    Sparse(SparseVector),
    /// Several vectors of one dimension (a multivector space's, e.g. a late-interaction
    /// model's token embeddings).
    Multi(Vec<Vec<f32>>),
}

/// A point's vectors by space name (`""`: the unnamed dense space of a collection created
/// with one vector).
pub type NamedVectors = BTreeMap<String, Vector>;

/// A point's vectors by space index, as stored: `dense[i]` in the config's dense space `i`
/// (metric-prepared), `sparse[j]` in its sparse space `j` (sorted, checked), `multi[m]` in
/// its multivector space `m` (rows back to back, each prepared). Trailing spaces the point
/// lacks may be left out of the lists.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PointVectors {
    pub dense: Vec<Option<Vec<f32>>>,
    pub sparse: Vec<Option<SparseVector>>,
    pub multi: Vec<Option<Vec<f32>>>,
}

impl PointVectors {
    /// One vector in dense space 0.
    pub fn one_dense(v: Vec<f32>) -> Self {
        Self {
            dense: vec![Some(v)],
            ..Default::default()
        }
    }

    pub fn dense(&self, space: usize) -> Option<&[f32]> {
        self.dense.get(space).and_then(|v| v.as_deref())
    }

    #[cfg(test)]
    pub fn sparse(&self, space: usize) -> Option<&SparseVector> {
        self.sparse.get(space).and_then(|v| v.as_ref())
    }

    pub fn set_dense(&mut self, space: usize, v: Vec<f32>) {
        if self.dense.len() <= space {
            self.dense.resize(space + 1, None);
        }
        self.dense[space] = Some(v);
    }

    pub fn set_multi(&mut self, space: usize, rows: Vec<f32>) {
        if self.multi.len() <= space {
            self.multi.resize(space + 1, None);
        }
        self.multi[space] = Some(rows);
    }

    pub fn set_sparse(&mut self, space: usize, v: SparseVector) {
        if self.sparse.len() <= space {
            self.sparse.resize(space + 1, None);
        }
        self.sparse[space] = Some(v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparse_vectors_are_sorted_and_bad_ones_refused() {
        let v = SparseVector {
            indices: vec![9, 2, 5],
            values: vec![0.9, 0.2, 0.5],
        }
        .checked()
        .unwrap();
        assert_eq!(v.indices, vec![2, 5, 9]);
        assert_eq!(v.values, vec![0.2, 0.5, 0.9]);
        let bad = |indices: Vec<u32>, values: Vec<f32>| {
            SparseVector { indices, values }.checked().unwrap_err()
        };
        assert!(bad(vec![1, 2], vec![1.0]).contains("as many"));
        assert!(bad(vec![1, 1], vec![1.0, 2.0]).contains("repeats index 1"));
        assert!(bad(vec![1], vec![f32::NAN]).contains("not finite"));
        assert!(SparseVector::default().checked().unwrap().is_empty());
    }

    #[test]
    fn point_vectors_grow_to_the_space_set() {
        let mut p = PointVectors::default();
        p.set_sparse(2, SparseVector::default());
        assert_eq!(p.sparse.len(), 3);
        assert!(p.sparse(1).is_none() && p.sparse(2).is_some());
        assert!(p.dense(0).is_none());
    }
}
