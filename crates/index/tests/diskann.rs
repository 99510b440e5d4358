//! The disk index end to end: build, open, search with both engines, and refuse damaged files.

mod common;

use std::path::Path;

use common::{clustered, engines, exact_rows, recall};
use diskvec_index::diskann::{
    build, BuildParams, DiskIndex, OpenOptions, SearchParams, SearchService,
};
use diskvec_index::{IndexError, NoProgress};
use diskvec_io::{EngineChoice, EngineKind};
use diskvec_vector::{Metric, Rows};

const DIM: usize = 48;

fn build_small(dir: &Path, n: usize, metric: Metric) -> Vec<f32> {
    build_with_entries(dir, n, metric, BuildParams::default().entry_points)
}

fn build_with_entries(dir: &Path, n: usize, metric: Metric, entry_points: usize) -> Vec<f32> {
    let data = clustered(n, DIM, 11);
    let ids: Vec<i64> = (0..n as i64).map(|i| 1000 + i * 3).collect();
    let params = BuildParams {
        metric,
        max_degree: 24,
        build_list: 60,
        pq_bytes: Some(12),
        entry_points,
        ..Default::default()
    };
    // On one thread, so the graph, and the recall bars below, are the same on every run:
    // with two, the insertions' interleaving moved cosine recall at L=80 across 0.95
    // (0.947-0.949 in about one run in seven).
    rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap()
        .install(|| build(&data, DIM, &ids, &params, dir, &NoProgress))
        .unwrap();
    data
}

fn truth(data: &[f32], queries: &[f32], metric: Metric, k: usize) -> Vec<Vec<i64>> {
    exact_rows(data, queries, DIM, metric, k)
        .into_iter()
        .map(|r| r.into_iter().map(|(i, _)| 1000 + i as i64 * 3).collect())
        .collect()
}

#[test]
fn recall_is_high_on_both_engines_and_all_metrics() {
    for metric in [Metric::Cosine, Metric::L2, Metric::InnerProduct] {
        let dir = tempfile::tempdir().unwrap();
        let data = build_small(dir.path(), 4000, metric);
        let queries = clustered(100, DIM, 99);
        let gt = truth(&data, &queries, metric, 10);
        for engine in engines() {
            let mut hits_without_cache = 0;
            // 256 records hold the entry nodes only; 456 a prefix of 200 besides.
            for cache in [256, 456] {
                let idx = DiskIndex::open(
                    dir.path(),
                    &OpenOptions {
                        engine,
                        cache_nodes: Some(cache),
                        ..Default::default()
                    },
                )
                .unwrap();
                let params = SearchParams {
                    k: 10,
                    search_list: 80,
                    beam_width: 4,
                    queries_per_thread: 4,
                    ..Default::default()
                };
                let (results, stats) = idx
                    .search_batch(Rows::new(&queries, DIM), &params, 2)
                    .unwrap();
                let r: f64 = results
                    .iter()
                    .zip(&gt)
                    .map(|(res, t)| recall(&res.ids, t, 10))
                    .sum::<f64>()
                    / 100.0;
                // Maximum inner product on vectors of unequal norm is the harder problem
                // (PQ error grows with the norm), so it gets a lower bar.
                let bar = if metric == Metric::InnerProduct {
                    0.90
                } else {
                    0.95
                };
                assert!(r > bar, "{metric} {engine:?} cache {cache}: recall {r}");
                let reads: u32 = results.iter().map(|r| r.reads).sum();
                let hits: u32 = results.iter().map(|r| r.cache_hits).sum();
                assert!(reads > 0);
                // Entry nodes come first in the node cache, so they alone give hits; a
                // prefix cache must add to them.
                assert!(hits > 0, "no DRAM hits");
                if cache == 256 {
                    hits_without_cache = hits;
                } else {
                    assert!(
                        hits > hits_without_cache,
                        "cache of {cache} added no hits: {hits} vs {hits_without_cache}"
                    );
                }
                let expected = match engine {
                    EngineChoice::Uring => EngineKind::Uring,
                    _ => EngineKind::Pread,
                };
                assert_eq!(stats.engine, expected, "the engine asked for must run");
                assert!(results
                    .iter()
                    .all(|r| r.distances.windows(2).all(|w| w[0] <= w[1])));
            }
        }
    }
}

