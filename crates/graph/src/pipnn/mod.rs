//! A graph built by partitioning instead of by searching: PiPNN (Rubel et al., arXiv
//! 2602.21247). The points are carved into small overlapping leaves (carve.rs); within a
//! leaf every pairwise distance comes from one block product (`GraphVectors::pairwise`,
//! an exact integer Gram block over 8-bit codes) and each point's nearest few, in both
//! directions, are offered to bounded per-point reservoirs that keep one candidate per
//! direction (reservoir.rs). No point searches the graph, so there is no random walk
//! through DRAM per insertion, which is where a Vamana build spends its time.

mod carve;
mod connect;
mod reservoir;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rayon::prelude::*;

use crate::adjacency::Graph;
use crate::prune::robust_prune;
use crate::vectors::PairwiseBuffers;
use crate::GraphVectors;
use reservoir::{before, Reservoirs};

/// PiPNN build parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PipnnParams {
    /// R: the most out-neighbours a node keeps.
    pub max_degree: usize,
    /// Candidates a point's reservoir keeps (at least R; more feeds `final_prune`).
    pub reservoir: usize,
    /// c_max: the most points in one leaf.
    pub leaf_max: usize,
    /// Leaders a split draws at most.
    pub split_leaders: usize,
    /// Clusters each point goes to at the split that makes leaves.
    pub leaf_fanout: usize,
    /// Clusters each point goes to at the first split, when that split does not make
    /// leaves (deeper splits send it to one). 3 in a graph of all the points (recall@10 at
    /// L=50 on the 50k shipped set: 0.9749 with 2, 0.9882 with 3; with 1 a point's
    /// neighbours across the first split's boundaries are never in its leaves). 1 in a shard
    /// of a build in shards, whose partition already sent each vector to two shards.
    pub top_fanout: usize,
    /// A point's nearest in each leaf offered as its neighbours, and it as theirs.
    pub leaf_k: usize,
    /// Links from each leader to its nearest fellow leaders of a split (`leader_links`).
    pub leader_links: usize,
    /// Random hyperplanes of the direction buckets (1 to 32).
    pub hash_bits: usize,
    /// Robust prune of each reservoir down to R with this alpha; `None` keeps its R
    /// closest.
    pub final_prune: Option<f32>,
    pub seed: u64,
}

impl Default for PipnnParams {
    fn default() -> Self {
        Self {
            max_degree: 64,
            reservoir: 64,
            leaf_max: 512,
            split_leaders: 128,
            leaf_fanout: 2,
            top_fanout: 3,
            leaf_k: 8,
            leader_links: 4,
            hash_bits: 12,
            final_prune: None,
            seed: 1,
        }
    }
}

/// Builds a graph over `vectors` by partitioning. `progress` is called with shares of
/// `vectors.len()` as leaves are done (the sum is the number of rows) and returns whether to
/// go on; once it says no, the build returns `None`.
pub fn build_pipnn<V: GraphVectors>(
    vectors: &V,
    params: PipnnParams,
    progress: &(dyn Fn(u64) -> bool + Sync),
) -> Option<Graph> {
    let n = vectors.len();
    let medoid = vectors.medoid();
    let r = params.max_degree.max(1);
    let room = params.reservoir.max(r);
    let bits = params.hash_bits.clamp(1, 32);
    let reservoirs = Reservoirs::new(projections(vectors, bits, params.seed), bits, room);
    let carving = carve::carve_all(vectors, &params, medoid);
    let links = leader_links(vectors, &carving.leader_groups, params.leader_links);
    let leaves = carving.leaves;
    let total: u64 = leaves.iter().map(|l| l.len() as u64).sum();
    let (done, stopped) = (AtomicU64::new(0), AtomicBool::new(false));
    leaves
        .par_iter()
        .for_each_init(LeafBuffers::default, |buffers, leaf| {
            if stopped.load(Ordering::Relaxed) {
                return;
            }
            offer_leaf_neighbours(vectors, leaf, params.leaf_k, &reservoirs, buffers);
            // Shares of n, summing to n once every leaf is done.
            let before = done.fetch_add(leaf.len() as u64, Ordering::Relaxed);
            let share = |rows: u64| rows * n as u64 / total.max(1);
            if !progress(share(before + leaf.len() as u64) - share(before)) {
                stopped.store(true, Ordering::Relaxed);
            }
        });
    if stopped.load(Ordering::Relaxed) {
        return None;
    }
    drop(leaves);
    let mut graph = Graph::from_fn(n, r, medoid, |p, list| {
        let mut pool = Vec::with_capacity(room);
        reservoirs.kept(p, &mut pool);
        let from = links.partition_point(|&(f, _)| f < p);
        let long: Vec<u32> = links[from..]
            .iter()
            .take_while(|&&(f, _)| f == p)
            .map(|&(_, t)| t)
            .filter(|t| !pool.iter().any(|&(_, q)| q == *t))
            .take(r / 4)
            .collect();
        let near = r - long.len();
        match params.final_prune {
            Some(alpha) if pool.len() > near => {
                list.extend(robust_prune(p, &mut pool, alpha, near, vectors))
            }
            _ => list.extend(pool.iter().take(near).map(|&(_, q)| q)),
        }
        list.extend(long);
    });
    drop(reservoirs);
    connect::connect_all(&mut graph, vectors);
    Some(graph)
}

