//! Faults a long-running engine meets: read errors by the thousand, lost or damaged path
//! files at open and mid-search, flipped bytes. Each must fail only what it touches, name
//! where it happened, and leave the engine exact afterwards; nothing may hang.

mod common;

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use common::clustered;
use diskvec_index::diskann::{
    build, BuildParams, DiskIndex, OpenOptions, SearchParams, SearchResult, SearchService,
};
use diskvec_index::NoProgress;
use diskvec_vector::{Metric, Rows};

const DIM: usize = 48;
const N: usize = 3000;

/// Runs `work` on a thread of its own and fails the test if it does not finish in time.
fn within<T: Send + 'static>(seconds: u64, work: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(work());
    });
    rx.recv_timeout(Duration::from_secs(seconds))
        .unwrap_or_else(|_| panic!("did not finish within {seconds} s (hung?)"))
}

fn build_index(out: &Path, paths: &[PathBuf], mirror: bool) -> Vec<f32> {
    build_with(out, paths, mirror, BuildParams::default().entry_points)
}

/// `entry_points` 0 keeps open from reading any node sector when nothing is cached.
fn build_with(out: &Path, paths: &[PathBuf], mirror: bool, entry_points: usize) -> Vec<f32> {
    let data = clustered(N, DIM, 11);
    let ids: Vec<i64> = (0..N as i64).collect();
    let params = BuildParams {
        metric: Metric::L2,
        max_degree: 24,
        build_list: 60,
        pq_bytes: Some(12),
        paths: paths.to_vec(),
        stripe_bytes: 8192,
        mirror,
        entry_points,
        ..Default::default()
    };
    build(&data, DIM, &ids, &params, out, &NoProgress).unwrap();
    data
}

fn open(dir: &Path, cache_nodes: usize) -> diskvec_index::Result<DiskIndex> {
    DiskIndex::open(
        dir,
        &OpenOptions {
            cache_nodes: Some(cache_nodes),
            ..Default::default()
        },
    )
}

/// One read in flight per query, so a query's answer does not depend on the order in
/// which reads land and answers can be compared exactly.
fn params() -> SearchParams {
    SearchParams {
        k: 10,
        search_list: 40,
        beam_width: 1,
        lone_query_widens: false,
        queries_per_thread: 8,
        ..Default::default()
    }
}

fn ids_of(results: &[SearchResult]) -> Vec<Vec<i64>> {
    results.iter().map(|r| r.ids.clone()).collect()
}

fn path_dirs(root: &Path, n: usize) -> Vec<PathBuf> {
    let dirs: Vec<_> = (0..n).map(|i| root.join(format!("ns{i}"))).collect();
    dirs.iter().for_each(|p| std::fs::create_dir(p).unwrap());
    dirs
}

fn flip_byte(file: &Path, offset: u64) {
    let mut bytes = std::fs::read(file).unwrap();
    bytes[offset as usize] ^= 0x5a;
    std::fs::write(file, bytes).unwrap();
}

#[test]
fn thousands_of_read_faults_fail_only_their_own_queries() {
    let dir = tempfile::tempdir().unwrap();
    let data = build_index(dir.path(), &[], false);
    let idx = Arc::new(open(dir.path(), 0).unwrap());
    let queries = clustered(400, DIM, 5);
    let p = params();
    let (exact, _) = idx.search_batch(Rows::new(&queries, DIM), &p, 2).unwrap();
    let exact = ids_of(&exact);

    // Every 41st read fails: with ~40 reads a query, most queries meet no fault and some
    // meet one; across the rounds that is thousands of faults.
    idx.inject_intermittent_fault(0, 41);
    let service = Arc::new(SearchService::start(idx.clone(), p, 2).unwrap());
    let (ok, failed) = {
        let (service, queries, exact) = (service.clone(), queries.clone(), exact.clone());
        within(300, move || {
            let callers: Vec<_> = (0..8)
                .map(|c| {
                    let (service, queries, exact) =
                        (service.clone(), queries.clone(), exact.clone());
                    std::thread::spawn(move || {
                        let (mut ok, mut failed) = (0usize, 0usize);
                        for round in 0..12 {
                            for i in (c..400).step_by(8) {
                                match service.search(&queries[i * DIM..(i + 1) * DIM]) {
                                    // An answered query is the exact fault-free answer.
                                    Ok(r) => {
                                        assert_eq!(r.ids, exact[i], "query {i}, round {round}");
                                        ok += 1;
                                    }
                                    Err(e) => {
                                        assert!(e.to_string().contains("injected fault"), "{e}");
                                        failed += 1;
                                    }
                                }
                            }
                        }
                        (ok, failed)
                    })
                })
                .collect();
            callers
                .into_iter()
                .map(|c| c.join().unwrap())
                .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
        })
    };
    let faults = idx.injected_faults();
    assert!(faults >= 1000, "only {faults} faults injected");
    assert!(failed >= 1 && ok >= 1, "{ok} answered, {failed} failed");
    // A fault fails at most the one query whose read it was.
    assert!(
        failed as u64 <= faults,
        "{failed} failed queries from {faults} faults"
    );
    assert_eq!(ok + failed, 12 * 400);

    // The batch path: a fault fails the batch (it is one call) and names the query, and
    // leaves no slot or engine behind: once faults stop, answers are exact again.
    let batch = {
        let (idx, queries) = (idx.clone(), queries.clone());
        within(120, move || {
            (0..20)
                .map(|_| {
                    idx.search_batch(Rows::new(&queries, DIM), &params(), 2)
                        .is_err()
                })
                .filter(|&e| e)
                .count()
        })
    };
    assert!(batch >= 1, "no batch met a fault");
    idx.inject_intermittent_fault(0, 0);
    for _ in 0..3 {
        let (again, _) = idx.search_batch(Rows::new(&queries, DIM), &p, 2).unwrap();
        assert_eq!(ids_of(&again), exact);
        for q in 0..50 {
            assert_eq!(
                service
                    .search(&queries[q * DIM..(q + 1) * DIM])
                    .unwrap()
                    .ids,
                exact[q]
            );
        }
    }
    drop(data);
}

