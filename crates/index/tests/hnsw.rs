//! The in-memory HNSW baseline: recall against exact search, and its errors.

mod common;

use common::{clustered, recall};
use diskvec_index::hnsw::{HnswIndex, HnswParams};
use diskvec_index::{flat, NoProgress};
use diskvec_vector::{Metric, Rows};

const DIM: usize = 32;

#[test]
fn recall_is_high_for_every_metric() {
    let data = clustered(5000, DIM, 3);
    let queries = clustered(100, DIM, 77);
    let ids: Vec<i64> = (0..5000).map(|i| i * 2 + 1).collect();
    for metric in [Metric::L2, Metric::Cosine, Metric::InnerProduct] {
        let params = HnswParams {
            m: 16,
            ef_construction: 100,
            seed: 2,
        };
        let index = HnswIndex::build(&data, DIM, &ids, metric, params, &NoProgress).unwrap();
        assert_eq!(index.len(), 5000);
        let mut base = data.clone();
        base.chunks_exact_mut(DIM).for_each(|v| metric.prepare(v));
        let mut q = queries.clone();
        q.chunks_exact_mut(DIM).for_each(|v| metric.prepare(v));
        let truth = flat::search(
            Rows::new(&base, DIM),
            Rows::new(&q, DIM),
            metric,
            10,
            &NoProgress,
        )
        .unwrap();
        let truth_ids: Vec<Vec<i64>> = truth
            .iter()
            .map(|t| t.iter().map(|(row, _)| ids[*row as usize]).collect())
            .collect();
        let recall_at = |ef: usize, threads: usize| {
            let (results, _) = index
                .search_batch(Rows::new(&queries, DIM), 10, ef, threads)
                .unwrap();
            assert!(results
                .iter()
                .all(|r| r.distances.windows(2).all(|w| w[0] <= w[1])));
            results
                .iter()
                .zip(&truth_ids)
                .map(|(res, t)| recall(&res.ids, t, 10))
                .sum::<f64>()
                / 100.0
        };
        let r = recall_at(128, 2);
        assert!(r > 0.95, "{metric}: recall@10 {r}");
        // A larger ef does no worse here, and ef below k is raised to k.
        let rw = recall_at(256, 1);
        assert!(rw >= r - 0.01, "{metric}: ef 256 recall {rw} vs ef 128 {r}");
        assert_eq!(index.search(&queries[..DIM], 10, 1).unwrap().ids.len(), 10);
    }
}

#[test]
fn k_above_count_returns_every_vector() {
    let data = clustered(40, DIM, 1);
    let ids: Vec<i64> = (0..40).collect();
    let index = HnswIndex::build(
        &data,
        DIM,
        &ids,
        Metric::L2,
        HnswParams::default(),
        &NoProgress,
    )
    .unwrap();
    let r = index.search(&data[..DIM], 100, 100).unwrap();
    let mut got = r.ids.clone();
    got.sort();
    assert_eq!(got, ids);
    assert_eq!(r.ids[0], 0);
}

#[test]
fn bad_input_is_refused() {
    let data = clustered(50, DIM, 1);
    let ids: Vec<i64> = (0..50).collect();
    let p = HnswParams::default();
    assert!(HnswIndex::build(&[], DIM, &[], Metric::L2, p, &NoProgress).is_err());
    assert!(HnswIndex::build(&data, DIM, &ids[..49], Metric::L2, p, &NoProgress).is_err());
    let mut dup = ids.clone();
    dup[3] = 0;
    assert!(HnswIndex::build(&data, DIM, &dup, Metric::L2, p, &NoProgress).is_err());
    assert!(HnswIndex::build(
        &data,
        DIM,
        &ids,
        Metric::L2,
        HnswParams { m: 1, ..p },
        &NoProgress
    )
    .is_err());
    let index = HnswIndex::build(&data, DIM, &ids, Metric::L2, p, &NoProgress).unwrap();
    assert!(index.search(&data[..DIM - 1], 5, 10).is_err());
    assert!(index.search(&[f32::NAN; DIM], 5, 10).is_err());
    assert!(index.search(&data[..DIM], 0, 10).is_err());
}

#[test]
fn reused_scratch_gives_the_same_answers_and_is_checked() {
    let data = clustered(300, DIM, 4);
    let ids: Vec<i64> = (0..300).collect();
    let p = HnswParams::default();
    let index = HnswIndex::build(&data, DIM, &ids, Metric::L2, p, &NoProgress).unwrap();
    let mut scratch = index.scratch();
    for q in data.chunks_exact(DIM).step_by(37) {
        let a = index.search(q, 5, 20).unwrap();
        let b = index.search_with(q, 5, 20, &mut scratch).unwrap();
        assert_eq!(a.ids, b.ids);
    }
    assert!(index
        .search_with(&data[..DIM - 1], 5, 20, &mut scratch)
        .is_err());
    let small = HnswIndex::build(
        &data[..50 * DIM],
        DIM,
        &ids[..50],
        Metric::L2,
        p,
        &NoProgress,
    )
    .unwrap();
    // A larger index's scratch serves a smaller one; a smaller one's is refused.
    let reused = small
        .search_with(&data[..DIM], 5, 20, &mut scratch)
        .unwrap();
    assert_eq!(reused.ids, small.search(&data[..DIM], 5, 20).unwrap().ids);
    let err = index
        .search_with(&data[..DIM], 5, 20, &mut small.scratch())
        .unwrap_err();
    assert!(err.to_string().contains("smaller index"), "{err}");
}
