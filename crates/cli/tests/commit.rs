//! A build replaces an index atomically: a crash at any step (an abort at each named
//! failpoint, and kill -9 at random moments) leaves the old index or the new one, whole
//! and searchable, and the next build removes what the interrupted one left behind.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::ok;

fn synth(root: &Path, n: usize, name: &str) -> PathBuf {
    let out = root.join(name);
    common::synth(&out, n, 10);
    out
}

fn build_command(dataset: &Path, index: &Path, paths: &[PathBuf]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_diskvec"));
    c.args(["build", "--dataset"])
        .arg(dataset)
        .arg("--index")
        .arg(index)
        .args(["--max-degree", "16", "--build-list", "32"]);
    if !paths.is_empty() {
        let joined: Vec<&str> = paths.iter().map(|p| p.to_str().unwrap()).collect();
        c.arg("--paths")
            .arg(joined.join(","))
            .args(["--stripe-kib", "4", "--mirror"]);
    }
    c.stdout(Stdio::null()).stderr(Stdio::piped());
    c
}

/// The index's vector count, after checking that it opens and answers the queries of
/// the dataset it was built from (`datasets` by size: 600 or 900 vectors).
fn count_and_search(index: &Path, datasets: (&Path, &Path)) -> u64 {
    let out = ok(&["inspect", "--index", index.to_str().unwrap(), "--json"]);
    let json: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    let count = json["count"].as_u64().unwrap();
    let dataset = if count == 600 { datasets.0 } else { datasets.1 };
    search(index, dataset, "20", &[]);
    count
}

/// `diskvec search` of `index` with `dataset`'s queries at search list `list`, then `extra`
/// options; its output.
fn search(index: &Path, dataset: &Path, list: &str, extra: &[&str]) -> String {
    let mut args = vec![
        "search",
        "--index",
        index.to_str().unwrap(),
        "--dataset",
        dataset.to_str().unwrap(),
        "--search-list",
        list,
    ];
    args.extend_from_slice(extra);
    ok(&args)
}

/// Every file under the index directory and the path directories.
fn files(index: &Path, paths: &[PathBuf]) -> Vec<String> {
    let mut all: Vec<String> = std::iter::once(index.to_path_buf())
        .chain(paths.iter().cloned())
        .flat_map(|d| std::fs::read_dir(d).unwrap().flatten())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    all.sort();
    all
}

/// `shard_capacity`: build in shards of at most that many vectors (the budgeted build's
/// scratch files and steps), else in memory.
fn interrupted_builds_leave_a_whole_index(
    paths: &[PathBuf],
    root: &Path,
    shard_capacity: Option<usize>,
) {
    let small = synth(root, 600, "small");
    let large = synth(root, 900, "large");
    let index = root.join("idx");
    let build_command = |dataset: &Path, index: &Path, paths: &[PathBuf]| {
        let mut c = build_command(dataset, index, paths);
        if let Some(capacity) = shard_capacity {
            c.env(
                diskvec_index::diskann::SHARD_CAPACITY_VAR,
                capacity.to_string(),
            );
        }
        c
    };
    let sharded_steps: &[(&str, u64)] = match shard_capacity {
        Some(_) => &[
            ("build:spooled", 600),
            ("build:partitioned", 600),
            ("build:first-shard", 600),
            ("build:merged", 600),
        ],
        None => &[],
    };
    assert!(build_command(&small, &index, paths)
        .status()
        .unwrap()
        .success());
    assert_eq!(count_and_search(&index, (&small, &large)), 600);
    let settled = files(&index, paths);

    for &(step, survivor) in sharded_steps.iter().chain(&[
        ("build:nodes-written", 600),
        ("build:meta-written", 600),
        ("build:committed", 900),
    ]) {
        let out = build_command(&large, &index, paths)
            .env("DISKVEC_FAILPOINT", step)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{step}: the build did not stop");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(step),
            "{step}"
        );
        assert_eq!(
            count_and_search(&index, (&small, &large)),
            survivor,
            "after {step}"
        );
        // Put the small index back for the next step.
        if survivor != 600 {
            assert!(build_command(&small, &index, paths)
                .status()
                .unwrap()
                .success());
        }
    }

    // kill -9 at moments spread over a build: the index is always one whole generation.
    let started = Instant::now();
    let full = {
        let t = Instant::now();
        assert!(build_command(&large, &index, paths)
            .status()
            .unwrap()
            .success());
        t.elapsed()
    };
    for i in 0..8u32 {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "kill loop too slow"
        );
        let dataset = if i % 2 == 0 { &small } else { &large };
        let mut child = build_command(dataset, &index, paths).spawn().unwrap();
        std::thread::sleep(full * i / 8);
        let _ = child.kill();
        let _ = child.wait();
        let count = count_and_search(&index, (&small, &large));
        assert!(
            count == 600 || count == 900,
            "kill {i}: index of {count} vectors"
        );
        // Opening the index reclaimed what the killed build left.
        let left: Vec<String> = files(&index, paths)
            .into_iter()
            .filter(|f| f.starts_with("build.") || f.starts_with("pending."))
            .collect();
        assert!(left.is_empty(), "kill {i}: left after an open: {left:?}");
    }

    // A complete build removes every leftover: the same file names as one clean build.
    assert!(build_command(&small, &index, paths)
        .status()
        .unwrap()
        .success());
    assert_eq!(count_and_search(&index, (&small, &large)), 600);
    let now = files(&index, paths);
    assert_eq!(now.len(), settled.len(), "{now:?} vs {settled:?}");
    assert!(now.iter().all(|f| !f.ends_with(".tmp")), "{now:?}");
}

