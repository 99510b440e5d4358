//! The growing segment: points in DRAM, appended in write order. A writer only appends (a
//! copy and a bit of bookkeeping under the lock); the collection's indexer links new points
//! into an HNSW graph afterwards, off the write path. A search walks the graph over the
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
    /// Metric-prepared vectors, row-major. Shared with a seal's input once frozen (no
    /// copy: a frozen segment takes no more points).
    vectors: Arc<Vec<f32>>,
    /// Links of the first `graph.len()` points; the indexer extends it.
    graph: RwLock<GrowingHnsw>,
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

impl Growing {
    pub fn new(config: &CollectionConfig, fields: &[(String, PayloadIndexKind)]) -> Self {
        let mut index = PayloadIndex::new();
        for (field, kind) in fields {
            index.add_field(field, *kind);
        }
        Self {
            dim: config.dim,
            metric: config.metric,
            vectors: Arc::new(Vec::new()),
            graph: RwLock::new(GrowingHnsw::new(
                config.dim,
                config.metric,
                config.hnsw_m,
                config.hnsw_ef_construction,
            )),
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

    /// The vectors, shared (a frozen segment takes no more, so they no longer change).
    pub fn shared_vectors(&self) -> Arc<Vec<f32>> {
        Arc::clone(&self.vectors)
    }

    pub fn vector(&self, offset: u32) -> &[f32] {
        let at = offset as usize * self.dim;
        &self.vectors[at..at + self.dim]
    }

    /// Appends a point (its vector already prepared); returns its offset.
    pub fn push(&mut self, point: &PointRecord, version: u64) -> u32 {
        let offset = self.ids.len() as u32;
        Arc::make_mut(&mut self.vectors).extend_from_slice(&point.vector);
        self.ids.push(point.id);
        self.versions.push(version);
        self.index.insert(offset, &point.payload);
        Arc::make_mut(&mut self.payloads).push(point.payload.clone());
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

    /// Links the next unlinked point, if any; returns whether there was one. The insertion is
    /// planned under the graph's read lock (searches go on) and applied under its write lock,
    /// which is held only to copy link lists. Only the indexer links, so nothing changes the
    /// graph between the two.
    pub fn link_next(&self) -> bool {
        let plan = {
            let graph = self.graph.read().unwrap_or_else(|e| e.into_inner());
            if graph.len() >= self.len() {
                return false;
            }
            graph.plan(&self.vectors)
        };
        self.graph
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .apply_planned(&self.vectors, plan);
        true
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
        self.vectors.capacity() * 4
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
