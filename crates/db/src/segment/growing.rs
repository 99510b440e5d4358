//! The growing segment: points in DRAM, appended in write order. A writer only appends (a
//! copy and a bit of bookkeeping under the lock); the collection's indexer links new points
//! into an HNSW graph afterwards, off the write path and outside the segment's lock: it
//! holds a shared handle on the rows it links while it plans an insertion (milliseconds at
//! 768-d), and rows written meanwhile wait beside them (`pending`) instead of the writer
//! waiting for the plan. A search walks the graph over the
//! linked prefix and scans the few points not linked yet, so every point is searchable the
//! moment its write returns. Deleting sets a bit; offsets are never reused, so a frozen
//! segment's offsets are the sealed segment's.

use std::borrow::Cow;
use std::sync::Arc;

use roaring::RoaringBitmap;

use super::columns::Columns;
use super::dense_rows::{DenseRows, Linker};
use super::seal_input::{SealInput, SealPayloads, SpaceInput, VectorPart};
use super::{Points, SegmentHit};
use crate::config::CollectionConfig;
use crate::filter::{Candidates, Filter, PayloadIndex, PayloadIndexKind};
use crate::ops::StoredPoint;
use crate::vectors::PointVectors;
use crate::{Payload, PointId};

pub(crate) struct Growing {
    /// One per dense space of the collection.
    dense: Vec<DenseRows>,
    /// The sparse and multivector spaces.
    columns: Columns,
    pub ids: Vec<PointId>,
    pub versions: Vec<u64>,
    pub payloads: Arc<Vec<Payload>>,
    pub deleted: RoaringBitmap,
    pub index: PayloadIndex,
    /// The last operation applied before the segment was frozen; `None` while active.
    pub frozen_at: Option<u64>,
}

impl Points for Growing {
    fn len(&self) -> usize {
        self.ids.len()
    }

    fn is_live(&self, offset: u32) -> bool {
        !self.deleted.contains(offset)
    }

    fn deleted(&self) -> RoaringBitmap {
        self.deleted.clone()
    }

    fn text_index(
        &self,
        key: &crate::filter::KeyPath,
    ) -> Option<Arc<crate::filter::TextIndexParams>> {
        self.index.text_params(key)
    }

    fn point(&self, offset: u32) -> (PointId, Cow<'_, Payload>) {
        (
            self.ids[offset as usize],
            Cow::Borrowed(&self.payloads[offset as usize]),
        )
    }

    fn columns(&self) -> &Columns {
        &self.columns
    }

    fn candidates(&self, filter: &Filter) -> Option<Candidates> {
        self.index.candidates(filter, self.len() as u32)
    }

    fn has_vector(&self, offset: u32, space: super::SpaceRef) -> bool {
        match space {
            super::SpaceRef::Dense(i) => self.dense.get(i).is_some_and(|d| d.has(offset)),
        }
    }
}

impl Growing {
    pub fn new(config: &CollectionConfig, fields: &[(String, PayloadIndexKind)]) -> Self {
        let mut index = PayloadIndex::new();
        for (field, kind) in fields {
            index.add_field(field, kind.clone());
        }
        Self {
            dense: config
                .dense
                .iter()
                .map(|space| DenseRows::new(space, config))
                .collect(),
            columns: Columns::new(config),
            ids: Vec::new(),
            versions: Vec::new(),
            payloads: Arc::new(Vec::new()),
            deleted: RoaringBitmap::new(),
            index,
            frozen_at: None,
        }
    }

    /// Follows the collection's spaces after one was added (an empty row set or column,
    /// every point without a vector there) or deleted (its name no longer found).
    pub fn follow_spaces(&mut self, config: &CollectionConfig) {
        let len = self.len();
        for space in config.dense.iter().skip(self.dense.len()) {
            let mut rows = DenseRows::new(space, config);
            for _ in 0..len {
                rows.push(None);
            }
            self.dense.push(rows);
        }
        self.columns.follow(config, len);
    }

    pub fn live(&self) -> usize {
        self.len() - self.deleted.len() as usize
    }

    /// Dense space `space`'s rows.
    pub fn dense(&self, space: usize) -> &DenseRows {
        &self.dense[space]
    }

    /// The vectors of the point at `offset`.
    pub fn vectors(&self, offset: u32) -> PointVectors {
        let (sparse, multi) = self.columns.at(offset);
        PointVectors {
            dense: self.dense.iter().map(|d| d.vector(offset)).collect(),
            sparse,
            multi,
        }
    }

    /// Moves the pending rows of every space into their arrays, copying them if the indexer
    /// still holds them (the freeze calls it once; a frozen segment's rows must be in one
    /// array).
    pub fn settle(&mut self) {
        self.dense.iter_mut().for_each(DenseRows::settle);
    }

    /// Settles the pending rows of every space the indexer does not hold (never copies);
    /// returns whether it moved any.
    pub fn settle_unshared(&mut self) -> bool {
        let mut moved = false;
        for d in &mut self.dense {
            moved |= d.settle_unshared();
        }
        moved
    }

    /// Appends `point` (its payload and vectors moved in, dense ones copied into the
    /// spaces' rows); returns its offset.
    pub fn push(&mut self, point: StoredPoint, version: u64) -> u32 {
        let offset = self.ids.len() as u32;
        let StoredPoint {
            id,
            mut vectors,
            payload,
        } = point;
        for (i, rows) in self.dense.iter_mut().enumerate() {
            rows.push(vectors.dense(i));
        }
        self.columns.push(&mut vectors);
        self.ids.push(id);
        self.versions.push(version);
        self.index.insert(offset, &payload);
        Arc::make_mut(&mut self.payloads).push(payload);
        offset
    }

