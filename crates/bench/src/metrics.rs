//! Accuracy and latency statistics, defined as VectorDBBench defines them so our numbers
//! and theirs mean the same thing.

/// Recall@k of one query: the share of the first `k` true neighbours found among the
/// first `k` results. A result id counts once however often it repeats; when the ground
/// truth holds fewer than `k` ids, the share is of those. Ties need no special case: two
/// results at equal distance are different ids, and only the set of ids counts.
pub fn recall_at(got: &[i64], truth: &[i64], k: usize) -> f64 {
    let truth = &truth[..k.min(truth.len())];
    if truth.is_empty() {
        return 1.0;
    }
    distinct(got, k)
        .iter()
        .filter(|id| truth.contains(id))
        .count() as f64
        / truth.len() as f64
}

/// NDCG@k of one query as VectorDBBench computes it: each distinct result id found in the
/// first `k` true neighbours gains 1/log2(rank + 2), its rank being its place in the
/// ground truth, and the sum is divided by the gain of a perfect answer.
pub fn ndcg_at(got: &[i64], truth: &[i64], k: usize) -> f64 {
    let truth = &truth[..k.min(truth.len())];
    if truth.is_empty() {
        return 1.0;
    }
    let gain = |rank: usize| 1.0 / ((rank + 2) as f64).log2();
    let ideal: f64 = (0..truth.len()).map(gain).sum();
    let dcg: f64 = distinct(got, k)
        .iter()
        .filter_map(|id| truth.iter().position(|t| t == id))
        .map(gain)
        .sum();
    dcg / ideal
}

fn distinct(got: &[i64], k: usize) -> Vec<i64> {
    let mut ids: Vec<i64> = got.iter().take(k).copied().collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// Percentile with linear interpolation between the closest ranks (numpy's default, which
/// VectorDBBench uses). NaN for no samples.
pub fn percentile(samples: &[f64], p: f64) -> f64 {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    percentile_sorted(&sorted, p)
}

/// `percentile` over samples already sorted ascending.
pub fn percentile_sorted(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let pos = p.clamp(0.0, 100.0) / 100.0 * (sorted.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

/// Mean recall and NDCG over queries (answers and ground truth in query order).
pub fn accuracy(answers: &[Vec<i64>], truth: &[Vec<i64>], k: usize) -> (f64, f64) {
    let n = answers.len().max(1) as f64;
    let recall = answers
        .iter()
        .zip(truth)
        .map(|(a, t)| recall_at(a, t, k))
        .sum::<f64>();
    let ndcg = answers
        .iter()
        .zip(truth)
        .map(|(a, t)| ndcg_at(a, t, k))
        .sum::<f64>();
    (recall / n, ndcg / n)
}

/// Latency percentiles in milliseconds.
#[derive(Clone, Copy, Debug, Default, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct Latency {
    pub avg: f64,
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
}

impl Latency {
    pub fn of(samples_ms: &[f64]) -> Self {
        let mut sorted = samples_ms.to_vec();
        sorted.sort_by(f64::total_cmp);
        Self {
            avg: sorted.iter().sum::<f64>() / sorted.len().max(1) as f64,
            p50: percentile_sorted(&sorted, 50.0),
            p95: percentile_sorted(&sorted, 95.0),
            p99: percentile_sorted(&sorted, 99.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    #[test]
    fn recall_hand_computed() {
        assert!(close(recall_at(&[1, 2, 3], &[3, 2, 9], 3), 2.0 / 3.0));
        // Only the first k of each side count.
        assert_eq!(recall_at(&[5, 1], &[1, 5, 7], 1), 0.0);
        assert_eq!(recall_at(&[1, 5], &[1, 5, 7], 1), 1.0);
    }

    #[test]
    fn recall_counts_a_repeated_id_once() {
        assert!(close(recall_at(&[1, 1, 1], &[1, 2, 3], 3), 1.0 / 3.0));
        assert!(close(recall_at(&[2, 2, 3], &[1, 2, 3], 3), 2.0 / 3.0));
    }

    #[test]
    fn recall_with_fewer_results_or_truths_than_k() {
        // Two results for k = 4: the missing ones are misses.
        assert_eq!(recall_at(&[1, 2], &[1, 2, 3, 4], 4), 0.5);
        assert_eq!(recall_at(&[], &[1, 2], 2), 0.0);
        assert_eq!(recall_at(&[1], &[1, 2], 2), 0.5);
        // Ground truth of two ids at k = 10: the share is of those two.
        assert_eq!(recall_at(&[2, 9, 1], &[1, 2], 10), 1.0);
    }

    #[test]
    fn tied_neighbours_in_another_order_score_fully() {
        // 7 and 8 are at equal distance; the index returned them swapped.
        assert_eq!(recall_at(&[4, 8, 7], &[4, 7, 8], 3), 1.0);
        assert_eq!(ndcg_at(&[4, 8, 7], &[4, 7, 8], 3), 1.0);
    }

    #[test]
    fn ndcg_hand_computed() {
        let g = |r: usize| 1.0 / ((r + 2) as f64).log2();
        let ideal = g(0) + g(1) + g(2);
        assert!(close(ndcg_at(&[1, 2, 3], &[1, 2, 3], 3), 1.0));
        // Found the 2nd and 3rd true neighbours, not the 1st.
        assert!(close(
            ndcg_at(&[9, 2, 3], &[1, 2, 3], 3),
            (g(1) + g(2)) / ideal
        ));
        // A repeated id gains once.
        assert!(close(ndcg_at(&[3, 3, 3], &[1, 2, 3], 3), g(2) / ideal));
        // Truth shorter than k: the ideal is over the ids there are.
        assert!(close(ndcg_at(&[2], &[1, 2], 5), g(1) / (g(0) + g(1))));
        assert_eq!(ndcg_at(&[], &[1], 1), 0.0);
    }

    #[test]
    fn percentiles_match_numpy_linear() {
        let xs = [4.0, 1.0, 3.0, 2.0];
        assert_eq!(percentile(&xs, 50.0), 2.5);
        assert!(close(percentile(&xs, 95.0), 3.85));
        assert!(close(percentile(&xs, 99.0), 3.97));
        assert_eq!(percentile(&xs, 100.0), 4.0);
        assert_eq!(percentile(&xs, 0.0), 1.0);
        assert_eq!(percentile(&[7.0], 99.0), 7.0);
        assert!(percentile(&[], 50.0).is_nan());
    }

    #[test]
    fn percentiles_over_tied_samples() {
        // numpy.percentile([1, 2, 2, 2, 9], [50, 95]) = [2.0, 7.6]
        let xs = [2.0, 9.0, 2.0, 1.0, 2.0];
        assert_eq!(percentile(&xs, 50.0), 2.0);
        assert!(close(percentile(&xs, 95.0), 7.6));
        let l = Latency::of(&xs);
        assert!(close(l.avg, 3.2));
        assert_eq!(l.p50, 2.0);
    }

    #[test]
    fn mean_accuracy_over_queries() {
        let answers = vec![vec![1, 2], vec![5, 6]];
        let truth = vec![vec![1, 2], vec![6, 7]];
        let (r, n) = accuracy(&answers, &truth, 2);
        assert!(close(r, 0.75));
        let g = |r: usize| 1.0 / ((r + 2) as f64).log2();
        assert!(close(n, (1.0 + g(0) / (g(0) + g(1))) / 2.0));
    }
}
