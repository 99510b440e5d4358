use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use diskvec_vector::{check_vectors, Rows};

use super::fetch_ahead::{distances_in_order, fetch_head};
use super::HnswIndex;
use crate::visited::VisitedSet;
use crate::{limits, IndexError, Result};

/// Memory one searching thread reuses; see `HnswIndex::scratch`.
pub struct HnswScratch(VisitedSet);

/// f32 ordered totally, for heaps.
#[derive(Clone, Copy, PartialEq)]
pub(crate) struct Dist(pub f32);
impl Eq for Dist {}
impl PartialOrd for Dist {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Dist {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// Best-first search of one level from `entries`; returns up to `ef` (distance, id),
/// closest first.
pub(crate) fn search_layer(
    index: &HnswIndex,
    query: &[f32],
    entries: &[(f32, u32)],
    ef: usize,
    level: usize,
    visited: &mut VisitedSet,
) -> Vec<(f32, u32)> {
    visited.clear();
    let mut candidates: BinaryHeap<Reverse<(Dist, u32)>> = BinaryHeap::new();
    let mut results: BinaryHeap<(Dist, u32)> = BinaryHeap::new();
    for &(d, e) in entries {
        if visited.insert(e) {
            candidates.push(Reverse((Dist(d), e)));
            results.push((Dist(d), e));
        }
    }
    while results.len() > ef {
        results.pop();
    }
    let mut fresh = Vec::new();
    while let Some(Reverse((Dist(d), c))) = candidates.pop() {
        if results.len() >= ef && d > results.peek().map_or(f32::INFINITY, |r| r.0 .0) {
            break;
        }
        fresh.clear();
        index.links.with(c, level, |list| {
            for &nb in list {
                if visited.insert(nb) {
                    fetch_head(index.vector(nb));
                    fresh.push(nb);
                }
            }
        });
        let vector = |i: u32| index.vector(i);
        distances_in_order(index.metric, query, &fresh, vector, |nb, dn| {
            if results.len() < ef || dn < results.peek().map_or(f32::INFINITY, |r| r.0 .0) {
                candidates.push(Reverse((Dist(dn), nb)));
                results.push((Dist(dn), nb));
                if results.len() > ef {
                    results.pop();
                }
            }
        });
        // The list the next step will read: fetched while the heaps settle (as hnswlib does).
        if let Some(Reverse((_, next))) = candidates.peek() {
            index.links.prefetch(*next, level);
        }
    }
    let mut out: Vec<(f32, u32)> = results.into_iter().map(|(d, i)| (d.0, i)).collect();
    out.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    out
}

/// One query's answer.
#[derive(Clone, Debug, Default)]
pub struct HnswResult {
    pub ids: Vec<i64>,
    pub distances: Vec<f32>,
    pub latency_us: f64,
}

impl HnswIndex {
    /// Greedy walk from `from` through levels `high` down to `low` (inclusive): at each
    /// level, move to a closer neighbour while there is one. Returns the node and distance.
    pub(crate) fn descend(
        &self,
        q: &[f32],
        from: (u32, f32),
        high: usize,
        low: usize,
    ) -> (u32, f32) {
        let (mut ep, mut ep_dist) = from;
        for lc in (low..=high).rev() {
            loop {
                let mut changed = false;
                self.links.with(ep, lc, |list| {
                    for &nb in list {
                        let d = self.metric.distance(q, self.vector(nb));
                        if d < ep_dist {
                            ep_dist = d;
                            ep = nb;
                            changed = true;
                        }
                    }
                });
                if !changed {
                    break;
                }
            }
        }
        (ep, ep_dist)
    }

    fn search_one(&self, raw: &[f32], k: usize, ef: usize, visited: &mut VisitedSet) -> HnswResult {
        let start = Instant::now();
        let mut q = raw.to_vec();
        self.metric.prepare(&mut q);
        let start_dist = self.metric.distance(&q, self.vector(self.entry));
        let (ep, ep_dist) = self.descend(&q, (self.entry, start_dist), self.top_level, 1);
        let found = search_layer(self, &q, &[(ep_dist, ep)], ef.max(k), 0, visited);
        let top: Vec<_> = found.into_iter().take(k).collect();
        HnswResult {
            ids: top.iter().map(|&(_, i)| self.ids[i as usize]).collect(),
            distances: top.iter().map(|&(d, _)| d).collect(),
            latency_us: start.elapsed().as_secs_f64() * 1e6,
        }
    }

    /// Searches every row of `queries` with `threads` threads; results in query order.
    pub fn search_batch(
        &self,
        queries: Rows,
        k: usize,
        ef: usize,
        threads: usize,
    ) -> Result<(Vec<HnswResult>, f64)> {
        self.check_queries(queries.data(), queries.dim(), k, ef)?;
        limits::THREADS.check(threads)?;
        let next = AtomicUsize::new(0);
        let start = Instant::now();
        let parts: Vec<Vec<(usize, HnswResult)>> = std::thread::scope(|s| {
            let workers: Vec<_> = (0..threads.clamp(1, queries.len().max(1)))
                .map(|_| {
                    s.spawn(|| {
                        let mut visited = VisitedSet::new(self.len());
                        let mut out = Vec::new();
                        loop {
                            let i = next.fetch_add(1, Ordering::Relaxed);
                            if i >= queries.len() {
                                return out;
                            }
                            out.push((
                                i,
                                self.search_one(queries.get(i as u32), k, ef, &mut visited),
                            ));
                        }
                    })
                })
                .collect();
            workers
                .into_iter()
                .map(|w| w.join().unwrap_or_default())
                .collect()
        });
        let seconds = start.elapsed().as_secs_f64();
        let mut results = vec![HnswResult::default(); queries.len()];
        for (i, r) in parts.into_iter().flatten() {
            results[i] = r;
        }
        Ok((results, seconds))
    }

    /// Refuses k and ef out of range, queries of another dimension, and non-finite values.
    fn check_queries(&self, data: &[f32], dim: usize, k: usize, ef: usize) -> Result<()> {
        limits::K.check(k)?;
        limits::EF.check(ef)?;
        if dim != self.dim {
            return Err(IndexError::DimensionMismatch {
                expected: self.dim,
                got: dim,
            });
        }
        check_vectors(data, dim)?;
        Ok(())
    }

    /// Per-thread search memory, reused across queries (a visited mark per node).
    pub fn scratch(&self) -> HnswScratch {
        HnswScratch(VisitedSet::new(self.len()))
    }

    /// Searches one query with the caller's scratch: no allocation proportional to the index.
    pub fn search_with(
        &self,
        query: &[f32],
        k: usize,
        ef: usize,
        scratch: &mut HnswScratch,
    ) -> Result<HnswResult> {
        self.check_queries(query, query.len(), k, ef)?;
        if scratch.0.len() != self.len() {
            return Err(IndexError::InvalidArgument(
                "this scratch belongs to another index".into(),
            ));
        }
        Ok(self.search_one(query, k, ef, &mut scratch.0))
    }

    /// Searches one query.
    pub fn search(&self, query: &[f32], k: usize, ef: usize) -> Result<HnswResult> {
        self.search_with(query, k, ef, &mut self.scratch())
    }
}
