/// Graph pruning rules (Vamana's alpha prune, HNSW's heuristic) need a true metric, which
/// -dot is not. Appending sqrt(M^2 - |x|^2)
/// (M the largest norm) to every vector makes |q' - x'|^2 = |q|^2 + M^2 - 2 q.x for
/// q' = (q, 0): the same order as -q.x for any query, so a graph built in L2 over these
/// vectors is searched with -dot over the original ones (Bachrach et al. 2014).
pub fn mips_to_l2(data: &[f32], dim: usize) -> (Vec<f32>, usize) {
    let norms: Vec<f32> = data
        .chunks_exact(dim)
        .map(|v| v.iter().map(|x| x * x).sum())
        .collect();
    let max = norms.iter().copied().fold(0f32, f32::max);
    let mut out = crate::vec_with_huge_pages(data.len() + norms.len());
    for (v, n) in data.chunks_exact(dim).zip(&norms) {
        out.extend_from_slice(v);
        out.push((max - n).max(0.0).sqrt());
    }
    (out, dim + 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Metric;

    #[test]
    fn augmented_l2_orders_like_negative_dot() {
        let data = [1.0f32, 0.0, 3.0, 1.0, -2.0, 2.0, 0.5, 0.5];
        let (aug, adim) = mips_to_l2(&data, 2);
        assert_eq!(adim, 3);
        let q = [0.7f32, -0.2];
        let qa = [0.7f32, -0.2, 0.0];
        let by_dot: Vec<f32> = data
            .chunks(2)
            .map(|v| Metric::InnerProduct.distance(&q, v))
            .collect();
        let by_l2: Vec<f32> = aug.chunks(3).map(|v| Metric::L2.distance(&qa, v)).collect();
        for i in 0..4 {
            for j in 0..4 {
                assert_eq!(by_dot[i] < by_dot[j], by_l2[i] < by_l2[j], "{i} {j}");
            }
        }
    }
}