#[test]
fn pipelined_and_one_at_a_time_search_agree() {
    let dir = tempfile::tempdir().unwrap();
    let _ = build_small(dir.path(), 2000, Metric::L2);
    let queries = clustered(40, DIM, 5);
    let idx = DiskIndex::open(dir.path(), &OpenOptions::default()).unwrap();
    let base = SearchParams {
        k: 5,
        search_list: 40,
        beam_width: 1,
        lone_query_widens: false,
        queries_per_thread: 1,
        ..Default::default()
    };
    let (serial, _) = idx
        .search_batch(Rows::new(&queries, DIM), &base, 1)
        .unwrap();
    let piped = SearchParams {
        queries_per_thread: 8,
        ..base
    };
    let (pipelined, stats) = idx
        .search_batch(Rows::new(&queries, DIM), &piped, 2)
        .unwrap();
    // With one read in flight per query, each query's path is the same however many
    // queries share the thread.
    for (a, b) in serial.iter().zip(&pipelined) {
        assert_eq!(a.ids, b.ids);
    }
    if stats.engine == EngineKind::Uring {
        assert!(
            stats.max_in_flight > 1,
            "interleaving kept {} reads in flight",
            stats.max_in_flight
        );
    }
    let one = idx.search(&queries[..DIM], &base).unwrap();
    assert_eq!(one.ids, serial[0].ids);
}

#[test]
fn entry_set_saves_reads_and_can_be_turned_off() {
    let dir = tempfile::tempdir().unwrap();
    let data = build_small(dir.path(), 4000, Metric::L2);
    let queries = clustered(200, DIM, 42);
    let gt = truth(&data, &queries, Metric::L2, 10);
    // The entry nodes' records, and no prefix.
    let idx = DiskIndex::open(
        dir.path(),
        &OpenOptions {
            cache_nodes: Some(256),
            ..Default::default()
        },
    )
    .unwrap();
    // One read in flight per query makes each traversal deterministic, so the two
    // settings are compared on the same graph, query by query.
    let run = |entry_set: bool| {
        let p = SearchParams {
            k: 10,
            search_list: 60,
            beam_width: 1,
            lone_query_widens: false,
            queries_per_thread: 1,
            entry_set,
            ..Default::default()
        };
        let (res, _) = idx.search_batch(Rows::new(&queries, DIM), &p, 2).unwrap();
        let reads: u32 = res.iter().map(|r| r.reads).sum();
        let hits: u32 = res.iter().map(|r| r.cache_hits).sum();
        let rec: f64 = res
            .iter()
            .zip(&gt)
            .map(|(r, t)| recall(&r.ids, t, 10))
            .sum::<f64>()
            / 200.0;
        (reads, hits, rec)
    };
    let (reads_off, hits_off, recall_off) = run(false);
    let (reads_on, hits_on, recall_on) = run(true);
    // Entry records sit in DRAM either way; starting from them makes a search use them more.
    assert!(
        hits_on > hits_off,
        "DRAM hits {hits_on} with the entry set, {hits_off} without"
    );
    assert!(
        reads_on < reads_off,
        "entry set read {reads_on} sectors, medoid only {reads_off}"
    );
    assert!(
        recall_on >= recall_off - 0.02,
        "recall {recall_on} vs {recall_off}"
    );
}

#[test]
fn k_above_count_returns_every_vector() {
    let dir = tempfile::tempdir().unwrap();
    let data = clustered(30, DIM, 1);
    let ids: Vec<i64> = (0..30).collect();
    build(
        &data,
        DIM,
        &ids,
        &BuildParams {
            metric: Metric::L2,
            pq_bytes: Some(4),
            ..Default::default()
        },
        dir.path(),
        &NoProgress,
    )
    .unwrap();
    let idx = DiskIndex::open(dir.path(), &OpenOptions::default()).unwrap();
    let r = idx
        .search(
            &data[..DIM],
            &SearchParams {
                k: 100,
                ..Default::default()
            },
        )
        .unwrap();
    let mut got = r.ids.clone();
    got.sort();
    assert_eq!(got, ids);
    assert_eq!(r.ids[0], 0, "a stored vector is its own nearest neighbour");
}

