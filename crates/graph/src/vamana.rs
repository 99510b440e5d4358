use rayon::prelude::*;

use crate::adjacency::{Graph, SharedLists};
use crate::prune::robust_prune;
use crate::{BestFirst, GraphVectors, Scorer};

/// Vamana build parameters (names as in the DiskANN paper).
#[derive(Clone, Copy, Debug)]
pub struct VamanaParams {
    /// R: the most out-neighbours a node keeps.
    pub max_degree: usize,
    /// L: candidate-list size of the searches that find neighbours.
    pub build_list: usize,
    /// Prune factor of the second pass; the first pass uses 1.0.
    pub alpha: f32,
    pub seed: u64,
    /// Insert every point twice, first pruning with alpha 1.0 (the paper's build), or once
    /// with `alpha` (half the work; what the shards of a budgeted build use).
    pub two_passes: bool,
}

impl Default for VamanaParams {
    fn default() -> Self {
        Self {
            max_degree: 64,
            build_list: 100,
            alpha: 1.2,
            seed: 1,
            two_passes: true,
        }
    }
}

/// Insertions the threads share out at a time, in order.
const INSERT_WINDOW: usize = 16_384;

/// Reverse edges may overfill a node by this factor before it is pruned back to R,
/// which saves most prunes at the cost of a final clean-up.
const SLACK: f32 = 1.3;

/// Builds a Vamana graph over `vectors` (full precision or 8-bit codes).
/// `progress` is called with the number of insertions done since its last call (`n` per
/// pass) and returns whether to go on: once it says no, the remaining insertions are
/// skipped and the build returns `None` (its caller no longer wants the graph).
pub fn build<V: GraphVectors>(
    vectors: &V,
    params: VamanaParams,
    progress: &(dyn Fn(u64) -> bool + Sync),
) -> Option<Graph> {
    let n = vectors.len();
    let medoid = vectors.medoid();
    let r = params.max_degree.max(1);
    let slack_degree = ((r as f32) * SLACK).ceil() as usize;
    let lists = SharedLists::new(n, slack_degree);
    let order = crate::order::insertion_order(vectors, params.seed);

    let passes: &[f32] = if params.two_passes {
        &[1.0, params.alpha]
    } else {
        &[params.alpha]
    };
    let stopped = std::sync::atomic::AtomicBool::new(false);
    // Each thread's search buffers (a visited bit per node), taken by whichever job runs.
    let scratches = std::sync::Mutex::new(Vec::new());
    for &alpha in passes {
        // In windows of the order, so that the threads insert neighbouring points at the
        // same time (order.rs) rather than one the start of the order and one its middle.
        for window in order.chunks(INSERT_WINDOW) {
            window.par_chunks(256).for_each(|chunk| {
                if stopped.load(std::sync::atomic::Ordering::Relaxed) {
                    return;
                }
                let taken = scratches.lock().unwrap_or_else(|e| e.into_inner()).pop();
                let mut scratch = taken.unwrap_or_else(|| Scratch::new(n, params.build_list));
                for &p in chunk {
                    let node = Insertion {
                        p,
                        medoid,
                        alpha,
                        r,
                    };
                    node.insert(&lists, vectors, &mut scratch);
                }
                scratches
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(scratch);
                if !progress(chunk.len() as u64) {
                    stopped.store(true, std::sync::atomic::Ordering::Relaxed);
                }
            });
            if stopped.load(std::sync::atomic::Ordering::Relaxed) {
                return None;
            }
        }
    }
    // Nodes overfilled within the slack are pruned back to R.
    (0..n as u32)
        .into_par_iter()
        .for_each_init(Vec::new, |ids, p| {
            let list = lists.lock(p);
            if list.len() > r {
                ids.clear();
                ids.extend((0..list.len()).map(|i| list.get(i)));
                let mut pool: Vec<(f32, u32)> =
                    ids.iter().map(|&q| (vectors.distance(p, q), q)).collect();
                list.set(&robust_prune(p, &mut pool, params.alpha, r, vectors));
            }
        });
    Some(lists.finish(medoid))
}

struct Scratch {
    search: BestFirst,
    /// (distance, node) of every node the last search expanded.
    expanded: Vec<(f32, u32)>,
    /// The list of the node being pruned.
    fresh: Vec<u32>,
}

impl Scratch {
    fn new(n: usize, l: usize) -> Self {
        Self {
            search: BestFirst::new(n, l),
            expanded: Vec::new(),
            fresh: Vec::new(),
        }
    }
}

/// Rows whose distance is asked this many places ahead are prefetched, so their misses
/// overlap with the distances before them (measured on 768-d rows in DRAM: 2.2x faster
/// per distance in f32, 4x in 8-bit codes).
const PREFETCH_AHEAD: usize = 6;

