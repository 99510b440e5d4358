//! Result statistics computed the way VectorDBBench computes them.

/// Recall@k of one query: |got[..k] ∩ truth[..k]| / k (truth shorter than k counts whole).
pub fn recall_at(got: &[i64], truth: &[i64], k: usize) -> f64 {
    let truth = &truth[..k.min(truth.len())];
    if truth.is_empty() {
        return 1.0;
    }
    let mut got: Vec<i64> = got.iter().take(k).copied().collect();
    got.sort_unstable();
    got.dedup();
    got.iter().filter(|id| truth.contains(id)).count() as f64 / truth.len() as f64
}

/// Percentile with linear interpolation between closest ranks (numpy's default).
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let pos = p / 100.0 * (sorted.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

/// Peak resident set size of this process, in MiB (Linux VmHWM).
pub fn peak_rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map(|kb| kb / 1024.0)
        .unwrap_or(f64::NAN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recall_hand_computed() {
        assert_eq!(recall_at(&[1, 2, 3], &[3, 2, 9], 3), 2.0 / 3.0);
        // Duplicate ids in a result count once.
        assert_eq!(recall_at(&[1, 1, 1], &[1, 2, 3], 3), 1.0 / 3.0);
        // Fewer results than k.
        assert_eq!(recall_at(&[1], &[1, 2], 2), 0.5);
        // Only the first k of each side count.
        assert_eq!(recall_at(&[5, 1], &[1, 5, 7], 1), 0.0);
    }

    #[test]
    fn percentiles_match_numpy_linear() {
        let xs = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(percentile(&xs, 50.0), 2.5);
        assert!((percentile(&xs, 95.0) - 3.85).abs() < 1e-12);
        assert_eq!(percentile(&xs, 100.0), 4.0);
        assert_eq!(percentile(&[7.0], 99.0), 7.0);
        assert!(percentile(&[], 50.0).is_nan());
    }
}
