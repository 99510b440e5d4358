use std::sync::{Mutex, RwLock};

use super::links::{BuildLinks, Links};

use diskvec_vector::Metric;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rayon::prelude::*;

use super::search::search_layer;
use super::HnswIndex;
use crate::{Progress, Result};
use diskvec_graph::{reselect, select_diverse, BestFirst};

/// HNSW build parameters (names as in the paper and hnswlib).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HnswParams {
    /// M: links per node on upper levels; level 0 keeps 2M.
    pub m: usize,
    pub ef_construction: usize,
    pub seed: u64,
}

impl Default for HnswParams {
    fn default() -> Self {
        Self {
            m: 16,
            ef_construction: 200,
            seed: 1,
        }
    }
}

impl HnswIndex {
    /// Builds an index of `data` (row-major, `dim` columns) with external `ids`, in parallel.
    pub fn build(
        data: &[f32],
        dim: usize,
        ids: &[i64],
        metric: Metric,
        params: HnswParams,
        progress: &dyn Progress,
    ) -> Result<Self> {
        let n = crate::input::check_build_input(data, dim, ids)?;
        crate::limits::HNSW_M.check(params.m)?;
        crate::limits::EF_CONSTRUCTION.check(params.ef_construction)?;
        let mut prepared = diskvec_vector::to_huge_pages(data);
        prepared
            .chunks_exact_mut(dim)
            .for_each(|v| metric.prepare(v));
        // The neighbour heuristic needs a true metric: inner-product indexes are linked in L2
        // over augmented vectors (same order as -dot), then searched with -dot as usual.
        let (graph_data, graph_dim, graph_metric) = if metric == Metric::InnerProduct {
            let (aug, adim) = diskvec_vector::mips_to_l2(&prepared, dim);
            (aug, adim, Metric::L2)
        } else {
            (diskvec_vector::to_huge_pages(&prepared), dim, metric)
        };
        // Levels are drawn up front, so the build is reproducible apart from thread timing.
        let ml = 1.0 / (params.m as f64).ln();
        let mut rng = SmallRng::seed_from_u64(params.seed);
        let levels: Vec<usize> = (0..n)
            .map(|_| ((-(rng.random::<f64>().max(1e-12)).ln() * ml) as usize).min(16))
            .collect();
        let links: BuildLinks = levels
            .iter()
            .map(|&l| (0..=l).map(|_| RwLock::new(Vec::new())).collect())
            .collect();
        let mut index = HnswIndex {
            metric: graph_metric,
            dim: graph_dim,
            data: graph_data,
            ids: ids.to_vec(),
            links: Links::Building(links),
            entry: 0,
            top_level: levels[0],
            params,
        };
        progress.phase("HNSW build", n as u64);
        let entry = Mutex::new((0u32, levels[0]));
        progress.advance(1);
        (1..n as u32).into_par_iter().for_each_init(
            || BestFirst::new(n, params.ef_construction),
            |search, q| {
                index.insert(q, levels[q as usize], &entry, search);
                progress.advance(1);
            },
        );
        let (e, top) = *entry.lock().unwrap();
        index.entry = e;
        index.top_level = top;
        index.metric = metric;
        index.dim = dim;
        index.data = prepared;
        index.links.freeze();
        Ok(index)
    }

    fn max_links(&self, level: usize) -> usize {
        if level == 0 {
            2 * self.params.m
        } else {
            self.params.m
        }
    }

    fn insert(&self, q: u32, level: usize, entry: &Mutex<(u32, usize)>, search: &mut BestFirst) {
        // A node above the current top holds the entry lock for its whole insertion, as
        // hnswlib does, so the entry point never points at a half-linked node.
        let guard = entry.lock().unwrap_or_else(|e| e.into_inner());
        let (ep, top) = *guard;
        let held = if level > top {
            Some(guard)
        } else {
            drop(guard);
            None
        };
        let qv = self.vector(q);
        let start = self.metric.distance(qv, self.vector(ep));
        let (ep, ep_dist) = if top > level {
            self.descend(qv, (ep, start), top, level + 1)
        } else {
            (ep, start)
        };
        let Links::Building(lists) = &self.links else {
            unreachable!("HNSW lists are frozen only once every node is inserted")
        };
        let mut entries = vec![(ep_dist, ep)];
        for lc in (0..=level.min(top)).rev() {
            let found = search_layer(self, qv, &entries, self.params.ef_construction, lc, search);
            let chosen = self.select(&found, self.params.m);
            *lists[q as usize][lc].write().unwrap() = chosen.clone();
            for &nb in &chosen {
                let mut list = lists[nb as usize][lc].write().unwrap();
                list.push(q);
                if list.len() > self.max_links(lc) {
                    *list = reselect(nb, &list, self.max_links(lc), |a, b| {
                        self.row_distance(a, b)
                    });
                }
            }
            entries = found;
        }
        if let Some(mut g) = held {
            *g = (q, level);
        }
    }

    /// hnswlib's neighbour heuristic over the built graph's vectors.
    fn select(&self, sorted: &[(f32, u32)], m: usize) -> Vec<u32> {
        select_diverse(sorted, m, |a, b| self.row_distance(a, b))
    }

    fn row_distance(&self, a: u32, b: u32) -> f32 {
        self.metric.distance(self.vector(a), self.vector(b))
    }
}