#[test]
fn an_interrupted_build_in_one_directory_keeps_a_whole_index() {
    let root = tempfile::tempdir().unwrap();
    interrupted_builds_leave_a_whole_index(&[], root.path(), None);
}

#[test]
fn an_interrupted_build_in_shards_keeps_a_whole_index_and_leaves_no_scratch_files() {
    let root = tempfile::tempdir().unwrap();
    interrupted_builds_leave_a_whole_index(&[], root.path(), Some(300));
}

#[test]
fn an_interrupted_build_over_mirrored_paths_keeps_a_whole_index() {
    let root = tempfile::tempdir().unwrap();
    let paths: Vec<PathBuf> = (0..3).map(|i| root.path().join(format!("ns{i}"))).collect();
    paths.iter().for_each(|p| std::fs::create_dir(p).unwrap());
    interrupted_builds_leave_a_whole_index(&paths, root.path(), None);
}

#[test]
fn indexes_sharing_path_directories_never_remove_each_others_files() {
    let root = tempfile::tempdir().unwrap();
    let paths: Vec<PathBuf> = (0..2).map(|i| root.path().join(format!("ns{i}"))).collect();
    paths.iter().for_each(|p| std::fs::create_dir(p).unwrap());
    let data = synth(root.path(), 600, "data");
    // Same directory name in two places, and a name that is a prefix of another's.
    let indexes = [
        root.path().join("a").join("index"),
        root.path().join("b").join("index"),
        root.path().join("c").join("index.v2"),
    ];
    for round in 0..2 {
        for index in &indexes {
            std::fs::create_dir_all(index).unwrap();
            assert!(build_command(&data, index, &paths)
                .status()
                .unwrap()
                .success());
        }
        for index in &indexes {
            ok(&["verify", "--index", index.to_str().unwrap()]);
            assert_eq!(
                count_and_search(index, (&data, &data)),
                600,
                "round {round}"
            );
        }
    }
}

/// The recall@10 of `index` on its dataset's queries at L=40.
fn recall(index: &Path, dataset: &Path) -> f64 {
    let out = search(index, dataset, "40", &["--json"]);
    let json: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    json["recall"].as_f64().unwrap()
}

/// The JSON report of a build that succeeded.
fn build_report(mut build: Command) -> serde_json::Value {
    let out = build.arg("--json").stdout(Stdio::piped()).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    serde_json::from_str(stdout.lines().last().unwrap()).unwrap()
}