/// Every node's own vector as a query, so every node sector is read by some query.
fn search_every_node(idx: &DiskIndex, data: &[f32]) -> diskvec_index::Result<Vec<SearchResult>> {
    idx.search_batch(Rows::new(data, DIM), &params(), 2)
        .map(|(r, _)| r)
}

fn assert_finds_itself(results: &[SearchResult]) {
    for (i, r) in results.iter().enumerate() {
        assert_eq!(r.ids.first(), Some(&(i as i64)), "node {i}");
        assert!(r.distances[0] < 1e-6);
    }
}

#[test]
fn a_mirrored_index_survives_missing_unreadable_and_corrupt_path_files() {
    let dir = tempfile::tempdir().unwrap();
    let paths = path_dirs(dir.path(), 3);
    let out = dir.path().join("idx");
    let data = build_index(&out, &paths, true);
    let files = open(&out, 0).unwrap().placement().0;
    let saved = std::fs::read(&files[1]).unwrap();

    // Missing at open: the path is named as lost and every search is still answered.
    std::fs::rename(&files[1], dir.path().join("moved")).unwrap();
    let idx = open(&out, 0).unwrap();
    let lost = idx.lost_paths();
    assert_eq!(lost.len(), 1, "{lost:?}");
    assert_eq!(lost[0].1, files[1]);
    assert_finds_itself(&search_every_node(&idx, &data).unwrap());
    drop(idx);
    std::fs::rename(dir.path().join("moved"), &files[1]).unwrap();

    // The first path, which holds the header sector, missing or with a damaged header:
    // the index opens with meta.dvm's copy of the header and serves the path's mirror.
    let first = std::fs::read(&files[0]).unwrap();
    std::fs::remove_file(&files[0]).unwrap();
    let idx = open(&out, 0).unwrap();
    assert_eq!(idx.failed_paths(), vec![0]);
    assert_finds_itself(&search_every_node(&idx, &data).unwrap());
    drop(idx);
    let mut damaged = first.clone();
    damaged[100] ^= 0xff;
    std::fs::write(&files[0], &damaged).unwrap();
    let idx = open(&out, N).unwrap();
    assert_finds_itself(&search_every_node(&idx, &data).unwrap());
    drop(idx);
    std::fs::write(&files[0], &first).unwrap();

    // Wrong size (truncated) at open.
    std::fs::write(&files[1], &saved[..saved.len() / 2]).unwrap();
    let idx = open(&out, N).unwrap();
    assert_eq!(idx.failed_paths(), vec![1]);
    assert!(
        idx.lost_paths()[0].2.contains("size"),
        "{:?}",
        idx.lost_paths()
    );
    assert_finds_itself(&search_every_node(&idx, &data).unwrap());
    drop(idx);

    // Unreadable: permissions (skipped when running as root, who reads anyway).
    std::fs::write(&files[1], &saved).unwrap();

    // A flipped byte in one copy: read from the other copy, at open and mid-search.
    flip_byte(&files[1], 8192 + 100);
    let idx = open(&out, 0).unwrap();
    assert_finds_itself(&search_every_node(&idx, &data).unwrap());
    assert!(idx.path_stats()[1].failovers >= 1);
    // A checksum error is not a lost path: the path goes on serving its other sectors.
    assert!(idx.failed_paths().is_empty());
    drop(idx);
    let idx = open(&out, N).unwrap();
    assert_finds_itself(&search_every_node(&idx, &data).unwrap());
    drop(idx);

    // The path file vanishes (truncated to nothing) while the index is open and searching.
    std::fs::write(&files[1], &saved).unwrap();
    let idx = open(&out, 0).unwrap();
    assert_finds_itself(&search_every_node(&idx, &data).unwrap());
    std::fs::OpenOptions::new()
        .write(true)
        .open(&files[1])
        .unwrap()
        .set_len(0)
        .unwrap();
    assert_finds_itself(&search_every_node(&idx, &data).unwrap());
    assert_eq!(idx.failed_paths(), vec![1]);
    drop(idx);

    // Both copies of a stripe lost: refused, naming both files.
    std::fs::remove_file(&files[1]).unwrap();
    std::fs::remove_file(&files[2]).unwrap();
    let err = open(&out, 0).err().unwrap().to_string();
    assert!(
        err.contains(files[1].to_str().unwrap()) && err.contains(files[2].to_str().unwrap()),
        "{err}"
    );
}

#[test]
fn checksum_errors_name_the_file_and_offset_of_the_bad_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let paths = path_dirs(dir.path(), 3);
    let out = dir.path().join("idx");
    let data = build_with(&out, &paths, false, 0);
    let files = open(&out, 0).unwrap().placement().0;
    let bad_at = 2 * 8192 + 4096;
    flip_byte(&files[2], bad_at + 17);
    let want = format!("{}: the sector at offset {bad_at} ", files[2].display());

    // Found at open (the whole index cached).
    let err = open(&out, N).err().unwrap().to_string();
    assert!(err.contains(&want), "{err}");

    // Found during search.
    let idx = open(&out, 0).unwrap();
    let err = within(120, move || {
        search_every_node(&idx, &data).err().map(|e| e.to_string())
    })
    .expect("a search over every node must meet the bad sector");
    assert!(err.contains(&want), "{err}");
}
