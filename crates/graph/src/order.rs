//! The order in which a build inserts its points.
//!
//! A random order gives the graph its long edges, but every insertion then searches a
//! part of the data the one before did not touch, and on a graph larger than the CPU's
//! caches almost every vector it compares is a miss to DRAM. After a random start that
//! spans the data, the rest go in groups of points near one pivot: consecutive insertions
//! then search the same neighbourhood, whose vectors are still in cache.

use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rayon::prelude::*;

use crate::GraphVectors;

/// Graphs smaller than this are inserted in random order: their vectors fit in cache.
const GROUPED_FROM: usize = 65_536;
/// The share of points inserted first, in random order.
const RANDOM_START: usize = 8;
/// Points per pivot's group, about (a group's 8-bit codes at 768 dimensions: 3 MiB).
const GROUP_POINTS: usize = 4_096;

/// The insertion order of `vectors`' rows: all of them, once each.
pub(crate) fn insertion_order<V: GraphVectors>(vectors: &V, seed: u64) -> Vec<u32> {
    let n = vectors.len();
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut order: Vec<u32> = (0..n as u32).collect();
    order.shuffle(&mut rng);
    if n < GROUPED_FROM {
        return order;
    }
    let start = n / RANDOM_START;
    let pivots = &order[..(n / GROUP_POINTS).max(2)];
    // The rest by nearest pivot (a random one among the start's points: pivots follow the
    // data's density), randomly within a group.
    let mut keyed: Vec<(u32, u32)> = order[start..]
        .par_iter()
        .map(|&p| {
            let mut best = (f32::INFINITY, 0u32);
            for (i, &pivot) in pivots.iter().enumerate() {
                let d = vectors.distance(p, pivot);
                if d < best.0 {
                    best = (d, i as u32);
                }
            }
            (best.1, p)
        })
        .collect();
    // Stable: the shuffle's order stays within a group.
    keyed.sort_by_key(|&(group, _)| group);
    for (slot, (_, p)) in order[start..].iter_mut().zip(keyed) {
        *slot = p;
    }
    order
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FullVectors;
    use diskvec_vector::Metric;

    #[test]
    fn every_point_goes_in_once_and_neighbours_follow_each_other() {
        let (n, dim) = (GROUPED_FROM + 1000, 2);
        // Points on a line: neighbours by value.
        let data: Vec<f32> = (0..n)
            .flat_map(|i| [((i * 7919) % n) as f32, 0.0])
            .collect();
        let vectors = FullVectors::new(&data, dim, Metric::L2);
        let order = insertion_order(&vectors, 3);
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..n as u32).collect::<Vec<_>>());
        // After the random start, consecutive insertions lie far closer than random pairs.
        let gap = |w: &[u32]| (data[2 * w[0] as usize] - data[2 * w[1] as usize]).abs() as f64;
        let start = n / RANDOM_START;
        let mean = |s: &[u32]| s.windows(2).map(gap).sum::<f64>() / (s.len() - 1) as f64;
        let (random, grouped) = (mean(&order[..start]), mean(&order[start..]));
        assert!(
            grouped * 8.0 < random,
            "mean gap {grouped} after the start, {random} in it"
        );
        let small = FullVectors::new(&data[..2000], dim, Metric::L2);
        assert_eq!(insertion_order(&small, 3).len(), 1000);
    }
}
