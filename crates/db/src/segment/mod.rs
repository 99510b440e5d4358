//! Segments: the growing one in DRAM that takes writes, and sealed ones whose vectors and
//! graph live on SSD as a DiskANN index. Points inside a segment are addressed by offset;
//! the collection's id tracker maps external ids to (segment, offset).

mod files;
mod growing;
mod ids;
mod payloads;
mod seal_input;
mod sealed;

use std::sync::{Arc, RwLock};

use crate::filter::{Candidates, Filter};
use crate::{Payload, PointId};

pub(crate) use files::{read_deleted, write_deleted, POINTS_FILE};
pub(crate) use growing::Growing;
pub(crate) use seal_input::{SealInput, VectorPart};
pub(crate) use sealed::{seal, NodeCacheSize, SealBuild, Sealed, SearchDram, EXACT_LIMIT};

/// Matches a segment found for a query: offset and distance (smaller is closer).
#[derive(Clone, Copy, Debug)]
pub(crate) struct SegmentHit {
    pub offset: u32,
    pub distance: f32,
}

/// A segment as the collection holds it.
#[derive(Clone)]
pub(crate) enum Segment {
    /// Taking writes (the active one) or frozen, waiting to be sealed; searched exactly.
    Growing(Arc<RwLock<Growing>>),
    Sealed(Arc<Sealed>),
}

/// What filtering needs of a segment, shared by both kinds.
pub(crate) trait Points {
    fn len(&self) -> usize;
    fn is_live(&self, offset: u32) -> bool;
    fn point(&self, offset: u32) -> (PointId, &Payload);
    /// The payload indexes' candidates for `filter` (see `PayloadIndex::candidates`).
    fn candidates(&self, filter: &Filter) -> Option<Candidates>;

    fn matches(&self, offset: u32, filter: Option<&Filter>) -> bool {
        self.is_live(offset)
            && filter.is_none_or(|f| {
                let (id, payload) = self.point(offset);
                f.matches(id, Some(payload))
            })
    }

    /// Live offsets among the candidates that match (all live ones when the indexes
    /// answered exactly).
    fn matching_candidates(&self, c: &Candidates, filter: &Filter) -> Vec<u32> {
        c.offsets
            .iter()
            .filter(|&o| {
                if c.exact {
                    self.is_live(o)
                } else {
                    self.matches(o, Some(filter))
                }
            })
            .collect()
    }

    /// Live offsets matching `filter`, ascending.
    fn matching(&self, filter: Option<&Filter>) -> Vec<u32> {
        if let Some(f) = filter {
            if let Some(c) = self.candidates(f) {
                return self.matching_candidates(&c, f);
            }
        }
        (0..self.len() as u32)
            .filter(|&o| self.matches(o, filter))
            .collect()
    }

    /// The candidates of a filter the indexes narrow to at most `EXACT_LIMIT` points:
    /// those are searched exactly instead of through a graph.
    fn few_candidates(&self, filter: Option<&Filter>) -> Option<Vec<u32>> {
        let f = filter?;
        let c = self
            .candidates(f)
            .filter(|c| c.offsets.len() <= EXACT_LIMIT)?;
        Some(self.matching_candidates(&c, f))
    }
}

/// Keeps the `k` closest hits, closest first (ties by offset, so answers are repeatable).
pub(crate) fn closest(mut hits: Vec<SegmentHit>, k: usize) -> Vec<SegmentHit> {
    hits.sort_by(|a, b| {
        a.distance
            .total_cmp(&b.distance)
            .then(a.offset.cmp(&b.offset))
    });
    hits.truncate(k);
    hits
}
