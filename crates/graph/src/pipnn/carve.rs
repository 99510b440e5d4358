//! Randomized ball carving (PiPNN): a set too large for one leaf draws a few of its points
//! as leaders and sends every point to its nearest leader (or nearest few, where the split
//! makes leaves, so that points near a boundary land on both sides); each cluster is carved
//! again until it fits a leaf. Clusters too small to be worth a leaf are pooled.

use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rayon::prelude::*;

use super::PipnnParams;
use crate::{GraphVectors, PairwiseBuffers};

/// Carving this deep means points the leaders cannot tell apart (duplicates): the rest is
/// cut into leaves at random.
const MAX_DEPTH: usize = 24;
/// Leaves are planned this full on average, so that uneven clusters still fit one.
const LEAF_FILL: f64 = 0.6;
/// Clusters below this share of a leaf are pooled with others into one leaf.
const POOL_BELOW: usize = 8;

/// What carving gives: the leaves (every row is in at least one) and the leaders of every
/// split (spread over the set they split, so links between them span it).
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Carving {
    pub leaves: Vec<Vec<u32>>,
    pub leader_groups: Vec<Vec<u32>>,
}

impl Carving {
    fn leaves(leaves: Vec<Vec<u32>>) -> Self {
        Self {
            leaves,
            leader_groups: Vec::new(),
        }
    }

    fn extend(&mut self, other: Carving) {
        self.leaves.extend(other.leaves);
        self.leader_groups.extend(other.leader_groups);
    }
}

/// Carves `vectors`' rows; `entry` is among the first split's leaders.
pub(crate) fn carve_all<V: GraphVectors>(vectors: &V, params: &PipnnParams, entry: u32) -> Carving {
    let ids: Vec<u32> = (0..vectors.len() as u32).collect();
    carve(vectors, ids, params, params.seed, 0, Some(entry))
}

fn carve<V: GraphVectors>(
    vectors: &V,
    ids: Vec<u32>,
    params: &PipnnParams,
    seed: u64,
    depth: usize,
    entry: Option<u32>,
) -> Carving {
    let leaf_max = params.leaf_max.max(2);
    if ids.len() <= leaf_max {
        return Carving::leaves(vec![ids]);
    }
    let mut rng = SmallRng::seed_from_u64(seed);
    if depth >= MAX_DEPTH {
        return Carving::leaves(cut_at_random(ids, leaf_max, &mut rng));
    }
    // The split that makes leaves sends each point to `leaf_fanout` clusters, the first
    // split to `top_fanout`, the others (rare: only sets of more than about a million
    // points have any) to one.
    let split_fanout = if depth == 0 { params.top_fanout } else { 1 };
    let leaves_wanted = |fanout: usize| {
        (ids.len() as f64 * fanout as f64 / (leaf_max as f64 * LEAF_FILL)).ceil() as usize
    };
    let most = params.split_leaders.max(2);
    // A first split that makes leaves is also the top one.
    let leaf_fanout = if depth == 0 {
        params.leaf_fanout.max(params.top_fanout)
    } else {
        params.leaf_fanout
    };
    let (leaders, fanout) = match leaves_wanted(leaf_fanout) {
        k if k <= most => (k.max(2), leaf_fanout),
        _ => {
            // Clusters just small enough for the next split to make leaves, so that few
            // become leaves at a split that sends each point to one cluster only.
            let leafmaking = most as f64 * leaf_max as f64 * LEAF_FILL
                / params.leaf_fanout.max(1) as f64
                / split_fanout.max(1) as f64;
            let k = (ids.len() as f64 / leafmaking).ceil() as usize;
            (k.clamp(2, most), split_fanout)
        }
    };
    let leaders = leaders.min(ids.len());
    let fanout = fanout.clamp(1, leaders);
    let mut chosen: Vec<u32> = rand::seq::index::sample(&mut rng, ids.len(), leaders)
        .into_iter()
        .map(|i| ids[i])
        .collect();
    if let Some(entry) = entry.filter(|e| !chosen.contains(e)) {
        chosen[0] = entry;
    }
    let clusters = assign(vectors, &ids, &chosen, fanout);
    if clusters.iter().any(|c| c.len() >= ids.len()) {
        // No split: every point is nearest the same leader.
        return Carving::leaves(cut_at_random(ids, leaf_max, &mut rng));
    }
    drop(ids);
    let pool_below = (leaf_max / POOL_BELOW).max(1);
    let (small, large): (Vec<Vec<u32>>, Vec<Vec<u32>>) = clusters
        .into_iter()
        .filter(|c| !c.is_empty())
        .partition(|c| c.len() < pool_below);
    let mut out = Carving {
        leaves: pool(small, leaf_max),
        leader_groups: vec![chosen],
    };
    let below: Vec<Carving> = large
        .into_par_iter()
        .enumerate()
        .map(|(i, cluster)| {
            let child_seed = seed
                .wrapping_mul(0x9e37_79b9_7f4a_7c15)
                .wrapping_add(i as u64 + 1);
            carve(vectors, cluster, params, child_seed, depth + 1, None)
        })
        .collect();
    below.into_iter().for_each(|c| out.extend(c));
    out
}

