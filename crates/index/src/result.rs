//! What a search of any index of diskvec answers (the disk index, either HNSW graph).

/// One query's answer and what it cost.
#[derive(Clone, Debug, Default)]
pub struct SearchResult {
    /// External ids, closest first.
    pub ids: Vec<i64>,
    pub distances: Vec<f32>,
    /// Node reads sent to the device (0 for an index in DRAM).
    pub reads: u32,
    /// Nodes found in the DRAM cache instead.
    pub cache_hits: u32,
    /// Nodes expanded (with navigation: re-ranked) from a sector fetched for another node.
    pub free_expansions: u32,
    /// From the moment the query started to its answer.
    pub latency_us: f64,
}
