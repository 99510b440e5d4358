//! Per-dimension value ranges of (a sample of) row-major vectors, with a share of the values
//! cut off at each end: what both scalar quantizers pick their levels from.

/// Most rows looked at.
const SAMPLE: usize = 100_000;

/// For each of `dim` dimensions of `data`, the lowest and highest value left once `clip` of
/// the finite values are cut off at each end, over an evenly spaced sample of at most
/// 100,000 rows; `(0.0, 0.0)` for a dimension with no finite value. `hi >= lo`.
pub(crate) fn clipped_bounds(data: &[f32], dim: usize, clip: f64) -> Vec<(f32, f32)> {
    assert!(dim > 0 && data.len().is_multiple_of(dim));
    let n = data.len() / dim;
    let stride = n.div_ceil(SAMPLE).max(1);
    let rows: Vec<usize> = (0..n).step_by(stride).collect();
    let mut column = Vec::with_capacity(rows.len());
    (0..dim)
        .map(|d| {
            column.clear();
            column.extend(
                rows.iter()
                    .map(|&r| data[r * dim + d])
                    .filter(|x| x.is_finite()),
            );
            if column.is_empty() {
                return (0.0, 0.0);
            }
            let cut = ((column.len() as f64 * clip) as usize).min(column.len() - 1);
            let lo = *column.select_nth_unstable_by(cut, f32::total_cmp).1;
            let top = column.len() - 1 - cut;
            let hi = *column.select_nth_unstable_by(top, f32::total_cmp).1;
            (lo, hi.max(lo))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_clip_each_end_and_skip_values_that_are_not_finite() {
        // Dimension 0: 0..1000 with one outlier; dimension 1: constant; dimension 2: NaN only.
        let mut data = Vec::new();
        for i in 0..1000 {
            data.extend([i as f32, 5.0, f32::NAN]);
        }
        data[0] = 1e9;
        let b = clipped_bounds(&data, 3, 0.002);
        // Sorted: 1, 2, ..., 999, 1e9; two values cut at each end.
        assert_eq!(b[0], (3.0, 998.0));
        assert_eq!(b[1], (5.0, 5.0));
        assert_eq!(b[2], (0.0, 0.0));
        assert!(clipped_bounds(&[], 4, 0.1).iter().all(|&x| x == (0.0, 0.0)));
    }
}
