//! Power loss at every storage operation of a build that replaces an index: every file the
//! build writes (intent record, node stripes and their mirrors, navigation and compact-code
//! files, meta.dvm, and, built in shards, the shard checkpoints) goes through the crash-model
//! storage, which keeps only what was synced. After each crash the directory must open as
//! the old index or the new one, whole: its checksums verified, its navigation and compact
//! codes loaded, every answer from one generation. Once the build returned, only the new.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::clustered;
use diskvec_index::diskann::{
    build_from, verify, BuildParams, DiskIndex, MemoryBudget, OpenOptions, SearchParams,
    SliceSource, SHARD_CAPACITY_VAR,
};
use diskvec_index::NoProgress;
use diskvec_io::storage::{create_dir_all_durable, CrashStorage};
use diskvec_vector::Metric;

const DIM: usize = 16;
const N: usize = 400;
/// The new generation's ids start here, so every answer tells which generation gave it.
const NEW_IDS: i64 = 1_000_000;

struct Layout {
    index: PathBuf,
    paths: Vec<PathBuf>,
}

fn layout(root: &Path) -> Layout {
    Layout {
        index: root.join("idx"),
        paths: (0..3).map(|p| root.join(format!("path{p}"))).collect(),
    }
}

fn params(storage: &CrashStorage, paths: &[PathBuf]) -> BuildParams {
    BuildParams {
        metric: Metric::L2,
        max_degree: 12,
        build_list: 30,
        pq_bytes: Some(8),
        entry_points: 4,
        paths: paths.to_vec(),
        stripe_bytes: 4096,
        mirror: true,
        storage: Arc::new(storage.clone()),
        ..Default::default()
    }
}

/// Builds generation `first_id` (its ids from there) of the index in `storage`'s root.
fn build_generation(storage: &CrashStorage, first_id: i64) -> diskvec_index::Result<()> {
    let l = layout(&storage.root());
    let data = clustered(N, DIM, first_id as u64);
    let ids: Vec<i64> = (first_id..first_id + N as i64).collect();
    let mut source = SliceSource::new(&data, DIM, &ids);
    build_from(
        &mut source,
        &params(storage, &l.paths),
        MemoryBudget::Bytes(1 << 30),
        &l.index,
        &NoProgress,
    )
    .map(|_| ())
}

/// A fresh root holding the storage paths and a whole first generation.
fn with_old_index() -> (tempfile::TempDir, CrashStorage) {
    let dir = tempfile::tempdir().unwrap();
    let storage = CrashStorage::new(dir.path()).unwrap();
    for p in &layout(&storage.root()).paths {
        create_dir_all_durable(&storage, p).unwrap();
    }
    build_generation(&storage, 0).unwrap();
    (dir, storage)
}

/// Which generation the index in `root` answers from: 0 for the old, 1 for the new, or
/// what is wrong with it.
fn generation_of(root: &Path) -> Result<u8, String> {
    let l = layout(root);
    let report = verify(&l.index, &NoProgress).map_err(|e| format!("verify: {e}"))?;
    if !report.damage.is_empty() {
        return Err(format!("damage: {:?}", report.damage));
    }
    let options = OpenOptions {
        navigation: true,
        compact_codes: true,
        cache_nodes: Some(0),
        ..Default::default()
    };
    let index = DiskIndex::open(&l.index, &options).map_err(|e| format!("open: {e}"))?;
    if let Some(p) = index.navigation_problem() {
        return Err(format!("navigation file: {p}"));
    }
    if let Some(p) = index.compact_problem() {
        return Err(format!("compact codes: {p}"));
    }
    let queries = clustered(8, DIM, 99);
    let params = SearchParams {
        k: 10,
        search_list: 40,
        ..Default::default()
    };
    let mut seen = [false; 2];
    for q in queries.chunks(DIM) {
        let found = index
            .search(q, &params)
            .map_err(|e| format!("search: {e}"))?;
        if found.ids.len() != 10 {
            return Err(format!("{} results", found.ids.len()));
        }
        for id in found.ids {
            seen[(id >= NEW_IDS) as usize] = true;
        }
    }
    match seen {
        [true, false] => Ok(0),
        [false, true] => Ok(1),
        _ => Err("answers from both generations".into()),
    }
}

/// What is in the index directory and on the paths, but the build lock and the checkpoints
/// an interrupted build in shards keeps on purpose (to resume after its finished shards).
fn files_in(root: &Path) -> Vec<String> {
    let l = layout(root);
    let mut names = Vec::new();
    for dir in std::iter::once(&l.index).chain(&l.paths) {
        for e in std::fs::read_dir(dir).unwrap() {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            if name != ".build.lock" && name != "build-checkpoint" {
                names.push(name);
            }
        }
    }
    names.sort();
    names
}

/// Crashes the second build at every storage operation (alternately plain and with torn
/// tails) and checks what each crash left; returns the build's count of operations.
fn crash_every_point(label: &str) -> u64 {
    let (_probe_dir, probe) = with_old_index();
    let whole = files_in(&probe.root()).len();
    let before = probe.ops();
    build_generation(&probe, NEW_IDS).unwrap();
    let total = probe.ops() - before;
    assert!(total >= 10, "{label}: only {total} storage operations");
    let mut seen = [0usize; 2];
    for point in 0..=total {
        let (_dir, storage) = with_old_index();
        storage.set_fail_after(storage.ops() + point);
        let built = build_generation(&storage, NEW_IDS);
        // The removals after the switch may fail without failing the build.
        if point == total {
            built.as_ref().unwrap();
        }
        let crashed = if point % 2 == 0 {
            storage.crash()
        } else {
            storage.crash_torn(point)
        };
        let root = crashed.root();
        let generation = generation_of(&root)
            .unwrap_or_else(|e| panic!("{label}: crash at operation {point} of {total}: {e}"));
        if built.is_ok() {
            assert_eq!(generation, 1, "{label}: a finished build was undone");
        }
        seen[generation as usize] += 1;
        // The open removed what the interrupted build left (of what the crash kept).
        let left = files_in(&root);
        assert!(
            left.len() <= whole,
            "{label}: crash at operation {point}: left {left:?}"
        );
    }
    assert!(seen[0] > 0 && seen[1] > 0, "{label}: {seen:?}");
    total
}

#[test]
fn a_build_crashed_at_any_point_leaves_the_old_index_or_the_new_one() {
    let in_memory = crash_every_point("in memory");
    // The same in shards (with their checkpoints): the variable is process-wide, so the two
    // builds run one after the other in this one test.
    std::env::set_var(SHARD_CAPACITY_VAR, "150");
    let sharded = crash_every_point("in shards");
    std::env::remove_var(SHARD_CAPACITY_VAR);
    assert!(sharded > in_memory, "{sharded} vs {in_memory} operations");
    eprintln!("storage operations: {in_memory} in memory, {sharded} in shards");
}
