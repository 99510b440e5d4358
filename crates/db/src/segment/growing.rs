//! The growing segment: points in DRAM, appended in write order. A writer only appends (a
//! copy and a bit of bookkeeping under the lock); the collection's indexer links new points
//! into an HNSW graph afterwards, off the write path and outside the segment's lock: it
//! holds a shared handle on the rows it links while it plans an insertion (milliseconds at
//! 768-d), and rows written meanwhile wait beside them (`pending`) instead of the writer
//! waiting for the plan. A search walks the graph over the
//! linked prefix and scans the few points not linked yet, so every point is searchable the
//! moment its write returns. Deleting sets a bit; offsets are never reused, so a frozen
//! segment's offsets are the sealed segment's.

use std::sync::{Arc, RwLock};

use diskvec_index::hnsw::GrowingHnsw;
use diskvec_vector::Metric;
use roaring::RoaringBitmap;

use super::seal_input::{SealInput, VectorPart};
use super::{closest, Points, SegmentHit};
use crate::config::CollectionConfig;
use crate::filter::{Candidates, Filter, PayloadIndex, PayloadIndexKind};
use crate::ops::PointRecord;
use crate::{Payload, PointId};

/// Segments up to this size are scanned: exact, and as fast as a graph walk.
const SCAN_BELOW: usize = 1_000;

pub(crate) struct Growing {
    dim: usize,
    metric: Metric,
    /// Metric-prepared vectors, row-major: the first rows; `pending` holds the rest. Shared
    /// with the indexer while it plans, and with a seal's input once frozen (no copy: a
    /// frozen segment takes no more points).
    vectors: Arc<Vec<f32>>,
    /// Rows written while the indexer held `vectors`; moved into it by the first write
    /// that finds it unshared, and at the freeze.
    pending: Vec<f32>,
    /// Links of the first `graph.len()` points (all among `vectors`' rows); only the
    /// indexer extends it.
    graph: Arc<RwLock<GrowingHnsw>>,
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

    fn point(&self, offset: u32) -> (PointId, &Payload) {
        (self.ids[offset as usize], &self.payloads[offset as usize])
    }

    fn candidates(&self, filter: &Filter) -> Option<Candidates> {
        self.index.candidates(filter, self.len() as u32)
    }
}

/// Most bytes of vectors a growing segment reserves up front.
const RESERVE_AT_MOST: usize = 256 << 20;

/// Floats to reserve for a growing segment's vectors: a full segment's (`seal_threshold`
/// rows), up to `RESERVE_AT_MOST`. Reserved address space costs no memory until written;
/// grown by doubling instead, a segment of 20,010 rows held room for 32,768 (98 MiB at
/// 768-d for 59 of rows), and each doubling copied all it had.
fn reserved_floats(config: &CollectionConfig) -> usize {
    (config.seal_threshold.saturating_add(1))
        .saturating_mul(config.dim)
        .min(RESERVE_AT_MOST / 4)
}

impl Growing {
    pub fn new(config: &CollectionConfig, fields: &[(String, PayloadIndexKind)]) -> Self {
        let mut index = PayloadIndex::new();
        for (field, kind) in fields {
            index.add_field(field, *kind);
        }
        Self {
            dim: config.dim,
            metric: config.metric,
            vectors: Arc::new(Vec::with_capacity(reserved_floats(config))),
            pending: Vec::new(),
            graph: Arc::new(RwLock::new(GrowingHnsw::new(
                config.dim,
                config.metric,
                config.hnsw_m,
                config.hnsw_ef_construction,
            ))),
            ids: Vec::new(),
            versions: Vec::new(),
            payloads: Arc::new(Vec::new()),
            deleted: RoaringBitmap::new(),
            index,
            frozen_at: None,
        }
    }

    pub fn live(&self) -> usize {
        self.len() - self.deleted.len() as usize
    }

    /// The vectors, shared (a frozen segment takes no more, so they no longer change; the
    /// freeze settled them all into one array).
    pub fn shared_vectors(&self) -> Arc<Vec<f32>> {
        debug_assert!(self.pending.is_empty(), "vectors shared before settling");
        Arc::clone(&self.vectors)
    }

    pub fn vector(&self, offset: u32) -> &[f32] {
        let at = offset as usize * self.dim;
        match at.checked_sub(self.vectors.len()) {
            None => &self.vectors[at..at + self.dim],
            Some(p) => &self.pending[p..p + self.dim],
        }
    }

    /// Moves the pending rows into `vectors`, copying them if the indexer still holds them
    /// (the freeze calls it once; a frozen segment's rows must be in one array).
    pub fn settle(&mut self) {
        if !self.pending.is_empty() {
            Arc::make_mut(&mut self.vectors).append(&mut self.pending);
        }
    }

    /// Moves the pending rows into `vectors` unless the indexer holds it (never copies);
    /// returns whether it moved any.
    pub fn settle_unshared(&mut self) -> bool {
        if self.pending.is_empty() {
            return false;
        }
        let Some(settled) = Arc::get_mut(&mut self.vectors) else {
            return false;
        };
        settled.append(&mut self.pending);
        true
    }

    /// Appends a point (its vector already prepared); returns its offset.
    /// Appends `point` (its payload moved in, its vector copied into the segment's rows).
    pub fn push(&mut self, point: PointRecord, version: u64) -> u32 {
        let offset = self.ids.len() as u32;
        self.settle_unshared();
        match Arc::get_mut(&mut self.vectors) {
            Some(settled) if self.pending.is_empty() => settled.extend_from_slice(&point.vector),
            _ => self.pending.extend_from_slice(&point.vector),
        }
        self.ids.push(point.id);
        self.versions.push(version);
        self.index.insert(offset, &point.payload);
        Arc::make_mut(&mut self.payloads).push(point.payload);
        offset
    }

