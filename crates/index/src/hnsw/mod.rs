//! HNSW (Malkov & Yashunin 2016): the in-memory baseline the performance briefs compare
//! DiskANN against (M=30, efConstruction=360, ef=100 there). Everything lives in DRAM.

mod build;
mod fetch_ahead;
mod growing;
mod links;
mod search;

pub use build::HnswParams;
pub use growing::{GrowingHnsw, Insertion};
pub use search::HnswScratch;

use diskvec_vector::Metric;

/// An HNSW graph over prepared vectors held in memory.
pub struct HnswIndex {
    pub(crate) metric: Metric,
    pub(crate) dim: usize,
    pub(crate) data: Vec<f32>,
    pub(crate) ids: Vec<i64>,
    /// Per node, per level from 0 up to the node's own: its neighbours (frozen once built).
    pub(crate) links: links::Links,
    pub(crate) entry: u32,
    pub(crate) top_level: usize,
    pub(crate) params: HnswParams,
}

impl HnswIndex {
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    pub fn dim(&self) -> usize {
        self.dim
    }

    pub fn params(&self) -> HnswParams {
        self.params
    }

    /// Bytes held in DRAM: vectors, ids and links.
    pub fn dram_bytes(&self) -> usize {
        let links = match &self.links {
            links::Links::Frozen(frozen) => frozen.dram_bytes(),
            links::Links::Building(lists) => lists
                .iter()
                .map(|levels| {
                    levels
                        .iter()
                        .map(|l| l.read().map(|v| v.capacity() * 4).unwrap_or(0) + 24)
                        .sum::<usize>()
                })
                .sum(),
        };
        self.data.len() * 4 + self.ids.len() * 8 + links
    }

    #[inline]
    pub(crate) fn vector(&self, i: u32) -> &[f32] {
        &self.data[i as usize * self.dim..(i as usize + 1) * self.dim]
    }
}