/// Edges between each split's leaders, each to its `per_leader` nearest in the split, as
/// (from, to) sorted. Leaves give only neighbourhoods: a cluster that shares no leaf with
/// another would have no edge to it, and a search entering elsewhere could not reach it
/// (measured on 40 separated clusters, from the medoid alone: recall@10 0.78 without, as
/// Vamana's 1.0 with). The first split's leaders include the entry, so a search goes from it
/// leader to leader down to the cluster it wants.
fn leader_links<V: GraphVectors>(
    vectors: &V,
    groups: &[Vec<u32>],
    per_leader: usize,
) -> Vec<(u32, u32)> {
    let mut links: Vec<(u32, u32)> = groups
        .par_iter()
        .map_init(
            || (PairwiseBuffers::default(), Vec::new(), Vec::new()),
            |(buffers, distances, best), group| {
                vectors.pairwise(group, buffers, distances);
                let c = group.len();
                let mut out = Vec::with_capacity(c * per_leader);
                for (i, &p) in group.iter().enumerate() {
                    nearest_k(&distances[i * c..(i + 1) * c], group, i, per_leader, best);
                    out.extend(best.iter().map(|&(_, q)| (p, q)));
                }
                out
            },
        )
        .flatten()
        .collect();
    links.sort_unstable();
    links.dedup();
    links
}

/// One thread's buffers for a leaf.
#[derive(Default)]
struct LeafBuffers {
    pairwise: PairwiseBuffers,
    distances: Vec<f32>,
    row: Vec<(f32, u32)>,
}

/// Offers each point of `leaf` its `k` nearest in the leaf, and itself to them.
fn offer_leaf_neighbours<V: GraphVectors>(
    vectors: &V,
    leaf: &[u32],
    k: usize,
    reservoirs: &Reservoirs,
    buffers: &mut LeafBuffers,
) {
    let c = leaf.len();
    let k = k.min(c.saturating_sub(1));
    if k == 0 {
        return;
    }
    vectors.pairwise(leaf, &mut buffers.pairwise, &mut buffers.distances);
    for (i, &p) in leaf.iter().enumerate() {
        let row = &buffers.distances[i * c..(i + 1) * c];
        nearest_k(row, leaf, i, k, &mut buffers.row);
        for &(d, q) in &buffers.row {
            reservoirs.offer(p, q, d);
            reservoirs.offer(q, p, d);
        }
    }
}

/// The `k` smallest (distance, id) of `row` (distances to the points `ids`) but entry
/// `skip`, closest first, into `best`: one pass keeping a sorted list of `k`, which most
/// entries leave at one comparison with its last.
///
/// Once the list is full, a block of 16 entries none of which is nearer than (or as near
/// as) the k-th is passed over with one vectorizable comparison of the block: most blocks.
fn nearest_k(row: &[f32], ids: &[u32], skip: usize, k: usize, best: &mut Vec<(f32, u32)>) {
    const BLOCK: usize = 16;
    best.clear();
    if k == 0 {
        return;
    }
    let row = &row[..row.len().min(ids.len())];
    let mut start = 0;
    while start < row.len() {
        let end = (start + BLOCK).min(row.len());
        if best.len() == k {
            let last = best[k - 1].0;
            // NaN on either side goes to the exact test below.
            let any = last.is_nan()
                || row[start..end]
                    .iter()
                    .fold(false, |a, &d| a | (d <= last) | d.is_nan());
            if !any {
                start = end;
                continue;
            }
        }
        for j in start..end {
            let (d, q) = (row[j], ids[j]);
            if j == skip {
                continue;
            }
            if best.len() == k {
                if d > best[k - 1].0 || !before((d, q), best[k - 1]) {
                    continue;
                }
                best.pop();
            }
            let at = best.partition_point(|&e| before(e, (d, q)));
            best.insert(at, (d, q));
        }
        start = end;
    }
}

