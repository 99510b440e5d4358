//! An HNSW graph that grows one point at a time: the index of a database's growing segment.
//! It holds only links; the vectors stay with the caller, who passes them (row-major,
//! metric-prepared, in the space's storage type) to every call, so the segment keeps one
//! copy. One writer appends
//! (`&mut self`), searches share it (`&self`); the caller's lock orders them. Searches can be
//! restricted to accepted points: rejected ones are still walked through, and the search
//! keeps going until it has `ef` accepted ones or runs out.

use std::cell::RefCell;

use diskvec_graph::{reselect, select_diverse, Accept, BestFirst, Neighbors, Scorer};
use diskvec_vector::{Metric, TypedRows};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::fetch_ahead::HEAD_LINES;
use super::search::RowDistances;

thread_local! {
    /// Each thread's search memory, grown to the largest graph it searched (searches of a
    /// growing segment come from many threads, each with `&self` only).
    static SEARCH: RefCell<BestFirst> = RefCell::new(BestFirst::new(0, 1));
}

/// One level of the growing graph's lists, as the search walks them.
struct GrowingLevel<'a> {
    links: &'a [Vec<Vec<u32>>],
    level: usize,
}

impl Neighbors for GrowingLevel<'_> {
    #[inline]
    fn neighbors_into(&self, id: u32, out: &mut Vec<u32>) {
        if let Some(list) = self.links[id as usize].get(self.level) {
            out.extend_from_slice(list);
        }
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
    /// Level of the next point (drawn ahead so that `plan` needs no `&mut`).
    next_level: usize,
}

/// An insertion worked out by `GrowingHnsw::plan`.
pub struct Insertion {
    q: u32,
    level: usize,
    /// From the top level the point joins down to 0.
    levels: Vec<LevelLinks>,
}

struct LevelLinks {
    level: usize,
    /// The new point's neighbours.
    own: Vec<u32>,
    /// Each neighbour's list with the new point added (pruned when over its bound).
    neighbours: Vec<(u32, Vec<u32>)>,
}

