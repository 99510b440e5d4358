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
    // Queries in groups against tiles of the base that stay in cache: the base is streamed
    // from memory once a group instead of once a query (one query at a time was bound by
    // memory bandwidth: 1,000 queries over a 512 MiB block read 512 GB).
    let group = (queries.len() / (rayon::current_num_threads() * 4)).clamp(1, QUERY_GROUP);
    let starts: Vec<usize> = (0..queries.len()).step_by(group).collect();
    Ok(starts
        .into_par_iter()
        .flat_map_iter(|first| {
            let last = (first + group).min(queries.len());
            let mut tops: Vec<TopK> = (first..last)
                .map(|_| TopK::new(k.min(base.len())))
                .collect();
            for tile in (0..base.len()).step_by(BASE_TILE) {
                let tile_end = (tile + BASE_TILE).min(base.len());
                for (q, top) in (first..last).zip(tops.iter_mut()) {
                    let query = queries.get(q as u32);
                    for i in tile as u32..tile_end as u32 {
                        top.push(metric.distance(query, base.get(i)), i as u64);
                    }
                }
            }
            progress.advance((last - first) as u64);
            tops.into_iter().map(TopK::into_sorted)
        })
        .collect())
}

/// Queries scanned together (their vectors stay in cache with the tile).
const QUERY_GROUP: usize = 32;
/// Base rows a tile: 256 x 768 float32 is 768 KiB, within a core's L2.
const BASE_TILE: usize = 256;

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

    /// Many queries (several groups) over a base that is not a whole number of tiles: each
    /// query's answer, in the queries' order, is its own brute-force top k.
    #[test]
    fn grouped_tiled_scan_answers_each_query_in_order() {
        let dim = 8;
        let value = |i: usize| ((i * 7919) % 1013) as f32 / 1013.0 - 0.5;
        let base: Vec<f32> = (0..(BASE_TILE * 3 + 17) * dim).map(value).collect();
        let queries: Vec<f32> = (0..(QUERY_GROUP * 5 + 3) * dim)
            .map(|i| value(i * 31 + 5))
            .collect();
        let (b, q) = (Rows::new(&base, dim), Rows::new(&queries, dim));
        let got = search(b, q, Metric::L2, 5, &NoProgress).unwrap();
        assert_eq!(got.len(), q.len());
        for (qi, hits) in got.iter().enumerate() {
            let mut all: Vec<(f32, u64)> = (0..b.len() as u32)
                .map(|i| (Metric::L2.distance(q.get(qi as u32), b.get(i)), i as u64))
                .collect();
            all.sort_by(|x, y| x.0.total_cmp(&y.0).then(x.1.cmp(&y.1)));
            let want: Vec<u64> = all[..5].iter().map(|x| x.1).collect();
            assert_eq!(
                hits.iter().map(|h| h.0).collect::<Vec<_>>(),
                want,
                "query {qi}"
            );
        }
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