    pub fn delete(&mut self, offset: u32) {
        if self.deleted.insert(offset) {
            self.index.remove(offset, &self.payloads[offset as usize]);
        }
    }

    /// The k closest live points matching `filter` to a prepared query: exact for small
    /// segments and for filters the payload index narrows to few candidates, otherwise a
    /// graph search with list size `search_list` that only keeps matching points.
    pub fn search(
        &self,
        query: &[f32],
        k: usize,
        search_list: usize,
        filter: Option<&Filter>,
    ) -> Vec<SegmentHit> {
        let metric_distance = |offset: u32| SegmentHit {
            offset,
            distance: self.metric.distance(query, self.vector(offset)),
        };
        if let Some(offsets) = self.few_candidates(filter) {
            return closest(offsets.into_iter().map(metric_distance).collect(), k);
        }
        if self.len() <= SCAN_BELOW {
            let hits = self
                .matching(filter)
                .into_iter()
                .map(metric_distance)
                .collect();
            return closest(hits, k);
        }
        let graph = self.graph.read().unwrap_or_else(|e| e.into_inner());
        let linked = graph.len() as u32;
        let mut hits: Vec<SegmentHit> = graph
            .search(&self.vectors, query, k, search_list.max(k), &|o| {
                self.matches(o, filter)
            })
            .into_iter()
            .map(|(distance, offset)| SegmentHit { offset, distance })
            .collect();
        drop(graph);
        // Points the indexer has not linked yet are scanned.
        hits.extend(
            (linked..self.len() as u32)
                .filter(|&o| self.matches(o, filter))
                .map(metric_distance),
        );
        closest(hits, k)
    }

    /// Points not linked into the graph yet.
    pub fn unlinked(&self) -> usize {
        self.len() - self.graph.read().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// What the indexer needs to link the next point, taken under the segment's lock and
    /// used after it is released: the graph and the settled rows. `None` when every settled
    /// row is linked (rows still pending are settled by the next write).
    pub fn linker(&self) -> Option<Linker> {
        let linked = self.graph.read().unwrap_or_else(|e| e.into_inner()).len();
        (linked * self.dim < self.vectors.len()).then(|| Linker {
            graph: Arc::clone(&self.graph),
            vectors: Arc::clone(&self.vectors),
        })
    }

    /// The points (not deletes or indexes) to seal from, taken under a short read lock:
    /// vectors and payloads shared, not copied.
    pub fn seal_input(&self) -> SealInput {
        SealInput {
            dim: self.dim,
            parts: vec![VectorPart::Frozen {
                vectors: self.shared_vectors(),
                offsets: None,
            }],
            ids: self.ids.clone(),
            versions: self.versions.clone(),
            payloads: Arc::clone(&self.payloads),
        }
    }

    pub fn dram_bytes(&self) -> usize {
        (self.vectors.len() + self.pending.capacity()) * 4
            + self
                .graph
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .dram_bytes()
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

/// The indexer's handle on a growing segment: its graph and the rows the graph may link.
pub(crate) struct Linker {
    graph: Arc<RwLock<GrowingHnsw>>,
    vectors: Arc<Vec<f32>>,
}

impl Linker {
    /// Links the next unlinked point. The insertion is planned under the graph's read lock
    /// (searches go on) and applied under its write lock, which is held only to copy link
    /// lists. Only the indexer links, so nothing changes the graph between the two.
    pub fn link_next(&self) {
        let plan = {
            let graph = self.graph.read().unwrap_or_else(|e| e.into_inner());
            graph.plan(&self.vectors)
        };
        self.graph
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .apply_planned(&self.vectors, plan);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(i: u64) -> PointRecord {
        PointRecord {
            id: PointId::Num(i),
            vector: vec![i as f32, 1.0, 2.0, 3.0],
            payload: Payload::new(),
        }
    }

    /// Rows written while the indexer plans wait in `pending` and read as any other; the
    /// next write (or the indexer) settles them once the indexer lets go, and the graph
    /// only ever links settled rows.
    #[test]
    fn rows_written_while_the_indexer_plans_are_kept_beside_and_settled_after() {
        let config = CollectionConfig::new(4, Metric::L2);
        let mut g = Growing::new(&config, &[]);
        for i in 0..10 {
            g.push(record(i), i);
        }
        let linker = g.linker().expect("ten rows to link");
        for i in 10..15 {
            g.push(record(i), i);
        }
        assert_eq!(g.pending.len(), 5 * 4, "the indexer held the rows");
        linker.link_next();
        for i in 0..15u32 {
            assert_eq!(g.vector(i)[0], i as f32);
        }
        drop(linker);
        while let Some(linker) = g.linker() {
            linker.link_next();
        }
        assert_eq!(
            g.unlinked(),
            5,
            "pending rows are not linked before they settle"
        );
        assert!(g.settle_unshared());
        assert!(g.pending.is_empty());
        while let Some(linker) = g.linker() {
            linker.link_next();
        }
        assert_eq!(g.unlinked(), 0);
        for i in 0..15u32 {
            assert_eq!(g.vector(i)[0], i as f32);
        }
        // The freeze settles even rows the indexer still holds (by copying them).
        let linker = g.linker();
        assert!(linker.is_none());
        let held = Arc::clone(&g.vectors);
        g.push(record(15), 15);
        g.settle();
        assert_eq!(g.shared_vectors().len(), 16 * 4);
        assert_eq!(held.len(), 15 * 4);
    }
}
