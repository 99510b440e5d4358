use crate::GraphVectors;

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
    pool.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
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
}
