//! The growing segment: points in DRAM, appended in write order, searched by scanning
//! (exact). Deleting sets a bit; the offset is never reused, so a frozen segment's offsets
//! are the sealed segment's.

use diskvec_vector::Metric;
use roaring::RoaringBitmap;

use super::{closest, SegmentHit};
use crate::filter::{Filter, PayloadIndex, PayloadIndexKind};
use crate::ops::PointRecord;
use crate::{Payload, PointId};

pub(crate) struct Growing {
    dim: usize,
    metric: Metric,
    /// Metric-prepared vectors, row-major.
    vectors: Vec<f32>,
    pub ids: Vec<PointId>,
    pub versions: Vec<u64>,
    pub payloads: Vec<Payload>,
    pub deleted: RoaringBitmap,
    pub index: PayloadIndex,
    /// The last operation applied before the segment was frozen; `None` while active.
    pub frozen_at: Option<u64>,
}

impl Growing {
    pub fn new(dim: usize, metric: Metric, fields: &[(String, PayloadIndexKind)]) -> Self {
        let mut index = PayloadIndex::new();
        for (field, kind) in fields {
            index.add_field(field, *kind);
        }
        Self {
            dim,
            metric,
            vectors: Vec::new(),
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
        let at = offset as usize * self.dim;
        &self.vectors[at..at + self.dim]
    }

    pub fn vectors(&self) -> &[f32] {
        &self.vectors
    }

    /// Appends a point (its vector already prepared); returns its offset.
    pub fn push(&mut self, point: &PointRecord, version: u64) -> u32 {
        let offset = self.ids.len() as u32;
        self.vectors.extend_from_slice(&point.vector);
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

    /// Exact k closest live points matching `filter` to a prepared query.
    pub fn search(&self, query: &[f32], k: usize, filter: Option<&Filter>) -> Vec<SegmentHit> {
        let score = |offset: u32| SegmentHit {
            offset,
            distance: self.metric.distance(query, self.vector(offset)),
        };
        let hits: Vec<SegmentHit> = match filter {
            None => (0..self.len() as u32)
                .filter(|&o| self.is_live(o))
                .map(score)
                .collect(),
            Some(_) => self.matching(filter).into_iter().map(score).collect(),
        };
        closest(hits, k)
    }

    /// Copies another segment's points (not its deletes or indexes): what sealing builds
    /// from, taken under a short read lock.
    pub fn clone_points_from(&mut self, other: &Growing) {
        self.vectors = other.vectors.clone();
        self.ids = other.ids.clone();
        self.versions = other.versions.clone();
        self.payloads = other.payloads.clone();
    }

    pub fn dram_bytes(&self) -> usize {
        self.vectors.capacity() * 4
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
