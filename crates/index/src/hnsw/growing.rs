//! An HNSW graph that grows one point at a time: the index of a database's growing segment.
//! It holds only links; the vectors stay with the caller, who passes them (row-major,
//! metric-prepared) to every call, so the segment keeps one copy. One writer appends
//! (`&mut self`), searches share it (`&self`); the caller's lock orders them. Searches can be
//! restricted to accepted points: rejected ones are still walked through, and the search
//! keeps going until it has `ef` accepted ones or runs out.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use diskvec_vector::Metric;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::search::Dist;

/// A visited set for one search: one bit per point.
struct Bits(Vec<u64>);
impl Bits {
    fn new(n: usize) -> Self {
        Self(vec![0; n.div_ceil(64)])
    }
    /// True the first time `i` is seen.
    fn insert(&mut self, i: u32) -> bool {
        let (w, b) = (i as usize / 64, i % 64);
        let fresh = self.0[w] & (1 << b) == 0;
        self.0[w] |= 1 << b;
        fresh
    }
}

pub struct GrowingHnsw {
    metric: Metric,
    dim: usize,
    m: usize,
    ef_construction: usize,
    /// Per point, per level from 0 up to its own: neighbours.
    links: Vec<Vec<Vec<u32>>>,
    entry: u32,
    top: usize,
    rng: SmallRng,
}

impl GrowingHnsw {
    /// An empty graph; `m` links per point on upper levels (2m on level 0).
    pub fn new(dim: usize, metric: Metric, m: usize, ef_construction: usize) -> Self {
        Self {
            metric,
            dim,
            m: m.max(2),
            ef_construction: ef_construction.max(1),
            links: Vec::new(),
            entry: 0,
            top: 0,
            rng: SmallRng::seed_from_u64(0x6e0),
        }
    }

    pub fn len(&self) -> usize {
        self.links.len()
    }

    pub fn is_empty(&self) -> bool {
        self.links.is_empty()
    }

    pub fn dim(&self) -> usize {
        self.dim
    }

    pub fn metric(&self) -> Metric {
        self.metric
    }