#[test]
fn bad_queries_and_parameters_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let _ = build_small(dir.path(), 500, Metric::Cosine);
    let idx = DiskIndex::open(dir.path(), &OpenOptions::default()).unwrap();
    let q = vec![0.1f32; DIM];
    let p = SearchParams::default();
    assert!(matches!(
        idx.search(&q[..DIM - 1], &p),
        Err(IndexError::DimensionMismatch {
            expected: DIM,
            got: 47
        })
    ));
    let mut nan = q.clone();
    nan[3] = f32::NAN;
    assert!(idx
        .search(&nan, &p)
        .unwrap_err()
        .to_string()
        .contains("non-finite"));
    assert!(idx.search(&q, &SearchParams { k: 0, ..p }).is_err());
    assert!(idx
        .search(&q, &SearchParams { beam_width: 0, ..p })
        .is_err());
}

#[test]
fn bad_build_input_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let p = BuildParams::default();
    let err = |data: &[f32], ids: &[i64], params: &BuildParams| {
        build(data, 2, ids, params, dir.path(), &NoProgress)
            .unwrap_err()
            .to_string()
    };
    assert!(err(&[], &[], &p).contains("no vectors"));
    assert!(err(&[1.0, f32::INFINITY], &[0], &p).contains("non-finite"));
    assert!(err(&[1.0, 2.0, 3.0, 4.0], &[5, 5], &p).contains("more than once"));
    assert!(err(&[1.0, 2.0], &[0, 1], &p).contains("ids given"));
    assert!(err(
        &[1.0, 2.0],
        &[0],
        &BuildParams {
            alpha: 0.5,
            ..p.clone()
        }
    )
    .contains("alpha"));
    assert!(err(
        &[1.0, 2.0],
        &[0],
        &BuildParams {
            pq_bytes: Some(3),
            ..p.clone()
        }
    )
    .contains("PQ bytes"));
}

fn flip_byte(path: &Path, offset: u64) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut b = [0u8];
    f.read_exact_at(&mut b, offset).unwrap();
    b[0] ^= 0x5a;
    f.write_all_at(&b, offset).unwrap();
}