/// Every row projected on `bits` random Gaussian hyperplanes, `bits` values a row.
fn projections<V: GraphVectors>(vectors: &V, bits: usize, seed: u64) -> Vec<f32> {
    let dim = vectors.dim();
    let mut rng = SmallRng::seed_from_u64(seed ^ 0x5eed_0fb0_c4e7);
    // Box-Muller: isotropic directions need normal components.
    let planes: Vec<f32> = (0..bits * dim)
        .map(|_| {
            let (u, v): (f64, f64) = (1.0 - rng.random::<f64>(), rng.random());
            ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()) as f32
        })
        .collect();
    let mut out = vec![0f32; vectors.len() * bits];
    out.par_chunks_mut(bits * 1024)
        .enumerate()
        .for_each(|(chunk, rows)| {
            for (i, row) in rows.chunks_exact_mut(bits).enumerate() {
                vectors.project((chunk * 1024 + i) as u32, &planes, row);
            }
        });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BestFirst, FullVectors, Scorer, Sq8Vectors};
    use diskvec_vector::{Metric, ScalarQuantizer8};

    struct Query<'a>(&'a [f32], FullVectors<'a>);
    impl Scorer for Query<'_> {
        fn distance(&self, id: u32) -> f32 {
            self.1.metric.distance(self.0, self.1.rows.get(id))
        }
    }

    /// Clustered points: 40 centres, each with points spread over a random 4-dimensional
    /// subspace around it (embeddings vary along far fewer directions than they have).
    fn clustered(n: usize, dim: usize) -> Vec<f32> {
        const SPREAD: usize = 4;
        let mut rng = SmallRng::seed_from_u64(3);
        let centres: Vec<f32> = (0..40 * dim).map(|_| rng.random::<f32>() * 4.0).collect();
        let axes: Vec<f32> = (0..40 * SPREAD * dim)
            .map(|_| rng.random::<f32>() - 0.5)
            .collect();
        (0..n)
            .flat_map(|i| {
                let c = (i * 7) % 40;
                let mut point = centres[c * dim..(c + 1) * dim].to_vec();
                for axis in axes[c * SPREAD * dim..].chunks_exact(dim).take(SPREAD) {
                    let t = rng.random::<f32>() * 2.0 - 1.0;
                    point.iter_mut().zip(axis).for_each(|(p, a)| *p += t * a);
                }
                point
            })
            .collect()
    }

    /// Recall@10 of searches over `graph` with a list of 40 started from `entries`.
    fn recall_at_10(
        graph: &Graph,
        data: &[f32],
        dim: usize,
        queries: &[f32],
        entries: &[u32],
    ) -> f64 {
        let full = FullVectors::new(data, dim, Metric::L2);
        let mut search = BestFirst::new(full.rows.len(), 40);
        let (mut hits, mut asked) = (0, 0);
        for q in queries.chunks_exact(dim) {
            let scorer = Query(q, full);
            let mut truth: Vec<(f32, u32)> = (0..full.rows.len() as u32)
                .map(|i| (scorer.distance(i), i))
                .collect();
            truth.sort_by(crate::by_distance);
            search.reset(40);
            for &e in entries {
                search.enter(e, scorer.distance(e), None);
            }
            search.run(graph, &scorer, None, |_| {});
            let found: Vec<u32> = search.found().take(10).map(|(_, i)| i).collect();
            hits += truth[..10].iter().filter(|t| found.contains(&t.1)).count();
            asked += 10;
        }
        hits as f64 / asked as f64
    }

    #[test]
    fn partitioned_graphs_find_neighbours_and_are_the_same_every_run() {
        let (n, dim) = (4000, 16);
        let data = clustered(n + 50, dim);
        let (data, queries) = data.split_at(n * dim);
        let params = PipnnParams {
            max_degree: 24,
            reservoir: 32,
            leaf_max: 128,
            // One split above the leaves, as sets of up to about a million points have with
            // the default 128 leaders and leaves of 512.
            split_leaders: 32,
            leaf_k: 8,
            ..PipnnParams::default()
        };
        let full = FullVectors::new(data, dim, Metric::L2);
        let graph = build_pipnn(&full, params, &|_| true).unwrap();
        assert_eq!(graph.len(), n);
        assert!(graph.lists().all(|l| l.len() <= 24));
        // From entries in every cluster, as the disk index's entry set gives.
        let spread: Vec<u32> = (0..n as u32).step_by(61).collect();
        let recall = recall_at_10(&graph, data, dim, queries, &spread);
        assert!(recall >= 0.98, "recall@10 {recall}");
        // From the medoid alone the clusters are reached through the leaders' links
        // (measured 0.88; 0.78 without them, Vamana 1.0).
        let recall = recall_at_10(&graph, data, dim, queries, &[graph.medoid]);
        assert!(recall >= 0.85, "recall@10 from the medoid {recall}");
        assert_eq!(graph, build_pipnn(&full, params, &|_| true).unwrap());
        // With a robust prune, and over 8-bit codes (the Gram block path).
        let pruned = PipnnParams {
            final_prune: Some(1.2),
            ..params
        };
        let sq = ScalarQuantizer8::train(data, dim);
        let mut codes = Vec::new();
        sq.encode_rows(data, &mut codes);
        let coded = Sq8Vectors::new(&codes, dim, sq.l2_scale());
        let graph = build_pipnn(&coded, pruned, &|_| true).unwrap();
        let recall = recall_at_10(&graph, data, dim, queries, &spread);
        assert!(recall >= 0.98, "pruned, over codes: recall@10 {recall}");
    }

    #[test]
    fn nearest_k_is_the_k_smallest_by_distance_then_id() {
        let row = [3.0, 1.0, 0.0, 1.0, 2.0, 1.0];
        let ids = [10, 11, 12, 9, 14, 15];
        let mut best = Vec::new();
        nearest_k(&row, &ids, 2, 3, &mut best);
        assert_eq!(best, vec![(1.0, 9), (1.0, 11), (1.0, 15)]);
        nearest_k(&row, &ids, 0, 10, &mut best);
        assert_eq!(best.len(), 5);
        assert_eq!(best[0], (0.0, 12));
    }

    /// Against a full sort, for rows spanning many blocks, coarse distances (ties broken by
    /// id), every k and a skipped entry anywhere.
    #[test]
    fn nearest_k_equals_a_full_sort_over_blocks() {
        let mut rng = SmallRng::seed_from_u64(3);
        let mut best = Vec::new();
        for len in [1usize, 15, 16, 17, 100, 513] {
            for k in [1usize, 3, 8, 40] {
                let row: Vec<f32> = (0..len).map(|_| rng.random_range(0..20) as f32).collect();
                let ids: Vec<u32> = (0..len as u32).map(|i| i * 7 % 1000).collect();
                let skip = rng.random_range(0..len);
                nearest_k(&row, &ids, skip, k, &mut best);
                let mut all: Vec<(f32, u32)> = (0..len)
                    .filter(|&j| j != skip)
                    .map(|j| (row[j], ids[j]))
                    .collect();
                all.sort_by(crate::by_distance);
                all.truncate(k);
                assert_eq!(best, all, "len {len} k {k}");
            }
        }
    }

    #[test]
    fn progress_adds_up_to_the_rows_and_a_no_cancels() {
        let (n, dim) = (2000, 8);
        let data = clustered(n, dim);
        let full = FullVectors::new(&data, dim, Metric::L2);
        let params = PipnnParams {
            leaf_max: 100,
            split_leaders: 8,
            ..PipnnParams::default()
        };
        let sum = AtomicU64::new(0);
        build_pipnn(&full, params, &|k| {
            sum.fetch_add(k, Ordering::Relaxed);
            true
        })
        .unwrap();
        assert_eq!(sum.into_inner(), n as u64);
        assert!(build_pipnn(&full, params, &|_| false).is_none());
    }
}