/// Distances from row `query` of the vectors being built over.
struct RowScorer<'a, V> {
    vectors: &'a V,
    query: u32,
}

impl<V: GraphVectors> Scorer for RowScorer<'_, V> {
    #[inline]
    fn distance(&self, id: u32) -> f32 {
        self.vectors.distance(self.query, id)
    }

    fn distances(&self, ids: &[u32], out: &mut Vec<f32>) {
        out.clear();
        for &q in ids.iter().take(PREFETCH_AHEAD) {
            self.vectors.prefetch(q);
        }
        for (i, &q) in ids.iter().enumerate() {
            if let Some(&ahead) = ids.get(i + PREFETCH_AHEAD) {
                self.vectors.prefetch(ahead);
            }
            out.push(self.vectors.distance(self.query, q));
        }
    }
}

/// One insertion of point `p`.
struct Insertion {
    p: u32,
    medoid: u32,
    alpha: f32,
    r: usize,
}

impl Insertion {
    fn insert<V: GraphVectors>(&self, lists: &SharedLists, vectors: &V, scratch: &mut Scratch) {
        let p = self.p;
        search_into(lists, self.medoid, p, vectors, scratch);
        let mut pool = std::mem::take(&mut scratch.expanded);
        lists.read_into(p, &mut scratch.fresh);
        for &q in &scratch.fresh {
            pool.push((vectors.distance(p, q), q));
        }
        let chosen = robust_prune(p, &mut pool, self.alpha, self.r, vectors);
        lists.lock(p).set(&chosen);
        scratch.expanded = pool;
        for &q in &chosen {
            let list = lists.lock(q);
            if list.contains(p) || list.push(p) {
                continue;
            }
            // Full to the slack: pruned back to R with `p` among the candidates.
            let mut pool: Vec<(f32, u32)> = (0..list.len())
                .map(|i| {
                    let o = list.get(i);
                    (vectors.distance(q, o), o)
                })
                .collect();
            pool.push((vectors.distance(q, p), p));
            list.set(&robust_prune(q, &mut pool, self.alpha, self.r, vectors));
        }
    }
}