#[test]
fn a_build_in_shards_killed_part_way_resumes_after_the_shards_it_finished() {
    let root = tempfile::tempdir().unwrap();
    let data = synth(root.path(), 900, "data");
    let other = synth(root.path(), 600, "other");
    let index = root.path().join("idx");
    let sharded = |dataset: &Path, index: &Path| {
        let mut c = build_command(dataset, index, &[]);
        c.env(diskvec_index::diskann::SHARD_CAPACITY_VAR, "300");
        c
    };
    let checkpoint = index.join(diskvec_index::diskann::CHECKPOINT_DIR);
    let reference = build_report(sharded(&data, &root.path().join("reference")));
    let shards = reference["shards"].as_u64().unwrap();
    assert!(shards >= 4, "{reference}");
    assert_eq!(reference["resumed_shards"], 0);
    assert!(!root
        .path()
        .join("reference")
        .join(diskvec_index::diskann::CHECKPOINT_DIR)
        .exists());

    // Killed after the first shard it builds, three times: each run builds one more.
    for run in 1..=3u64 {
        let out = sharded(&data, &index)
            .env("DISKVEC_FAILPOINT", "build:first-shard")
            .output()
            .unwrap();
        assert!(!out.status.success(), "run {run} did not stop");
        let kept = std::fs::read_dir(&checkpoint)
            .unwrap()
            .filter(|e| e.as_ref().unwrap().path().extension().unwrap() == "done")
            .count() as u64;
        assert_eq!(kept, run, "finished shards after run {run}");
    }
    // A build of other data in the same place starts over (its shards differ), and leaves
    // nothing of the interrupted one behind once it commits.
    let out = sharded(&other, &index)
        .env("DISKVEC_FAILPOINT", "build:first-shard")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let kept = std::fs::read_dir(&checkpoint).unwrap().count();
    assert_eq!(
        kept, 2,
        "one shard of the other data: its lists and its record"
    );

    // Back to the first data: killed three more times, then to the end.
    for _ in 0..3 {
        let _ = sharded(&data, &index)
            .env("DISKVEC_FAILPOINT", "build:first-shard")
            .output()
            .unwrap();
    }
    let resumed = build_report(sharded(&data, &index));
    assert_eq!(resumed["resumed_shards"], 3, "{resumed}");
    assert_eq!(resumed["shards"], reference["shards"]);
    assert_eq!(count_and_search(&index, (&other, &data)), 900);
    assert!(
        !checkpoint.exists(),
        "a committed build keeps no checkpoint"
    );
    let (got, want) = (
        recall(&index, &data),
        recall(&root.path().join("reference"), &data),
    );
    assert!(got >= want - 0.02, "resumed {got} vs uninterrupted {want}");

    // A damaged shard file is built again, not taken.
    for _ in 0..2 {
        let _ = sharded(&other, &index)
            .env("DISKVEC_FAILPOINT", "build:first-shard")
            .output()
            .unwrap();
    }
    let lists = std::fs::read_dir(&checkpoint)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().unwrap() == "lists")
        .unwrap();
    let mut bytes = std::fs::read(&lists).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x55;
    std::fs::write(&lists, bytes).unwrap();
    let report = build_report(sharded(&other, &index));
    assert_eq!(report["resumed_shards"], 1, "{report}");
    assert_eq!(count_and_search(&index, (&other, &data)), 600);
}

#[test]
fn a_partitioned_build_resumes_only_its_own_shards_and_builds_the_same_index_every_time() {
    let root = tempfile::tempdir().unwrap();
    let data = synth(root.path(), 900, "data");
    let index = root.path().join("idx");
    let sharded = |builder: &str, index: &Path| {
        let mut c = build_command(&data, index, &[]);
        c.env(diskvec_index::diskann::SHARD_CAPACITY_VAR, "300")
            .args(["--graph-builder", builder]);
        c
    };
    let checkpoint = index.join(diskvec_index::diskann::CHECKPOINT_DIR);
    let done = || {
        std::fs::read_dir(&checkpoint)
            .unwrap()
            .filter(|e| e.as_ref().unwrap().path().extension().unwrap() == "done")
            .count()
    };
    // A Vamana shard is not taken by a PiPNN build of the same data, nor the other way.
    let killed = |builder: &str| {
        let out = sharded(builder, &index)
            .env("DISKVEC_FAILPOINT", "build:first-shard")
            .output()
            .unwrap();
        assert!(!out.status.success(), "{builder} did not stop");
    };
    killed("vamana");
    killed("pipnn");
    assert_eq!(
        done(),
        1,
        "the vamana shard is dropped, one pipnn shard kept"
    );
    killed("pipnn");
    assert_eq!(done(), 2);
    let resumed = build_report(sharded("pipnn", &index));
    assert_eq!(resumed["resumed_shards"], 2, "{resumed}");
    assert_eq!(resumed["graph_builder"], "pipnn");
    let reference = root.path().join("reference");
    let whole = build_report(sharded("pipnn", &reference));
    assert_eq!(whole["resumed_shards"], 0);
    assert_eq!(whole["shards"], resumed["shards"]);
    // The same input builds the same node records whichever shards were resumed: PiPNN's
    // lists do not depend on the order threads offer edges in. (Sector 0 is the header,
    // which names the generation.)
    let records = |dir: &Path| {
        let name = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .find(|f| f.starts_with("nodes."))
            .unwrap();
        std::fs::read(dir.join(name)).unwrap().split_off(4096)
    };
    assert!(
        records(&index) == records(&reference),
        "node records differ"
    );
    let (got, vamana) = (recall(&index, &data), {
        let v = root.path().join("vamana");
        build_report(sharded("vamana", &v));
        recall(&v, &data)
    });
    assert!(got >= vamana - 0.03, "pipnn {got} vs vamana {vamana}");
}