impl GrowingHnsw {
    /// An empty graph; `m` links per point on upper levels (2m on level 0).
    pub fn new(dim: usize, metric: Metric, m: usize, ef_construction: usize) -> Self {
        let mut graph = Self {
            metric,
            dim,
            m: m.max(2),
            ef_construction: ef_construction.max(1),
            links: Vec::new(),
            entry: 0,
            top: 0,
            rng: SmallRng::seed_from_u64(0x6e0),
            next_level: 0,
        };
        graph.next_level = graph.draw_level();
        graph
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
    pub fn push(&mut self, data: &TypedRows) -> u32 {
        let plan = self.plan(data);
        self.apply(plan)
    }

    /// Works out how the next point, `len()`, links in, without changing the graph: the
    /// costly part of an insertion (searches and pruning), done under a shared borrow so
    /// searches keep running. `apply` then only copies lists. The graph must not change
    /// between the two (one writer plans and applies; `apply` re-plans if it did).
    pub fn plan(&self, data: &TypedRows) -> Insertion {
        let q = self.links.len() as u32;
        assert!(
            data.len() >= (q as usize + 1) * self.dim,
            "no vector for point {q}"
        );
        let level = self.next_level;
        let mut levels = Vec::new();
        if q == 0 {
            return Insertion { q, level, levels };
        }
        let qv = &data.row_f32(self.dim, q)[..];
        let mut ep = self.entry;
        let mut ep_dist = data.distance(self.metric, qv, ep);
        for lc in (level + 1..=self.top).rev() {
            (ep, ep_dist) = self.greedy(data, qv, ep, ep_dist, lc);
        }
        let mut entries = vec![(ep_dist, ep)];
        for lc in (0..=level.min(self.top)).rev() {
            let found = self.search_layer(data, qv, &entries, self.ef_construction, lc, None);
            let chosen = self.select(data, &found, self.m);
            let mut neighbours = Vec::with_capacity(chosen.len());
            for &nb in &chosen {
                let mut list = self.links[nb as usize][lc].clone();
                list.push(q);
                if list.len() > self.max_links(lc) {
                    list = reselect(nb, &list, self.max_links(lc), |a, b| {
                        self.row_distance(data, a, b)
                    });
                }
                neighbours.push((nb, list));
            }
            levels.push(LevelLinks {
                level: lc,
                own: chosen,
                neighbours,
            });
            entries = found;
        }
        Insertion { q, level, levels }
    }

    /// Links the planned point in (re-planning first if the graph changed since).
    pub fn apply_planned(&mut self, data: &TypedRows, plan: Insertion) -> u32 {
        if plan.q as usize == self.links.len() && plan.level == self.next_level {
            self.apply(plan)
        } else {
            self.push(data)
        }
    }

    fn apply(&mut self, plan: Insertion) -> u32 {
        let Insertion { q, level, levels } = plan;
        debug_assert_eq!(q as usize, self.links.len());
        self.links.push(vec![Vec::new(); level + 1]);
        for l in levels {
            for (nb, list) in l.neighbours {
                self.links[nb as usize][l.level] = list;
            }
            self.links[q as usize][l.level] = l.own;
        }
        if q == 0 {
            self.entry = 0;
            self.top = level;
        } else if level > self.top {
            self.top = level;
            self.entry = q;
        }
        self.next_level = self.draw_level();
        q
    }

    /// A random level with hnswlib's distribution (1/ln m), at most 16.
    fn draw_level(&mut self) -> usize {
        let ml = 1.0 / (self.m as f64).ln();
        ((-(self.rng.random::<f64>().max(1e-12)).ln() * ml) as usize).min(16)
    }

    fn greedy(
        &self,
        data: &TypedRows,
        q: &[f32],
        mut ep: u32,
        mut ep_dist: f32,
        level: usize,
    ) -> (u32, f32) {
        loop {
            let mut changed = false;
            for &nb in &self.links[ep as usize][level] {
                let d = data.distance(self.metric, q, nb);
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

    /// hnswlib's neighbour heuristic over the caller's vectors.
    fn select(&self, data: &TypedRows, sorted: &[(f32, u32)], m: usize) -> Vec<u32> {
        select_diverse(sorted, m, |a, b| self.row_distance(data, a, b))
    }

    fn row_distance(&self, data: &TypedRows, a: u32, b: u32) -> f32 {
        data.distance_between(self.metric, self.dim, a, b)
    }

    /// Best-first search of one level; returns up to `ef` accepted (distance, offset),
    /// closest first. Rejected points are expanded but not kept.
    fn search_layer(
        &self,
        data: &TypedRows,
        q: &[f32],
        entries: &[(f32, u32)],
        ef: usize,
        level: usize,
        accept: Accept,
    ) -> Vec<(f32, u32)> {
        let walk = |search: &mut BestFirst| {
            search.visited.grow(self.len());
            search.reset(ef);
            for &(d, e) in entries {
                search.enter(e, d, accept);
            }
            let graph = GrowingLevel {
                links: &self.links,
                level,
            };
            match data.as_f32() {
                Some(rows) => {
                    let scorer = RowDistances {
                        metric: self.metric,
                        query: q,
                        data: rows,
                        dim: self.dim,
                    };
                    search.run(&graph, &scorer, accept, |_| {});
                }
                None => {
                    let scorer = TypedDistances {
                        metric: self.metric,
                        query: q,
                        data,
                    };
                    search.run(&graph, &scorer, accept, |_| {});
                }
            }
            search.found().collect()
        };
        SEARCH.with(|cell| match cell.try_borrow_mut() {
            Ok(mut search) => walk(&mut search),
            // A search from inside a search's filter: memory of its own.
            Err(_) => walk(&mut BestFirst::new(self.len(), ef)),
        })
    }

    /// The `k` closest accepted points (of those linked) to a prepared query, searching
    /// with list size `max(ef, k)`: (distance, offset), closest first.
    pub fn search(
        &self,
        data: &TypedRows,
        q: &[f32],
        k: usize,
        ef: usize,
        accept: &dyn Fn(u32) -> bool,
    ) -> Vec<(f32, u32)> {
        if self.is_empty() {
            return Vec::new();
        }
        let mut ep = self.entry;
        let mut ep_dist = data.distance(self.metric, q, ep);
        for lc in (1..=self.top).rev() {
            (ep, ep_dist) = self.greedy(data, q, ep, ep_dist, lc);
        }
        let mut found = self.search_layer(data, q, &[(ep_dist, ep)], ef.max(k), 0, Some(accept));
        found.truncate(k);
        found
    }
}

/// Distances from a prepared query to rows stored narrower than f32 (each widened as it is
/// compared); every unseen neighbour's first lines are fetched before any is compared.
struct TypedDistances<'a> {
    metric: Metric,
    query: &'a [f32],
    data: &'a TypedRows,
}

impl Scorer for TypedDistances<'_> {
    #[inline]
    fn distance(&self, id: u32) -> f32 {
        self.data.distance(self.metric, self.query, id)
    }

    fn distances(&self, ids: &[u32], out: &mut Vec<f32>) {
        let dim = self.query.len();
        for &id in ids {
            self.data.prefetch_row(dim, id, HEAD_LINES);
        }
        out.clear();
        out.extend(ids.iter().map(|&id| self.distance(id)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use diskvec_vector::ElementType;

    fn random(n: usize, dim: usize, seed: u64) -> Vec<f32> {
        let mut rng = SmallRng::seed_from_u64(seed);
        (0..n * dim).map(|_| rng.random_range(-1.0..1.0)).collect()
    }

    /// The first `rows` rows of `data`, stored as `element`.
    fn typed(data: &[f32], dim: usize, rows: usize, element: ElementType) -> TypedRows {
        let mut typed = TypedRows::with_capacity(element, rows * dim);
        data[..rows * dim]
            .chunks_exact(dim)
            .for_each(|r| typed.push_row(r));
        typed
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
        all.sort_by(diskvec_graph::by_distance);
        all.into_iter().take(k).map(|(_, i)| i).collect()
    }

    #[test]
    fn a_stale_plan_is_redone_not_applied() {
        let (n, dim) = (200, 8);
        let data = random(n, dim, 3);
        let mut planned = GrowingHnsw::new(dim, Metric::L2, 8, 40);
        let mut plain = GrowingHnsw::new(dim, Metric::L2, 8, 40);
        let mut next = 0;
        while next < n {
            let rows = typed(&data, dim, next + 1, ElementType::Float32);
            let stale = planned.plan(&rows);
            if next % 7 == 3 && next + 1 < n {
                // Point `next` gets linked in between: the plan is for a point that exists.
                planned.push(&rows);
                plain.push(&rows);
                next += 1;
            }
            let rows = typed(&data, dim, next + 1, ElementType::Float32);
            assert_eq!(planned.apply_planned(&rows, stale), next as u32);
            plain.push(&rows);
            next += 1;
        }
        assert_eq!(planned.len(), n);
        assert_eq!(
            planned.links, plain.links,
            "planned and direct insertions differ"
        );
    }

    /// In float32 and, rounded, in float16 (the rows widened as they are compared).
    #[test]
    fn grows_one_point_at_a_time_with_high_recall_filtered_or_not() {
        let (n, dim) = (3000, 24);
        let mut data = random(n, dim, 1);
        for element in [ElementType::Float32, ElementType::Float16] {
            element.round_in_place(&mut data).unwrap();
            grows_with_high_recall(&data, dim, element);
        }
    }

    fn grows_with_high_recall(data: &[f32], dim: usize, element: ElementType) {
        let n = data.len() / dim;
        let mut g = GrowingHnsw::new(dim, Metric::L2, 16, 100);
        let mut found = [0usize; 2];
        let mut wanted = [0usize; 2];
        let mut rows = TypedRows::with_capacity(element, n * dim);
        for (i, v) in data.chunks_exact(dim).enumerate() {
            rows.push_row(v);
            assert_eq!(g.push(&rows), i as u32);
            // Search as it grows: every point is its own nearest neighbour at once.
            if i % 97 == 0 {
                assert_eq!(g.search(&rows, v, 1, 32, &|_| true)[0].1, i as u32);
            }
        }
        let queries = random(100, dim, 2);
        let odd = |i: u32| i % 10 == 3;
        for q in queries.chunks_exact(dim) {
            for (slot, keep) in [(0, &(|_| true) as &dyn Fn(u32) -> bool), (1, &odd)] {
                let got: Vec<u32> = g
                    .search(&rows, q, 10, 100, keep)
                    .iter()
                    .map(|r| r.1)
                    .collect();
                assert!(got.iter().all(|&i| keep(i)));
                let truth = exact(data, dim, q, 10, keep);
                wanted[slot] += truth.len();
                found[slot] += got.iter().filter(|i| truth.contains(i)).count();
            }
        }
        for slot in 0..2 {
            let recall = found[slot] as f64 / wanted[slot] as f64;
            assert!(
                recall > 0.9,
                "{element}: recall {recall} (filtered: {})",
                slot == 1
            );
        }
        assert!(g
            .search(&rows, &queries[..dim], 5, 50, &|_| false)
            .is_empty());
        assert!(GrowingHnsw::new(dim, Metric::L2, 16, 100)
            .search(&rows, &queries[..dim], 5, 50, &|_| true)
            .is_empty());
    }
}
