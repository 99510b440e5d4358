//! FLAT: exact search by scanning every vector. Small data, and the ground-truth tool.

use diskvec_vector::{check_vectors, Metric, Rows};
use rayon::prelude::*;

use crate::{IndexError, Progress, Result, TopK};

/// Exact top-`k` for each query (row-major, both sets already validated and prepared).
/// Returns per query the (row index, distance) pairs, closest first; `k` above the count
/// returns every row.
pub fn search(
    base: Rows,
    queries: Rows,
    metric: Metric,
    k: usize,
    progress: &dyn Progress,
) -> Result<Vec<Vec<(u64, f32)>>> {
    if k == 0 {
        return Err(IndexError::InvalidArgument("k must be at least 1".into()));
    }
    if base.dim() != queries.dim() {
        return Err(IndexError::DimensionMismatch {
            expected: base.dim(),
            got: queries.dim(),
        });
    }
    check_vectors(base.data(), base.dim())?;
    check_vectors(queries.data(), queries.dim())?;
    progress.phase("exact search", queries.len() as u64);
    Ok((0..queries.len() as u32)
        .into_par_iter()
        .map(|q| {
            let query = queries.get(q);
            let mut top = TopK::new(k.min(base.len()));
            for i in 0..base.len() as u32 {
                top.push(metric.distance(query, base.get(i)), i as u64);
            }
            progress.advance(1);
            top.into_sorted()
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NoProgress;

    #[test]
    fn finds_exact_neighbours_and_handles_k_above_count() {
        let base = [0.0f32, 0.0, 1.0, 0.0, 0.0, 2.0, 5.0, 5.0];
        let queries = [0.9f32, 0.1];
        let got = search(
            Rows::new(&base, 2),
            Rows::new(&queries, 2),
            Metric::L2,
            2,
            &NoProgress,
        )
        .unwrap();
        assert_eq!(got[0].iter().map(|x| x.0).collect::<Vec<_>>(), vec![1, 0]);
        assert!((got[0][0].1 - 0.02).abs() < 1e-6);
        let all = search(
            Rows::new(&base, 2),
            Rows::new(&queries, 2),
            Metric::L2,
            10,
            &NoProgress,
        )
        .unwrap();
        assert_eq!(all[0].len(), 4);
    }

    #[test]
    fn refuses_bad_arguments() {
        let base = [0.0f32, 1.0];
        let q3 = [0.0f32, 1.0, 2.0];
        assert!(search(
            Rows::new(&base, 2),
            Rows::new(&base, 2),
            Metric::L2,
            0,
            &NoProgress
        )
        .is_err());
        assert!(matches!(
            search(
                Rows::new(&base, 2),
                Rows::new(&q3, 3),
                Metric::L2,
                1,
                &NoProgress
            ),
            Err(IndexError::DimensionMismatch { .. })
        ));
        let nan = [f32::NAN, 0.0];
        assert!(search(
            Rows::new(&base, 2),
            Rows::new(&nan, 2),
            Metric::L2,
            1,
            &NoProgress
        )
        .is_err());
    }
}