/// Points a thread scores against a split's leaders at once: 64 rows of 768 bytes widened
/// stay in L2 beside 128 leaders.
const ASSIGN_BLOCK: usize = 64;

/// Each of `ids` into the clusters of its `fanout` nearest `leaders` (ties to the earlier
/// leader); every cluster in the order of `ids`.
fn assign<V: GraphVectors>(
    vectors: &V,
    ids: &[u32],
    leaders: &[u32],
    fanout: usize,
) -> Vec<Vec<u32>> {
    let picks: Vec<Vec<(u32, u32)>> = ids
        .par_chunks(1024)
        .map(|chunk| {
            let mut buffers = PairwiseBuffers::default();
            let (mut block, mut near) = (Vec::new(), Vec::with_capacity(leaders.len()));
            let mut picks = Vec::with_capacity(chunk.len() * fanout);
            // Points against leaders a block at a time: one matrix product each.
            for points in chunk.chunks(ASSIGN_BLOCK) {
                vectors.cross(points, leaders, &mut buffers, &mut block);
                for (&p, row) in points.iter().zip(block.chunks_exact(leaders.len())) {
                    near.clear();
                    near.extend(row.iter().enumerate().map(|(i, &d)| (d, i as u32)));
                    if fanout < near.len() {
                        near.select_nth_unstable_by(fanout - 1, crate::by_distance);
                    }
                    picks.extend(near[..fanout].iter().map(|&(_, c)| (c, p)));
                }
            }
            picks
        })
        .collect();
    let mut clusters = vec![Vec::new(); leaders.len()];
    for (c, p) in picks.into_iter().flatten() {
        clusters[c as usize].push(p);
    }
    clusters
}

/// Small clusters joined into leaves of at most `leaf_max` (a point in two of them once).
fn pool(small: Vec<Vec<u32>>, leaf_max: usize) -> Vec<Vec<u32>> {
    let mut out: Vec<Vec<u32>> = Vec::new();
    for cluster in small {
        match out.last_mut() {
            Some(last) if last.len() + cluster.len() <= leaf_max => last.extend(cluster),
            _ => out.push(cluster),
        }
    }
    for leaf in &mut out {
        leaf.sort_unstable();
        leaf.dedup();
    }
    out
}

fn cut_at_random(mut ids: Vec<u32>, leaf_max: usize, rng: &mut SmallRng) -> Vec<Vec<u32>> {
    ids.shuffle(rng);
    ids.chunks(leaf_max).map(<[u32]>::to_vec).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FullVectors;
    use diskvec_vector::Metric;

    fn params(leaf_max: usize, leaf_fanout: usize) -> PipnnParams {
        PipnnParams {
            leaf_max,
            leaf_fanout,
            split_leaders: 8,
            ..PipnnParams::default()
        }
    }

    #[test]
    fn every_point_lands_in_leaves_no_larger_than_the_bound_the_same_way_every_run() {
        let dim = 4;
        let data: Vec<f32> = (0..3000 * dim)
            .map(|i| ((i * 7919 + i / dim * 31) % 1009) as f32 / 1009.0)
            .collect();
        let vectors = FullVectors::new(&data, dim, Metric::L2);
        for fanout in [1, 2] {
            let p = params(64, fanout);
            let carving = carve_all(&vectors, &p, 0);
            let leaves = &carving.leaves;
            assert!(leaves.iter().all(|l| !l.is_empty() && l.len() <= 64));
            let mut times = vec![0usize; 3000];
            for leaf in leaves {
                let mut sorted = leaf.clone();
                sorted.sort_unstable();
                sorted.dedup();
                assert_eq!(sorted.len(), leaf.len(), "a point twice in one leaf");
                leaf.iter().for_each(|&i| times[i as usize] += 1);
            }
            assert!(times.iter().all(|&t| t >= 1), "a point in no leaf");
            let mean = times.iter().sum::<usize>() as f64 / 3000.0;
            assert!(
                mean >= fanout as f64 * 0.9,
                "fanout {fanout}: {mean} leaves a point"
            );
            assert!(carving.leader_groups[0].contains(&0), "the entry leads");
            assert_eq!(carving, carve_all(&vectors, &p, 0), "not deterministic");
        }
    }

    #[test]
    fn duplicates_are_cut_at_random_rather_than_carved_forever() {
        let data = vec![0.5f32; 1000 * 3];
        let vectors = FullVectors::new(&data, 3, Metric::L2);
        let leaves = carve_all(&vectors, &params(50, 2), 0).leaves;
        assert!(leaves.iter().all(|l| l.len() <= 50));
        assert_eq!(leaves.iter().map(Vec::len).sum::<usize>(), 1000);
    }
}