/// Best-first search from `start` for row `query` over the graph under construction;
/// leaves every expanded node with its distance in `scratch.expanded`.
fn search_into<V: GraphVectors>(
    lists: &SharedLists,
    start: u32,
    query: u32,
    vectors: &V,
    scratch: &mut Scratch,
) {
    let l = scratch.search.list.capacity();
    scratch.search.reset(l);
    scratch.expanded.clear();
    let scorer = RowScorer { vectors, query };
    scratch
        .search
        .enter(start, vectors.distance(query, start), None);
    let expanded = &mut scratch.expanded;
    scratch
        .search
        .run(lists, &scorer, None, |c| expanded.push((c.distance, c.id)));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{FullVectors, Sq8Vectors};
    use diskvec_vector::ScalarQuantizer8;
    use diskvec_vector::{Metric, Rows};
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};
    use std::sync::atomic::{AtomicU64, Ordering};

    fn clustered(n: usize, dim: usize, seed: u64) -> Vec<f32> {
        let mut rng = SmallRng::seed_from_u64(seed);
        let centres: Vec<Vec<f32>> = (0..20)
            .map(|_| (0..dim).map(|_| rng.random_range(-3.0..3.0)).collect())
            .collect();
        let mut data = Vec::with_capacity(n * dim);
        for i in 0..n {
            let c = &centres[i % centres.len()];
            data.extend(c.iter().map(|x| x + rng.random_range(-1.0..1.0f32)));
        }
        data
    }

    fn exact_top(data: &[f32], dim: usize, q: &[f32], k: usize) -> Vec<u32> {
        let mut all: Vec<(f32, u32)> = data
            .chunks_exact(dim)
            .enumerate()
            .map(|(i, v)| (Metric::L2.distance(q, v), i as u32))
            .collect();
        all.sort_by(|a, b| a.0.total_cmp(&b.0));
        all.iter().take(k).map(|x| x.1).collect()
    }

    #[test]
    fn graph_is_bounded_and_searchable_with_high_recall() {
        let (n, dim) = (3000, 16);
        let all = clustered(n + 50, dim, 5);
        let (data, queries) = all.split_at(n * dim);
        let params = VamanaParams {
            max_degree: 24,
            build_list: 50,
            alpha: 1.2,
            seed: 3,
            two_passes: true,
        };
        let done = AtomicU64::new(0);
        let g = build(&FullVectors::new(data, dim, Metric::L2), params, &|k| {
            done.fetch_add(k, Ordering::Relaxed);
            true
        })
        .unwrap();
        assert_eq!(
            done.load(Ordering::Relaxed),
            2 * n as u64,
            "progress counts both passes"
        );
        assert!(g.lists().all(|l| l.len() <= 24 && !l.is_empty()));
        assert!(g.lists().enumerate().all(|(i, l)| !l.contains(&(i as u32))));
        assert!(all_reachable(&g));
        let recall = recall_at_10(&g, data, queries, dim);
        eprintln!("recall@10 {recall}");
        assert!(recall > 0.98, "recall@10 {recall}");
    }

    #[test]
    fn a_graph_built_on_8_bit_codes_finds_the_true_neighbours() {
        let (n, dim) = (3000, 32);
        let all = clustered(n + 50, dim, 9);
        let (data, queries) = all.split_at(n * dim);
        let sq = ScalarQuantizer8::train(data, dim);
        let mut codes = Vec::new();
        sq.encode_rows(data, &mut codes);
        let scale = Sq8Vectors::scale_for(Metric::L2, sq.l2_scale()).unwrap();
        let params = VamanaParams {
            max_degree: 24,
            build_list: 50,
            two_passes: false,
            ..VamanaParams::default()
        };
        let g = build(&Sq8Vectors::new(&codes, dim, scale), params, &|_| true).unwrap();
        assert!(g.lists().all(|l| l.len() <= 24 && !l.is_empty()));
        assert!(all_reachable(&g));
        // Searched in full precision: the graph, not the codes, is what is judged.
        let recall = recall_at_10(&g, data, queries, dim);
        assert!(recall > 0.97, "recall@10 {recall}");
    }

    /// The 10 nodes a search of the finished graph (L=80) finds for `q`.
    fn search(g: &Graph, data: &[f32], dim: usize, q: &[f32]) -> Vec<u32> {
        struct Exact<'a>(Rows<'a>, &'a [f32]);
        impl Scorer for Exact<'_> {
            fn distance(&self, id: u32) -> f32 {
                Metric::L2.distance(self.1, self.0.get(id))
            }
        }
        let scorer = Exact(Rows::new(data, dim), q);
        let mut s = BestFirst::new(g.len(), 80);
        s.enter(g.medoid, scorer.distance(g.medoid), None);
        s.run(g, &scorer, None, |_| {});
        s.found().take(10).map(|f| f.1).collect()
    }

    /// Recall@10 of a search (L=80) over `queries`, in full precision.
    fn recall_at_10(g: &Graph, data: &[f32], queries: &[f32], dim: usize) -> f64 {
        let mut hits = 0;
        for q in queries.chunks_exact(dim) {
            let truth = exact_top(data, dim, q, 10);
            let got = search(g, data, dim, q);
            hits += got.iter().filter(|id| truth.contains(id)).count();
        }
        hits as f64 / (10 * queries.len() / dim) as f64
    }

    fn all_reachable(g: &Graph) -> bool {
        let mut seen = vec![false; g.len()];
        let mut stack = vec![g.medoid];
        seen[g.medoid as usize] = true;
        while let Some(p) = stack.pop() {
            for &q in g.neighbors(p) {
                if !std::mem::replace(&mut seen[q as usize], true) {
                    stack.push(q);
                }
            }
        }
        seen.iter().all(|&s| s)
    }

    #[test]
    fn a_build_told_to_stop_stops_early_and_returns_nothing() {
        let (n, dim) = (4000, 8);
        let data = clustered(n, dim, 5);
        let done = AtomicU64::new(0);
        let g = build(
            &FullVectors::new(&data, dim, Metric::L2),
            VamanaParams::default(),
            &|k| done.fetch_add(k, Ordering::Relaxed) + k < 1000,
        );
        assert!(g.is_none());
        assert!(
            done.load(Ordering::Relaxed) < n as u64,
            "{} insertions after the stop",
            done.load(Ordering::Relaxed)
        );
    }

    #[test]
    fn tiny_inputs_build() {
        let data = vec![1.0f32, 2.0];
        let g = build(
            &FullVectors::new(&data, 2, Metric::L2),
            VamanaParams::default(),
            &|_| true,
        )
        .unwrap();
        assert_eq!(g.lists().collect::<Vec<_>>(), vec![&[] as &[u32]]);
        let data = vec![0.0f32, 1.0, 5.0];
        let g = build(
            &FullVectors::new(&data, 1, Metric::L2),
            VamanaParams::default(),
            &|_| true,
        )
        .unwrap();
        assert_eq!(g.len(), 3);
        assert!(all_reachable(&g), "{g:?}");
    }
}
