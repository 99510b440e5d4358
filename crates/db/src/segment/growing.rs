//! The growing segment: points in DRAM, appended in write order and linked into an HNSW
//! graph as they arrive, so they are searchable at once. Deleting sets a bit; offsets are
//! never reused, so a frozen segment's offsets are the sealed segment's.

use diskvec_index::hnsw::GrowingHnsw;
use roaring::RoaringBitmap;

use super::{closest, SegmentHit, EXACT_LIMIT};
use crate::config::CollectionConfig;
use crate::filter::{Filter, PayloadIndex, PayloadIndexKind};
use crate::ops::PointRecord;
use crate::{Payload, PointId};

/// Segments up to this size are scanned: exact, and as fast as a graph walk.
const SCAN_BELOW: usize = 1_000;

pub(crate) struct Growing {
    graph: GrowingHnsw,
    pub ids: Vec<PointId>,
    pub versions: Vec<u64>,
    pub payloads: Vec<Payload>,
    pub deleted: RoaringBitmap,
    pub index: PayloadIndex,
    /// The last operation applied before the segment was frozen; `None` while active.
    pub frozen_at: Option<u64>,
}

/// What a sealed segment is built from: points by offset.
pub(crate) struct SealInput {
    /// Metric-prepared vectors, row-major.
    pub vectors: Vec<f32>,
    pub ids: Vec<PointId>,
    pub versions: Vec<u64>,
    pub payloads: Vec<Payload>,
}

impl SealInput {
    pub fn new() -> Self {
        Self {
            vectors: Vec::new(),
            ids: Vec::new(),
            versions: Vec::new(),
            payloads: Vec::new(),
        }
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }
}

impl Growing {
    pub fn new(config: &CollectionConfig, fields: &[(String, PayloadIndexKind)]) -> Self {
        let mut index = PayloadIndex::new();
        for (field, kind) in fields {
            index.add_field(field, *kind);
        }
        Self {
            graph: GrowingHnsw::new(
                config.dim,
                config.metric,
                config.hnsw_m,
                config.hnsw_ef_construction,
            ),
            ids: Vec::new(),
            versions: Vec::new(),
            payloads: Vec::new(),
            deleted: RoaringBitmap::new(),
            index,
            frozen_at: None,
        }
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn live(&self) -> usize {
        self.len() - self.deleted.len() as usize
    }

    pub fn vector(&self, offset: u32) -> &[f32] {
        self.graph.vector(offset)
    }

    /// Appends a point (its vector already prepared); returns its offset.
    pub fn push(&mut self, point: &PointRecord, version: u64) -> u32 {
        let offset = self.graph.push(&point.vector);
        debug_assert_eq!(offset as usize, self.ids.len());
        self.ids.push(point.id);
        self.versions.push(version);
        self.index.insert(offset, &point.payload);
        self.payloads.push(point.payload.clone());
        offset
    }

    pub fn delete(&mut self, offset: u32) {
        if self.deleted.insert(offset) {
            let payload = std::mem::take(&mut self.payloads[offset as usize]);
            self.index.remove(offset, &payload);
            self.payloads[offset as usize] = payload;
        }
    }

    pub fn is_live(&self, offset: u32) -> bool {
        !self.deleted.contains(offset)
    }

    pub fn matches(&self, offset: u32, filter: Option<&Filter>) -> bool {
        self.is_live(offset)
            && filter.is_none_or(|f| {
                f.matches(
                    self.ids[offset as usize],
                    Some(&self.payloads[offset as usize]),
                )
            })
    }

    /// Live offsets matching `filter`, ascending.
    pub fn matching(&self, filter: Option<&Filter>) -> Vec<u32> {
        if let Some(f) = filter {
            if let Some(c) = self.index.candidates(f, self.len() as u32) {
                return c
                    .offsets
                    .iter()
                    .filter(|&o| {
                        if c.exact {
                            self.is_live(o)
                        } else {
                            self.matches(o, filter)
                        }
                    })
                    .collect();
            }
        }
        (0..self.len() as u32)
            .filter(|&o| self.matches(o, filter))
            .collect()
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
            distance: self.graph_distance(query, offset),
        };
        let narrowed = filter.and_then(|f| {
            self.index
                .candidates(f, self.len() as u32)
                .filter(|c| c.offsets.len() <= EXACT_LIMIT)
        });
        if self.len() <= SCAN_BELOW || narrowed.is_some() {
            let hits: Vec<SegmentHit> = match (filter, narrowed) {
                (_, Some(c)) => c
                    .offsets
                    .iter()
                    .filter(|&o| {
                        if c.exact {
                            self.is_live(o)
                        } else {
                            self.matches(o, filter)
                        }
                    })
                    .map(metric_distance)
                    .collect(),
                (None, None) => (0..self.len() as u32)
                    .filter(|&o| self.is_live(o))
                    .map(metric_distance)
                    .collect(),
                (Some(_), None) => self
                    .matching(filter)
                    .into_iter()
                    .map(metric_distance)
                    .collect(),
            };
            return closest(hits, k);
        }
        self.graph
            .search(query, k, search_list.max(k), &|o| self.matches(o, filter))
            .into_iter()
            .map(|(distance, offset)| SegmentHit { offset, distance })
            .collect()
    }

    fn graph_distance(&self, query: &[f32], offset: u32) -> f32 {
        self.graph
            .metric()
            .distance(query, self.graph.vector(offset))
    }

    /// A copy of the points (not deletes or indexes) to seal from, taken under a short
    /// read lock.
    pub fn seal_input(&self) -> SealInput {
        SealInput {
            vectors: self.graph.data().to_vec(),
            ids: self.ids.clone(),
            versions: self.versions.clone(),
            payloads: self.payloads.clone(),
        }
    }

    pub fn dram_bytes(&self) -> usize {
        self.graph.dram_bytes()
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
