//! What the database layer asks of the disk index: answers restricted to accepted ids,
//! per-request parameters in the search service, and full vectors fetched by id.

mod common;

use std::sync::Arc;

use common::{clustered, engines};
use diskvec_index::diskann::{
    build, Accept, BuildParams, DiskIndex, OpenOptions, SearchParams, SearchService,
};
use diskvec_index::NoProgress;
use diskvec_vector::Metric;

const DIM: usize = 32;
const N: usize = 3000;

fn build_index(dir: &std::path::Path) -> Vec<f32> {
    let data = clustered(N, DIM, 5);
    let ids: Vec<i64> = (0..N as i64).map(|i| i * 2 + 1).collect();
    let params = BuildParams {
        metric: Metric::Cosine,
        max_degree: 24,
        build_list: 60,
        pq_bytes: Some(8),
        ..Default::default()
    };
    build(&data, DIM, &ids, &params, dir, &NoProgress).unwrap();
    data
}

fn prepared(data: &[f32], row: usize) -> Vec<f32> {
    let mut v = data[row * DIM..(row + 1) * DIM].to_vec();
    Metric::Cosine.prepare(&mut v);
    v
}

/// Exact top-k over the accepted ids (id = 2 * row + 1).
fn exact_accepted(data: &[f32], query: &[f32], k: usize, accept: &dyn Fn(i64) -> bool) -> Vec<i64> {
    let mut q = query.to_vec();
    Metric::Cosine.prepare(&mut q);
    let mut scored: Vec<(f32, i64)> = (0..N)
        .map(|r| (r, r as i64 * 2 + 1))
        .filter(|&(_, id)| accept(id))
        .map(|(r, id)| (Metric::Cosine.distance(&q, &prepared(data, r)), id))
        .collect();
    scored.sort_by(|a, b| a.0.total_cmp(&b.0));
    scored.into_iter().take(k).map(|(_, id)| id).collect()
}

fn one_in_ten(id: i64) -> bool {
    (id as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32 & 0xff < 26
}

#[test]
fn only_accepted_ids_come_back_and_a_larger_list_finds_them() {
    let dir = tempfile::tempdir().unwrap();
    let data = build_index(dir.path());
    for engine in engines() {
        let index = DiskIndex::open(
            dir.path(),
            &OpenOptions {
                engine,
                cache_nodes: Some(0),
                ..Default::default()
            },
        )
        .unwrap();
        // One id in ten, spread over every cluster (a filter that matches no point near the
        // query is the database's problem: it enlarges the list or goes exact).
        let accept: Accept = Arc::new(one_in_ten);
        let mut found = 0usize;
        let mut wanted = 0usize;
        for row in (0..N).step_by(211) {
            let query = &data[row * DIM..(row + 1) * DIM];
            let params = SearchParams {
                k: 10,
                search_list: 400,
                ..Default::default()
            };
            let got = index
                .search_where(query, &params, Some(accept.clone()))
                .unwrap();
            assert!(got.ids.iter().all(|&id| one_in_ten(id)), "{:?}", got.ids);
            assert_eq!(got.ids.len(), 10, "L=400 reaches at least 10 accepted");
            let truth = exact_accepted(&data, query, 10, &one_in_ten);
            wanted += truth.len();
            found += got.ids.iter().filter(|id| truth.contains(id)).count();
            // Without a filter the same index answers unrestricted ids.
            let all = index.search(query, &params).unwrap();
            assert!(all.ids.iter().any(|&id| !one_in_ten(id)));
        }
        let recall = found as f64 / wanted as f64;
        assert!(recall > 0.9, "filtered recall {recall} on {engine:?}");
        // Nothing accepted: an empty answer, not an error.
        let none: Accept = Arc::new(|_| false);
        let got = index
            .search_where(&data[..DIM], &SearchParams::default(), Some(none))
            .unwrap();
        assert!(got.ids.is_empty());
    }
}

#[test]
fn fetched_vectors_are_the_stored_ones_and_unknown_ids_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let data = build_index(dir.path());
    for engine in engines() {
        for cache_nodes in [0, 500] {
            let index = DiskIndex::open(
                dir.path(),
                &OpenOptions {
                    engine,
                    cache_nodes: Some(cache_nodes),
                    ..Default::default()
                },
            )
            .unwrap();
            let rows: Vec<usize> = (0..N).step_by(7).chain([N - 1, 0]).collect();
            let ids: Vec<i64> = rows.iter().map(|&r| r as i64 * 2 + 1).collect();
            let mut seen = vec![0u32; ids.len()];
            index
                .fetch_vectors(&ids, |pos, v| {
                    seen[pos] += 1;
                    let want = prepared(&data, rows[pos]);
                    assert_eq!(v.len(), DIM);
                    for (a, b) in v.iter().zip(&want) {
                        assert!((a - b).abs() < 1e-6, "row {} differs", rows[pos]);
                    }
                })
                .unwrap();
            assert!(seen.iter().all(|&s| s == 1), "each id visited exactly once");
            assert_eq!(index.node_of(2), None);
            let err = index.fetch_vectors(&[1, 2], |_, _| {}).unwrap_err();
            assert!(
                err.to_string().contains("id 2 is not in this index"),
                "{err}"
            );
        }
    }
}

#[test]
fn the_service_takes_parameters_and_filters_per_request() {
    let dir = tempfile::tempdir().unwrap();
    let data = build_index(dir.path());
    let index = Arc::new(DiskIndex::open(dir.path(), &OpenOptions::default()).unwrap());
    let service = SearchService::start(index.clone(), SearchParams::default(), 2).unwrap();
    let query = &data[..DIM];
    let small = SearchParams {
        k: 3,
        search_list: 20,
        ..Default::default()
    };
    assert_eq!(
        service.search_where(query, &small, None).unwrap().ids.len(),
        3
    );
    let odd_rows: Accept = Arc::new(|id| (id - 1) / 2 % 2 == 1);
    // One read in flight: the walk does not depend on the order reads complete in, so the
    // service and the index must agree exactly.
    let big = SearchParams {
        k: 50,
        search_list: 300,
        beam_width: 1,
        lone_query_widens: false,
        ..Default::default()
    };
    let got = service.search_where(query, &big, Some(odd_rows)).unwrap();
    assert_eq!(got.ids.len(), 50);
    assert!(got.ids.iter().all(|&id| (id - 1) / 2 % 2 == 1));
    // The same per-request parameters through the index directly give the same answer.
    let direct = index
        .search_where(query, &big, Some(Arc::new(|id| (id - 1) / 2 % 2 == 1)))
        .unwrap();
    assert_eq!(direct.ids, got.ids);
    let bad = SearchParams {
        k: 0,
        ..Default::default()
    };
    assert!(service.search_where(query, &bad, None).is_err());
}
