//! Segments: the growing one in DRAM that takes writes, and sealed ones whose vectors and
//! graph live on SSD as a DiskANN index. Points inside a segment are addressed by offset;
//! the collection's id tracker maps external ids to (segment, offset).

mod files;
mod growing;
mod sealed;

use std::sync::{Arc, RwLock};

pub(crate) use files::{read_deleted, write_deleted};
pub(crate) use growing::{Growing, SealInput};
pub(crate) use sealed::{seal, Sealed, EXACT_LIMIT};

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