    pub fn delete(&mut self, offset: u32) {
        if self.deleted.insert(offset) {
            self.index.remove(offset, &self.payloads[offset as usize]);
        }
    }

    /// The k closest live points matching `filter` to a prepared dense query in `space`:
    /// exact for small segments and for filters the payload index narrows to few
    /// candidates, otherwise a graph search with list size `search_list` that only keeps
    /// matching points.
    pub fn search_dense(
        &self,
        space: usize,
        query: &[f32],
        k: usize,
        search_list: usize,
        filter: Option<&Filter>,
        exact: bool,
    ) -> Vec<SegmentHit> {
        let few = self.few_candidates(filter);
        let accept = |o| self.matches(o, filter);
        self.dense[space].search(query, k, search_list, few, exact, &accept)
    }

    /// Rows not linked into the graphs yet (the most of any space).
    pub fn unlinked(&self) -> usize {
        self.dense
            .iter()
            .map(DenseRows::unlinked)
            .max()
            .unwrap_or(0)
    }

    /// What the indexer needs to link the next row of a space that has one, taken under
    /// the segment's lock and used after it is released. `None` when every settled row of
    /// every space is linked (rows still pending are settled by the next write).
    pub fn linker(&self) -> Option<Linker> {
        self.dense.iter().find_map(DenseRows::linker)
    }

    /// The points (not deletes or indexes) to seal from, taken under a short read lock:
    /// dense rows and payloads shared, not copied.
    pub fn seal_input(&self) -> SealInput {
        let len = self.len() as u32;
        let (sparse, multi) = self.columns.all();
        SealInput {
            dense: self
                .dense
                .iter()
                .map(|rows| {
                    let offsets: Vec<u32> = rows.present(len).collect();
                    let all = offsets.len() == len as usize;
                    SpaceInput {
                        dim: rows.dim(),
                        parts: vec![VectorPart::Frozen {
                            vectors: rows.shared_vectors(),
                            offsets: (!all).then(|| offsets.clone()),
                        }],
                        offsets,
                    }
                })
                .collect(),
            sparse,
            multi,
            ids: self.ids.clone(),
            versions: self.versions.clone(),
            payloads: SealPayloads::Shared(Arc::clone(&self.payloads)),
        }
    }

    pub fn dram_bytes(&self) -> usize {
        self.dense.iter().map(DenseRows::dram_bytes).sum::<usize>()
            + self.columns.dram_bytes()
            + self.ids.capacity() * 24
            + self.versions.capacity() * 8
            + self
                .payloads
                .iter()
                .map(|p| 64 + p.len() * 48)
                .sum::<usize>()
            + self.deleted.serialized_size()
            + self.index.dram_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{DenseSpace, SparseSpace};
    use crate::vectors::SparseVector;
    use diskvec_vector::Metric;

    /// Each point has any subset of the spaces; each space's search finds only points
    /// that have a vector in it.
    #[test]
    fn points_have_any_subset_of_the_spaces() {
        let config = CollectionConfig::with_spaces(
            vec![
                DenseSpace::new("a", 2, Metric::L2),
                DenseSpace::new("b", 3, Metric::L2),
            ],
            vec![SparseSpace::new("s", Default::default())],
        );
        let mut g = Growing::new(&config, &[]);
        let mut only_b = PointVectors::default();
        only_b.set_dense(1, vec![0.0, 0.0, 1.0]);
        let mut only_s = PointVectors::default();
        only_s.set_sparse(
            0,
            SparseVector {
                indices: vec![4],
                values: vec![2.0],
            },
        );
        for (i, v) in [PointVectors::one_dense(vec![1.0, 0.0]), only_b, only_s]
            .into_iter()
            .enumerate()
        {
            g.push(
                StoredPoint {
                    id: PointId::Num(i as u64),
                    vectors: v,
                    payload: Payload::new(),
                },
                1,
            );
        }
        let found = |hits: Vec<SegmentHit>| hits.iter().map(|h| h.offset).collect::<Vec<_>>();
        assert_eq!(
            found(g.search_dense(0, &[0.0, 0.0], 10, 10, None, false)),
            vec![0]
        );
        assert_eq!(
            found(g.search_dense(1, &[0.0; 3], 10, 10, None, true)),
            vec![1]
        );
        let q = SparseVector {
            indices: vec![4],
            values: vec![1.0],
        };
        assert_eq!(found(g.search_sparse(0, &q, 10, None).unwrap()), vec![2]);
        assert_eq!(
            g.sparse_frequencies(0, &[4, 5], None).unwrap(),
            (1, vec![1, 0])
        );
        g.delete(2);
        assert!(g.search_sparse(0, &q, 10, None).unwrap().is_empty());
        assert_eq!(g.sparse_frequencies(0, &[4], None).unwrap(), (0, vec![0]));
        let v = g.vectors(1);
        assert!(v.dense(0).is_none() && v.dense(1).is_some() && v.sparse(0).is_none());
        let input = g.seal_input();
        assert_eq!(input.dense[0].offsets, vec![0]);
        assert_eq!(input.dense[1].offsets, vec![1]);
        assert!(input.sparse[0][2].is_some());
        assert!(input.rows_match());
    }
}
