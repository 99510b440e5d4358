//! How an HNSW search walks a neighbour list through memory: the unseen neighbours first,
//! each vector's first lines asked for, then their distances in order, the rest of the next
//! vector fetched while the current one is computed. The cache misses of a whole list
//! overlap instead of coming one by one.

use diskvec_vector::{prefetch, Metric};

/// Cache lines of every unseen neighbour's vector fetched before any distance is computed.
/// Measured (2026-11-23, k=100, ef=150, in one process): 2 lines up front plus the rest one
/// neighbour ahead answer 8% more queries on 384-d vectors than 4 lines up front alone, and
/// 1% more at 768-d.
pub(crate) const HEAD_LINES: usize = 2;
/// Enough lines for the rest of a 1,024-d vector; the hardware prefetcher follows a longer one.
const REST_LINES: usize = 64;

/// Starts fetching the head of a neighbour's vector (call for every unseen neighbour of a
/// list before `distances_in_order`).
#[inline]
pub(crate) fn fetch_head(vector: &[f32]) {
    prefetch(vector, HEAD_LINES);
}

/// Calls `each(node, distance)` for every node of `nodes` in order, fetching the rest of
/// the next node's vector before computing the current distance.
#[inline]
pub(crate) fn distances_in_order<'a>(
    metric: Metric,
    query: &[f32],
    nodes: &[u32],
    vector: impl Fn(u32) -> &'a [f32],
    mut each: impl FnMut(u32, f32),
) {
    for (i, &node) in nodes.iter().enumerate() {
        if let Some(&next) = nodes.get(i + 1) {
            let v = vector(next);
            prefetch(&v[(HEAD_LINES * 16).min(v.len())..], REST_LINES);
        }
        each(node, metric.distance(query, vector(node)));
    }
}
