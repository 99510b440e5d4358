use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use diskvec_graph::{BestFirst, Neighbors, Scorer};
use diskvec_vector::{check_vectors, Metric, Rows};

use super::fetch_ahead::{distances_in_order, fetch_head};
use super::links::Links;
use super::HnswIndex;
use crate::{limits, IndexError, Result, SearchResult};

/// Memory one searching thread reuses; see `HnswIndex::scratch`.
pub struct HnswScratch(BestFirst);

/// The lists of one level of an HNSW graph, as the search walks them.
pub(crate) struct Level<'a> {
    pub links: &'a Links,
    pub level: usize,
}

impl Neighbors for Level<'_> {
    #[inline]
    fn neighbors_into(&self, id: u32, out: &mut Vec<u32>) {
        self.links
            .with(id, self.level, |list| out.extend_from_slice(list));
    }

    #[inline]
    fn prefetch_list(&self, id: u32) {
        self.links.prefetch(id, self.level);
    }
}

/// Distances from a prepared query to rows of a row-major array, a neighbour list's
/// vectors fetched ahead of their distances (`fetch_ahead.rs`).
pub(crate) struct RowDistances<'a> {
    pub metric: Metric,
    pub query: &'a [f32],
    pub data: &'a [f32],
    pub dim: usize,
}

impl RowDistances<'_> {
    #[inline]
    fn row(&self, i: u32) -> &[f32] {
        &self.data[i as usize * self.dim..(i as usize + 1) * self.dim]
    }
}

impl Scorer for RowDistances<'_> {
    #[inline]
    fn distance(&self, id: u32) -> f32 {
        self.metric.distance(self.query, self.row(id))
    }

    #[inline]
    fn distances(&self, ids: &[u32], out: &mut Vec<f32>) {
        out.clear();
        for &id in ids {
            fetch_head(self.row(id));
        }
        distances_in_order(
            self.metric,
            self.query,
            ids,
            |i| self.row(i),
            |_, d| out.push(d),
        );
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
    search: &mut BestFirst,
) -> Vec<(f32, u32)> {
    search.reset(ef);
    for &(d, e) in entries {
        search.enter(e, d, None);
    }
    let scorer = RowDistances {
        metric: index.metric,
        query,
        data: &index.data,
        dim: index.dim,
    };
    let graph = Level {
        links: &index.links,
        level,
    };
    search.run(&graph, &scorer, None, |_| {});
    search.found().collect()
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

    fn search_one(&self, raw: &[f32], k: usize, ef: usize, search: &mut BestFirst) -> SearchResult {
        let start = Instant::now();
        let mut q = raw.to_vec();
        self.metric.prepare(&mut q);
        let start_dist = self.metric.distance(&q, self.vector(self.entry));
        let (ep, ep_dist) = self.descend(&q, (self.entry, start_dist), self.top_level, 1);
        let found = search_layer(self, &q, &[(ep_dist, ep)], ef.max(k), 0, search);
        let top: Vec<_> = found.into_iter().take(k).collect();
        SearchResult {
            ids: top.iter().map(|&(_, i)| self.ids[i as usize]).collect(),
            distances: top.iter().map(|&(d, _)| d).collect(),
            latency_us: start.elapsed().as_secs_f64() * 1e6,
            ..SearchResult::default()
        }
    }

    /// Searches every row of `queries` with `threads` threads; results in query order.
    pub fn search_batch(
        &self,
        queries: Rows,
        k: usize,
        ef: usize,
        threads: usize,
    ) -> Result<(Vec<SearchResult>, f64)> {
        self.check_queries(queries.data(), queries.dim(), k, ef)?;
        limits::THREADS.check(threads)?;
        let next = AtomicUsize::new(0);
        let start = Instant::now();
        let parts: Vec<Vec<(usize, SearchResult)>> = std::thread::scope(|s| {
            let workers: Vec<_> = (0..threads.clamp(1, queries.len().max(1)))
                .map(|_| {
                    s.spawn(|| {
                        let mut search = BestFirst::new(self.len(), ef.max(k));
                        let mut out = Vec::new();
                        loop {
                            let i = next.fetch_add(1, Ordering::Relaxed);
                            if i >= queries.len() {
                                return out;
                            }
                            out.push((
                                i,
                                self.search_one(queries.get(i as u32), k, ef, &mut search),
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
        let mut results = vec![SearchResult::default(); queries.len()];
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
        HnswScratch(BestFirst::new(self.len(), 1))
    }

    /// Searches one query with the caller's scratch: no allocation proportional to the index.
    pub fn search_with(
        &self,
        query: &[f32],
        k: usize,
        ef: usize,
        scratch: &mut HnswScratch,
    ) -> Result<SearchResult> {
        self.check_queries(query, query.len(), k, ef)?;
        if scratch.0.visited.room() < self.len() {
            return Err(IndexError::InvalidArgument(
                "this scratch was made for a smaller index".into(),
            ));
        }
        Ok(self.search_one(query, k, ef, &mut scratch.0))
    }

    /// Searches one query.
    pub fn search(&self, query: &[f32], k: usize, ef: usize) -> Result<SearchResult> {
        self.search_with(query, k, ef, &mut self.scratch())
    }
}
