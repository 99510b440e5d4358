//! The compact code set: every build (in memory or in shards) writes it beside its nodes, an
//! index opened with it holds a quarter of the PQ codes' bytes and still answers from the
//! full vectors, and a missing or damaged file leaves the full codes in use.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use common::{clustered, exact_rows, recall};
use diskvec_index::diskann::{
    build, build_from, compact_file_name, verify, BuildParams, DiskIndex, MemoryBudget,
    OpenOptions, SearchParams, SliceSource, SHARD_CAPACITY_VAR,
};
use diskvec_index::NoProgress;
use diskvec_vector::{Metric, Rows};

const DIM: usize = 48;
const N: usize = 3000;
const PQ_BYTES: usize = 16;

/// The shard knob is process-wide: builds take turns.
static ENV: Mutex<()> = Mutex::new(());

fn params() -> BuildParams {
    BuildParams {
        metric: Metric::L2,
        max_degree: 24,
        build_list: 60,
        pq_bytes: Some(PQ_BYTES),
        ..Default::default()
    }
}

/// Builds `data` into `dir`, in memory or (forced) in shards.
fn build_index(data: &[f32], dir: &Path, in_shards: bool) {
    let ids: Vec<i64> = (0..N as i64).collect();
    let _turn = ENV.lock().unwrap_or_else(|e| e.into_inner());
    if in_shards {
        std::env::set_var(SHARD_CAPACITY_VAR, "800");
        let built = build_from(
            &mut SliceSource::new(data, DIM, &ids),
            &params(),
            MemoryBudget::Bytes(1 << 30),
            dir,
            &NoProgress,
        );
        std::env::remove_var(SHARD_CAPACITY_VAR);
        assert!(built.unwrap().shards > 1);
    } else {
        build(data, DIM, &ids, &params(), dir, &NoProgress).unwrap();
    }
}

fn open(dir: &Path, compact_codes: bool) -> DiskIndex {
    DiskIndex::open(
        dir,
        &OpenOptions {
            cache_nodes: Some(0),
            compact_codes,
            ..Default::default()
        },
    )
    .unwrap()
}

fn compact_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            name.starts_with("compact.") && name.ends_with(".dvq")
        })
        .collect();
    files.sort();
    files
}

/// Recall@10 and whether every returned distance is the exact one.
fn answers(index: &DiskIndex, data: &[f32], queries: &[f32]) -> (f64, bool) {
    let truth = exact_rows(data, queries, DIM, Metric::L2, 10);
    let p = SearchParams {
        k: 10,
        search_list: 100,
        ..Default::default()
    };
    let (found, _) = index.search_batch(Rows::new(queries, DIM), &p, 2).unwrap();
    let mut sum = 0.0;
    let mut exact = true;
    for (q, (r, t)) in found.iter().zip(&truth).enumerate() {
        let ids: Vec<i64> = t.iter().map(|e| e.0 as i64).collect();
        sum += recall(&r.ids, &ids, 10);
        let query = &queries[q * DIM..(q + 1) * DIM];
        for (&id, &d) in r.ids.iter().zip(&r.distances) {
            let row = &data[id as usize * DIM..(id as usize + 1) * DIM];
            exact &= (Metric::L2.distance(query, row) - d).abs() <= 1e-3 * d.abs().max(1.0);
        }
    }
    (sum / found.len() as f64, exact)
}

#[test]
fn both_builds_write_compact_codes_that_answer_from_a_quarter_of_the_dram() {
    let data = clustered(N, DIM, 3);
    let queries = clustered(50, DIM, 71);
    for in_shards in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        build_index(&data, dir.path(), in_shards);
        assert_eq!(compact_files(dir.path()).len(), 1, "shards: {in_shards}");
        let full = open(dir.path(), false);
        let compact = open(dir.path(), true);
        assert!(!full.uses_compact_codes() && compact.uses_compact_codes());
        assert_eq!(compact.compact_problem(), None);
        assert_eq!(full.code_bytes_held(), N * PQ_BYTES);
        assert_eq!(compact.code_bytes_held(), N * PQ_BYTES / 4);
        let (full_recall, full_exact) = answers(&full, &data, &queries);
        let (compact_recall, compact_exact) = answers(&compact, &data, &queries);
        eprintln!("shards {in_shards}: recall@10 full {full_recall}, compact {compact_recall}");
        assert!(
            full_exact && compact_exact,
            "distances come from the full vectors"
        );
        assert!(
            compact_recall >= 0.9 && compact_recall >= full_recall - 0.08,
            "shards {in_shards}: recall@10 {compact_recall} compact, {full_recall} full"
        );
    }
}

#[test]
fn a_missing_or_damaged_compact_file_leaves_the_full_codes_and_says_why() {
    let data = clustered(N, DIM, 5);
    let queries = clustered(20, DIM, 17);
    let dir = tempfile::tempdir().unwrap();
    build_index(&data, dir.path(), false);
    let file = compact_files(dir.path()).pop().unwrap();
    let good = std::fs::read(&file).unwrap();

    let mut bad = good.clone();
    let middle = bad.len() / 2;
    bad[middle] ^= 0x40;
    std::fs::write(&file, &bad).unwrap();
    let index = open(dir.path(), true);
    assert!(!index.uses_compact_codes());
    assert!(index.compact_problem().unwrap().contains("checksum"));
    assert_eq!(index.code_bytes_held(), N * PQ_BYTES);
    assert!(answers(&index, &data, &queries).0 >= 0.9);
    let report = verify(dir.path(), &NoProgress).unwrap();
    assert!(
        report
            .damage
            .iter()
            .any(|d| format!("{d:?}").contains("compact.")),
        "{:?}",
        report.damage
    );

    std::fs::remove_file(&file).unwrap();
    let index = open(dir.path(), true);
    assert!(!index.uses_compact_codes());
    assert!(index
        .compact_problem()
        .unwrap()
        .contains("no compact code file"));
    assert!(verify(dir.path(), &NoProgress).unwrap().damage.is_empty());
}

#[test]
fn a_rebuild_replaces_the_compact_file_with_its_own_generation() {
    let data = clustered(N, DIM, 9);
    let dir = tempfile::tempdir().unwrap();
    build_index(&data, dir.path(), false);
    let first = compact_files(dir.path());
    build_index(&data, dir.path(), true);
    let second = compact_files(dir.path());
    assert_eq!(second.len(), 1);
    assert_ne!(first, second);
    let index = open(dir.path(), true);
    assert!(index.uses_compact_codes());
    let name = second[0]
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert_eq!(name, compact_file_name(index.header().build_id));
}
