use std::cmp::Ordering;

use crate::GraphVectors;

/// The order of (distance, id) candidates every graph of diskvec uses: closer first, and
/// of two as close the lower id, so that a choice never depends on the order candidates
/// arrived in.
pub fn by_distance(a: &(f32, u32), b: &(f32, u32)) -> Ordering {
    a.0.total_cmp(&b.0).then(a.1.cmp(&b.1))
}

/// Robust prune (Vamana): walks `pool` from closest to farthest and keeps a candidate
/// unless an already kept neighbour is closer to it, by the factor `alpha`, than `node` is.
/// `pool` holds (distance to node, id); it may contain duplicates and `node` itself.
pub fn robust_prune(
    node: u32,
    pool: &mut Vec<(f32, u32)>,
    alpha: f32,
    max_degree: usize,
    vectors: &impl GraphVectors,
) -> Vec<u32> {
    pool.sort_by(by_distance);
    pool.dedup_by_key(|c| c.1);
    pool.retain(|c| c.1 != node);
    let mut kept: Vec<u32> = Vec::with_capacity(max_degree);
    let mut occluded = vec![false; pool.len()];
    for i in 0..pool.len() {
        if kept.len() >= max_degree {
            break;
        }
        if occluded[i] {
            continue;
        }
        let (_, chosen) = pool[i];
        kept.push(chosen);
        for j in i + 1..pool.len() {
            if !occluded[j] {
                let (d_node, other) = pool[j];
                let d_chosen = vectors.distance(chosen, other);
                if alpha * d_chosen <= d_node {
                    occluded[j] = true;
                }
            }
        }
    }
    kept
}

/// HNSW's neighbour heuristic (hnswlib's): walks `sorted` (distance to the node, id),
/// closest first, and keeps a candidate unless a kept one is closer to it than the node is.
/// With no more candidates than `m` it keeps them all, as hnswlib does: pruning a short list
/// only strands points (unreachable nodes in small graphs).
pub fn select_diverse(
    sorted: &[(f32, u32)],
    m: usize,
    distance: impl Fn(u32, u32) -> f32,
) -> Vec<u32> {
    if sorted.len() <= m {
        return sorted.iter().map(|&(_, c)| c).collect();
    }
    let mut kept: Vec<u32> = Vec::with_capacity(m);
    for &(d, c) in sorted {
        if kept.len() >= m {
            break;
        }
        if kept.iter().all(|&k| distance(c, k) > d) {
            kept.push(c);
        }
    }
    kept
}

/// `node`'s list `list` cut back to `m` by [`select_diverse`] (the list of a neighbour
/// that a new point's link overfilled).
pub fn reselect(node: u32, list: &[u32], m: usize, distance: impl Fn(u32, u32) -> f32) -> Vec<u32> {
    let mut pool: Vec<(f32, u32)> = list.iter().map(|&o| (distance(node, o), o)).collect();
    pool.sort_by(by_distance);
    select_diverse(&pool, m, distance)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FullVectors;
    use diskvec_vector::Metric;

    #[test]
    fn occluded_points_are_dropped_and_degree_is_bounded() {
        // Points on a line: 0 at the origin, 1 at 1.0, 2 at 2.0, 3 at -1.0.
        let flat = [0.0f32, 1.0, 2.0, -1.0];
        let rows = FullVectors::new(&flat, 1, Metric::L2);
        let pts: Vec<[f32; 1]> = flat.iter().map(|&x| [x]).collect();
        let mut pool: Vec<(f32, u32)> = (1..4)
            .map(|i| (Metric::L2.distance(&pts[0], &pts[i as usize]), i))
            .collect();
        pool.push(pool[0]);
        pool.push((0.0, 0));
        let kept = robust_prune(0, &mut pool, 1.0, 8, &rows);
        // 2 is reached through 1 (d(1,2)=1 <= d(0,2)=4), so it is occluded; 3 is on the other side.
        assert_eq!(kept, vec![1, 3]);
        let mut pool: Vec<(f32, u32)> = (1..4).map(|i| (i as f32, i)).collect();
        assert_eq!(robust_prune(0, &mut pool, 1.0, 1, &rows).len(), 1);
    }

    #[test]
    fn select_diverse_keeps_short_lists_and_drops_what_a_kept_point_covers() {
        // On a line: the node at 0; 1 covers 2 (d(1,2) = 1 < d(0,2) = 2); -1 is on the
        // other side.
        let at = |i: u32| [0.0f32, 1.0, 2.0, -1.0][i as usize];
        let distance = |a: u32, b: u32| (at(a) - at(b)).abs();
        let sorted = [(1.0, 1), (1.0, 3), (2.0, 2)];
        assert_eq!(select_diverse(&sorted, 2, distance), vec![1, 3]);
        assert_eq!(select_diverse(&sorted, 3, distance), vec![1, 3, 2]);
        assert_eq!(reselect(0, &[2, 3, 1], 2, distance), vec![1, 3]);
    }
}