    #[inline]
    fn vector<'a>(&self, data: &'a [f32], i: u32) -> &'a [f32] {
        let at = i as usize * self.dim;
        &data[at..at + self.dim]
    }

    /// Bytes of the links (the vectors are the caller's).
    pub fn dram_bytes(&self) -> usize {
        self.links
            .iter()
            .map(|l| 24 + l.iter().map(|v| 24 + v.capacity() * 4).sum::<usize>())
            .sum::<usize>()
    }

    fn max_links(&self, level: usize) -> usize {
        if level == 0 {
            2 * self.m
        } else {
            self.m
        }
    }

    /// Links the next point, `len()`, whose vector is row `len()` of `data` (which holds
    /// at least that many rows); returns its offset.
    pub fn push(&mut self, data: &[f32]) -> u32 {
        let q = self.links.len() as u32;
        assert!(
            data.len() >= (q as usize + 1) * self.dim,
            "no vector for point {q}"
        );
        let vector = self.vector(data, q);
        let ml = 1.0 / (self.m as f64).ln();
        let level = ((-(self.rng.random::<f64>().max(1e-12)).ln() * ml) as usize).min(16);
        self.links.push(vec![Vec::new(); level + 1]);
        if q == 0 {
            self.entry = 0;
            self.top = level;
            return q;
        }
        let qv = vector.to_vec();
        let mut ep = self.entry;
        let mut ep_dist = self.metric.distance(&qv, self.vector(data, ep));
        for lc in (level + 1..=self.top).rev() {
            (ep, ep_dist) = self.greedy(data, &qv, ep, ep_dist, lc);
        }
        let mut entries = vec![(ep_dist, ep)];
        for lc in (0..=level.min(self.top)).rev() {
            let found = self.search_layer(data, &qv, &entries, self.ef_construction, lc, &|_| true);
            let chosen = self.select(data, &found, self.m);
            for &nb in &chosen {
                self.links[nb as usize][lc].push(q);
                if self.links[nb as usize][lc].len() > self.max_links(lc) {
                    let nv = self.vector(data, nb);
                    let mut pool: Vec<(f32, u32)> = self.links[nb as usize][lc]
                        .iter()
                        .map(|&o| (self.metric.distance(nv, self.vector(data, o)), o))
                        .collect();
                    pool.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
                    self.links[nb as usize][lc] = self.select(data, &pool, self.max_links(lc));
                }
            }
            self.links[q as usize][lc] = chosen;
            entries = found;
        }
        if level > self.top {
            self.top = level;
            self.entry = q;
        }
        q
    }

    fn greedy(
        &self,
        data: &[f32],
        q: &[f32],
        mut ep: u32,
        mut ep_dist: f32,
        level: usize,
    ) -> (u32, f32) {
        loop {
            let mut changed = false;
            for &nb in &self.links[ep as usize][level] {
                let d = self.metric.distance(q, self.vector(data, nb));
                if d < ep_dist {
                    ep_dist = d;
                    ep = nb;
                    changed = true;
                }
            }
            if !changed {
                return (ep, ep_dist);
            }
        }
    }

    /// hnswlib's heuristic: keep a candidate unless a kept one is closer to it than the
    /// query is.
    fn select(&self, data: &[f32], sorted: &[(f32, u32)], m: usize) -> Vec<u32> {
        // As hnswlib: with no more candidates than room, keep them all; pruning a short
        // list only strands points (unreachable nodes in small graphs).
        if sorted.len() <= m {
            return sorted.iter().map(|&(_, c)| c).collect();
        }
        let mut kept: Vec<u32> = Vec::with_capacity(m);
        for &(d, c) in sorted {
            if kept.len() >= m {
                break;
            }
            let cv = self.vector(data, c);
            if kept
                .iter()
                .all(|&k| self.metric.distance(cv, self.vector(data, k)) > d)
            {
                kept.push(c);
            }
        }
        kept
    }

    /// Best-first search of one level; returns up to `ef` accepted (distance, offset),
    /// closest first. Rejected points are expanded but not kept.
    fn search_layer(
        &self,
        data: &[f32],
        q: &[f32],
        entries: &[(f32, u32)],
        ef: usize,
        level: usize,
        accept: &dyn Fn(u32) -> bool,
    ) -> Vec<(f32, u32)> {
        let mut visited = Bits::new(self.len());
        let mut candidates: BinaryHeap<Reverse<(Dist, u32)>> = BinaryHeap::new();
        let mut results: BinaryHeap<(Dist, u32)> = BinaryHeap::new();
        for &(d, e) in entries {
            if visited.insert(e) {
                candidates.push(Reverse((Dist(d), e)));
                if accept(e) {
                    results.push((Dist(d), e));
                }
            }
        }
        while results.len() > ef {
            results.pop();
        }
        while let Some(Reverse((Dist(d), c))) = candidates.pop() {
            let worst = results.peek().map_or(f32::INFINITY, |r| r.0 .0);
            if results.len() >= ef && d > worst {
                break;
            }
            let Some(list) = self.links[c as usize].get(level) else {
                continue;
            };
            for &nb in list {
                if !visited.insert(nb) {
                    continue;
                }
                let dn = self.metric.distance(q, self.vector(data, nb));
                let worst = results.peek().map_or(f32::INFINITY, |r| r.0 .0);
                if results.len() < ef || dn < worst {
                    candidates.push(Reverse((Dist(dn), nb)));
                    if accept(nb) {
                        results.push((Dist(dn), nb));
                        if results.len() > ef {
                            results.pop();
                        }
                    }
                }
            }
        }
        let mut out: Vec<(f32, u32)> = results.into_iter().map(|(d, i)| (d.0, i)).collect();
        out.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        out
    }

    /// The `k` closest accepted points (of those linked) to a prepared query, searching
    /// with list size `max(ef, k)`: (distance, offset), closest first.
    pub fn search(
        &self,
        data: &[f32],
        q: &[f32],
        k: usize,
        ef: usize,
        accept: &dyn Fn(u32) -> bool,
    ) -> Vec<(f32, u32)> {
        if self.is_empty() {
            return Vec::new();
        }
        let mut ep = self.entry;
        let mut ep_dist = self.metric.distance(q, self.vector(data, ep));
        for lc in (1..=self.top).rev() {
            (ep, ep_dist) = self.greedy(data, q, ep, ep_dist, lc);
        }
        let mut found = self.search_layer(data, q, &[(ep_dist, ep)], ef.max(k), 0, accept);
        found.truncate(k);
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn random(n: usize, dim: usize, seed: u64) -> Vec<f32> {
        let mut rng = SmallRng::seed_from_u64(seed);
        (0..n * dim).map(|_| rng.random_range(-1.0..1.0)).collect()
    }

    fn exact(
        data: &[f32],
        dim: usize,
        q: &[f32],
        k: usize,
        keep: &dyn Fn(u32) -> bool,
    ) -> Vec<u32> {
        let mut all: Vec<(f32, u32)> = data
            .chunks_exact(dim)
            .enumerate()
            .filter(|(i, _)| keep(*i as u32))
            .map(|(i, v)| (Metric::L2.distance(q, v), i as u32))
            .collect();
        all.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        all.into_iter().take(k).map(|(_, i)| i).collect()
    }

    #[test]
    fn grows_one_point_at_a_time_with_high_recall_filtered_or_not() {
        let (n, dim) = (3000, 24);
        let data = random(n, dim, 1);
        let mut g = GrowingHnsw::new(dim, Metric::L2, 16, 100);
        let mut found = [0usize; 2];
        let mut wanted = [0usize; 2];
        for (i, v) in data.chunks_exact(dim).enumerate() {
            assert_eq!(g.push(&data[..(i + 1) * dim]), i as u32);
            // Search as it grows: every point is its own nearest neighbour at once.
            if i % 97 == 0 {
                assert_eq!(g.search(&data, v, 1, 32, &|_| true)[0].1, i as u32);
            }
        }
        let queries = random(100, dim, 2);
        let odd = |i: u32| i % 10 == 3;
        for q in queries.chunks_exact(dim) {
            for (slot, keep) in [(0, &(|_| true) as &dyn Fn(u32) -> bool), (1, &odd)] {
                let got: Vec<u32> = g
                    .search(&data, q, 10, 100, keep)
                    .iter()
                    .map(|r| r.1)
                    .collect();
                assert!(got.iter().all(|&i| keep(i)));
                let truth = exact(&data, dim, q, 10, keep);
                wanted[slot] += truth.len();
                found[slot] += got.iter().filter(|i| truth.contains(i)).count();
            }
        }
        for slot in 0..2 {
            let recall = found[slot] as f64 / wanted[slot] as f64;
            assert!(recall > 0.9, "recall {recall} (filtered: {})", slot == 1);
        }
        assert!(g
            .search(&data, &queries[..dim], 5, 50, &|_| false)
            .is_empty());
        assert!(GrowingHnsw::new(dim, Metric::L2, 16, 100)
            .search(&data, &queries[..dim], 5, 50, &|_| true)
            .is_empty());
    }
}