fn open_err(dir: &Path) -> String {
    match DiskIndex::open(dir, &OpenOptions::default()) {
        Ok(_) => panic!("damaged index opened"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn damaged_files_are_refused_with_clear_errors() {
    let fresh = || {
        let dir = tempfile::tempdir().unwrap();
        build_small(dir.path(), 600, Metric::Cosine);
        dir
    };
    // The one node file of a single-directory index (its name carries the generation).
    let nodes = |d: &tempfile::TempDir| {
        std::fs::read_dir(d.path())
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|x| x == "dvn"))
            .unwrap()
    };
    let meta = |d: &tempfile::TempDir| d.path().join("meta.dvm");

    let d = fresh();
    std::fs::remove_file(meta(&d)).unwrap();
    assert!(open_err(d.path()).contains("meta.dvm"));

    assert!(open_err(Path::new("/nonexistent-index")).contains("/nonexistent-index"));

    let d = fresh();
    let len = std::fs::metadata(nodes(&d)).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(nodes(&d))
        .unwrap()
        .set_len(len - 4096)
        .unwrap();
    assert!(open_err(d.path()).contains("truncated"));

    let d = fresh();
    flip_byte(&nodes(&d), 20);
    assert!(open_err(d.path()).contains("header checksum"));

    let d = fresh();
    // A damaged version field is damage, not a version this build cannot read.
    flip_byte(&nodes(&d), 8);
    let msg = open_err(d.path());
    assert!(msg.contains("header checksum mismatch"), "{msg}");
    assert!(msg.contains("the version field reads"), "{msg}");
    assert!(!msg.contains("not supported"), "{msg}");

    let d = fresh();
    flip_byte(&meta(&d), 10);
    let msg = open_err(d.path());
    assert!(
        msg.contains("meta.dvm") && msg.contains("checksum mismatch"),
        "{msg}"
    );
    assert!(!msg.contains("not supported"), "{msg}");

    let d = fresh();
    flip_byte(&meta(&d), 100);
    assert!(open_err(d.path()).contains("checksum"));

    // Damage inside an entry node's sector is caught at open, which reads entry nodes.
    let d = fresh();
    let sectors = len / 4096;
    for s in 2..sectors {
        flip_byte(&nodes(&d), s * 4096 + 17);
    }
    let e = match DiskIndex::open(
        d.path(),
        &OpenOptions {
            cache_nodes: Some(256),
            ..Default::default()
        },
    ) {
        Ok(_) => panic!("damaged entry nodes went unnoticed"),
        Err(e) => e.to_string(),
    };
    assert!(e.contains("checksum"), "{e}");

    // A node sector damaged beyond what open reads (no entry set, no cache): opening
    // succeeds, the search that reads it fails.
    let d = tempfile::tempdir().unwrap();
    build_with_entries(d.path(), 600, Metric::Cosine, 0);
    for s in 2..sectors {
        flip_byte(&nodes(&d), s * 4096 + 17);
    }
    let idx = DiskIndex::open(
        d.path(),
        &OpenOptions {
            cache_nodes: Some(0),
            ..Default::default()
        },
    )
    .unwrap();
    let q = clustered(1, DIM, 3);
    let e = idx
        .search(&q, &SearchParams::default())
        .unwrap_err()
        .to_string();
    let file = nodes(&d);
    assert!(
        e.contains("checksum") && e.contains(file.to_str().unwrap()),
        "{e}"
    );
    // The same damage inside the cached prefix is caught at open.
    assert!(DiskIndex::open(
        d.path(),
        &OpenOptions {
            cache_nodes: Some(600),
            ..Default::default()
        }
    )
    .is_err());

    // Intact sectors in the wrong places (as a misdirected read or write would leave them):
    // each sector's CRC is seeded with its number, so the first read of one fails.
    let d = tempfile::tempdir().unwrap();
    build_with_entries(d.path(), 600, Metric::Cosine, 0);
    let bytes = std::fs::read(nodes(&d)).unwrap();
    let (header, body) = bytes.split_at(4096);
    let mut shuffled = header.to_vec();
    for sector in body.chunks(4096).rev() {
        shuffled.extend_from_slice(sector);
    }
    std::fs::write(nodes(&d), &shuffled).unwrap();
    let idx = DiskIndex::open(
        d.path(),
        &OpenOptions {
            cache_nodes: Some(0),
            ..Default::default()
        },
    )
    .unwrap();
    let e = idx
        .search(&clustered(1, DIM, 3), &SearchParams::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("checksum"),
        "misplaced sectors went unnoticed: {e}"
    );

    // Meta from another build of the same size.
    let d = fresh();
    let other = fresh();
    std::fs::copy(meta(&other), meta(&d)).unwrap();
    // The copied meta names the other build's node file; alone, that file is missing.
    let wanted = d.path().join(nodes(&other).file_name().unwrap());
    assert!(open_err(d.path()).contains(wanted.to_str().unwrap()));
    // Given that name, this build's node file is refused as another build's.
    std::fs::rename(nodes(&d), &wanted).unwrap();
    assert!(open_err(d.path()).contains("different build"));
}

fn build_striped(out: &Path, paths: &[std::path::PathBuf], mirror: bool) -> Vec<f32> {
    let data = clustered(3000, DIM, 11);
    let ids: Vec<i64> = (0..3000).collect();
    let params = BuildParams {
        metric: Metric::L2,
        max_degree: 24,
        build_list: 60,
        pq_bytes: Some(12),
        paths: paths.to_vec(),
        stripe_bytes: 8192,
        mirror,
        ..Default::default()
    };
    build(&data, DIM, &ids, &params, out, &NoProgress).unwrap();
    data
}

#[test]
fn a_path_failing_mid_search_is_named_or_survived_with_a_mirror() {
    let dir = tempfile::tempdir().unwrap();
    let paths: Vec<_> = (0..4).map(|i| dir.path().join(format!("ns{i}"))).collect();
    paths.iter().for_each(|p| std::fs::create_dir(p).unwrap());
    let queries = clustered(60, DIM, 8);
    // One query in flight, one read at a time: each search's path is then fixed, so reading
    // through the mirror must give exactly the answers read before the fault (with reads
    // overlapping, the order they complete in moves recall by about 0.01 either way).
    let params = SearchParams {
        k: 10,
        search_list: 40,
        beam_width: 1,
        lone_query_widens: false,
        queries_per_thread: 1,
        ..Default::default()
    };
    for mirror in [true, false] {
        let out = dir.path().join(format!("idx-{mirror}"));
        let data = build_striped(&out, &paths, mirror);
        let idx = DiskIndex::open(
            &out,
            &OpenOptions {
                cache_nodes: Some(0),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(idx.mirrored(), mirror);
        let (before, _) = idx
            .search_batch(Rows::new(&queries, DIM), &params, 2)
            .unwrap();
        idx.inject_path_fault(2, 20);
        let after = idx.search_batch(Rows::new(&queries, DIM), &params, 2);
        if mirror {
            let (after, _) = after.unwrap();
            // Every answer read through the mirror is the node it claims to be: its distance
            // equals the true distance from the original vectors.
            for (q, r) in queries.chunks_exact(DIM).zip(&after) {
                for (&id, &d) in r.ids.iter().zip(&r.distances) {
                    let v = &data[id as usize * DIM..(id as usize + 1) * DIM];
                    let truth = Metric::L2.distance(q, v);
                    assert!(
                        (truth - d).abs() <= 1e-3 * truth.max(1.0),
                        "id {id}: {d} vs {truth}"
                    );
                }
            }
            let gt = truth(&data, &queries, Metric::L2, 10);
            let rec = |rs: &[diskvec_index::diskann::SearchResult]| -> f64 {
                rs.iter()
                    .zip(&gt)
                    .map(|(r, t)| {
                        recall(
                            &r.ids.iter().map(|i| 1000 + i * 3).collect::<Vec<_>>(),
                            t,
                            10,
                        )
                    })
                    .sum::<f64>()
                    / rs.len() as f64
            };
            let (r0, r1) = (rec(&before), rec(&after));
            assert!(r0 > 0.8, "recall {r0} before the fault");
            assert_eq!(r1, r0, "recall after failover");
            for (b, a) in before.iter().zip(&after) {
                assert_eq!(b.ids, a.ids, "the mirror serves the same nodes");
            }
            assert_eq!(idx.failed_paths(), vec![2]);
            assert!(idx.path_stats()[2].failovers >= 1);
        } else {
            let err = after.unwrap_err().to_string();
            let (files, _) = idx.placement();
            assert!(err.contains(files[2].to_str().unwrap()), "{err}");
        }
    }
    // Mirroring needs a second path.
    let one = vec![paths[0].clone()];
    let params = BuildParams {
        mirror: true,
        paths: one,
        pq_bytes: Some(4),
        ..Default::default()
    };
    let data = clustered(50, DIM, 1);
    let ids: Vec<i64> = (0..50).collect();
    let err = build(
        &data,
        DIM,
        &ids,
        &params,
        &dir.path().join("bad"),
        &NoProgress,
    )
    .unwrap_err();
    assert!(err.to_string().contains("two paths"), "{err}");
}

#[test]
fn the_search_service_answers_many_callers_like_the_batch() {
    let dir = tempfile::tempdir().unwrap();
    let _ = build_small(dir.path(), 2000, Metric::L2);
    let queries = clustered(48, DIM, 6);
    let idx = std::sync::Arc::new(
        DiskIndex::open(
            dir.path(),
            &OpenOptions {
                cache_nodes: Some(0),
                ..Default::default()
            },
        )
        .unwrap(),
    );
    let params = SearchParams {
        k: 5,
        search_list: 40,
        beam_width: 1,
        lone_query_widens: false,
        queries_per_thread: 4,
        ..Default::default()
    };
    let (batch, _) = idx
        .search_batch(Rows::new(&queries, DIM), &params, 1)
        .unwrap();
    // No threads is refused, as build and the CLI refuse it.
    let zero = idx.search_batch(Rows::new(&queries, DIM), &params, 0);
    assert!(zero.unwrap_err().to_string().contains("threads"));
    assert!(SearchService::start(idx.clone(), params, 0).is_err());
    let service = SearchService::start(idx.clone(), params, 2).unwrap();
    let answers: Vec<Vec<i64>> = std::thread::scope(|s| {
        let callers: Vec<_> = (0..8)
            .map(|c| {
                let (service, queries) = (&service, &queries);
                s.spawn(move || {
                    (c..48)
                        .step_by(8)
                        .map(|i| (i, service.search(&queries[i * DIM..(i + 1) * DIM])))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut all = vec![Vec::new(); 48];
        for c in callers {
            for (i, r) in c.join().unwrap() {
                all[i] = r.unwrap().ids;
            }
        }
        all
    });
    for (a, b) in answers.iter().zip(&batch) {
        assert_eq!(a, &b.ids);
    }
    assert!(matches!(
        service.search(&queries[..DIM - 1]),
        Err(IndexError::DimensionMismatch { .. })
    ));
    let mut nan = queries[..DIM].to_vec();
    nan[3] = f32::NAN;
    assert!(service.search(&nan).is_err());
    // A failing read fails that query, and the service goes on answering.
    idx.inject_path_fault(0, 0);
    let err = service.search(&queries[..DIM]).unwrap_err().to_string();
    assert!(err.contains("injected fault"), "{err}");
    assert!(service.search(&queries[DIM..2 * DIM]).is_err());
    drop(service);
}
