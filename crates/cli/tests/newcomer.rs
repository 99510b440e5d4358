//! What a newcomer runs into: out-of-range sizes, a search list below k, a closed stdout,
//! ground truth that does not fit the index, messages that repeat themselves, and a demo
//! binary moved away from the checkout. Each must end in a clear message (exit 1), never a
//! panic or an abort.

mod common;

use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::{diskvec, ok, synth};

/// A small synthetic dataset (ground truth of 20 per query) and an index built on it.
struct Fixture {
    _tmp: tempfile::TempDir,
    data: PathBuf,
    index: PathBuf,
}

impl Fixture {
    fn new() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path().join("synth");
        let index = tmp.path().join("idx");
        synth(&data, 1000, 20);
        ok(&[
            "build",
            "--dataset",
            data.to_str().unwrap(),
            "--index",
            index.to_str().unwrap(),
            "--max-degree",
            "16",
            "--build-list",
            "32",
            "--pq-bytes",
            "4",
            "--threads",
            "2",
        ]);
        Fixture {
            _tmp: tmp,
            data,
            index,
        }
    }

    fn d(&self) -> &str {
        self.data.to_str().unwrap()
    }

    fn i(&self) -> &str {
        self.index.to_str().unwrap()
    }
}

/// Runs `diskvec`, asserts exit code 1 with a message and no panic, and returns stderr.
fn refused(args: &[&str]) -> String {
    let out = diskvec(args);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(
        out.status.code(),
        Some(1),
        "diskvec {args:?}: {:?}\n{err}",
        out.status
    );
    assert!(err.lines().any(|l| l.starts_with("error: ")), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    err
}

#[test]
fn sizes_out_of_range_are_refused_with_their_range() {
    let f = Fixture::new();
    let search = |flag: &str, value: &str| {
        refused(&["search", "--index", f.i(), "--dataset", f.d(), flag, value])
    };
    for (flag, value, message) in [
        (
            "--k",
            "1099511627776",
            "k must be between 1 and 10000, got 1099511627776",
        ),
        (
            "--k",
            "18446744073709551615",
            "k must be between 1 and 10000, got 18446744073709551615",
        ),
        (
            "--search-list",
            "1099511627776",
            "search list must be between 1 and 10000, got 1099511627776",
        ),
        ("--beam-width", "65", "beam width must be between 1 and 64"),
        (
            "--queries-per-thread",
            "0",
            "queries per thread must be between 1 and 64, got 0",
        ),
        (
            "--queue-depth",
            "100000",
            "queue depth must be between 1 and 4096, got 100000",
        ),
        (
            "--threads",
            "0",
            "threads must be between 1 and 1024, got 0",
        ),
        (
            "--cache-nodes",
            "18446744073709551615",
            "cache nodes must be between 0 and 4294967294",
        ),
    ] {
        let err = search(flag, value);
        assert!(err.contains(message), "{flag} {value}: {err}");
        assert!(!err.contains("io_uring is unavailable"), "{err}");
    }

    let build = |flag: &str, value: &str| {
        let out = f.index.with_file_name("other");
        refused(&[
            "build",
            "--dataset",
            f.d(),
            "--index",
            out.to_str().unwrap(),
            flag,
            value,
        ])
    };
    for (flag, value, message) in [
        (
            "--threads",
            "0",
            "threads must be between 1 and 1024, got 0",
        ),
        ("--max-degree", "0", "max degree must be between 1 and 1024"),
        (
            "--build-list",
            "1099511627776",
            "build list must be between 1 and 10000",
        ),
        (
            "--pq-bytes",
            "17",
            "PQ bytes must be between 1 and 16, got 17",
        ),
    ] {
        let err = build(flag, value);
        assert!(err.contains(message), "{flag} {value}: {err}");
    }

    let err = refused(&["groundtruth", "--dataset", f.d(), "--k", "1099511627776"]);
    assert!(err.contains("k must be between 1 and 10000"), "{err}");
    let d = f.data.to_str().unwrap();
    for (flag, value, message) in [
        (
            "--qd",
            "1099511627776",
            "queue depth must be between 1 and 4096",
        ),
        ("--jobs", "0", "threads must be between 1 and 1024, got 0"),
        (
            "--bs",
            "6",
            "--bs must be a multiple of 4 (KiB) between 4 and 1024",
        ),
        (
            "--seconds",
            "inf",
            "--seconds must be above 0 and at most 86400",
        ),
    ] {
        // Checked before any I/O, so the paths are never written.
        let err = refused(&["iobench", "--paths", d, flag, value]);
        assert!(err.contains(message), "{flag} {value}: {err}");
    }

    for (flag, value, message) in [
        ("--ef", "1099511627776", "ef must be between 1 and 10000"),
        ("--m", "1", "M must be between 2 and 512, got 1"),
        (
            "--ef-construction",
            "0",
            "efConstruction must be between 1 and 10000, got 0",
        ),
        ("--k", "1099511627776", "k must be between 1 and 10000"),
        (
            "--threads",
            "0",
            "threads must be between 1 and 1024, got 0",
        ),
    ] {
        let err = refused(&["hnsw", "--dataset", f.d(), flag, value]);
        assert!(err.contains(message), "{flag} {value}: {err}");
    }
}

#[test]
fn a_search_list_below_k_is_reported_as_the_value_used() {
    let f = Fixture::new();
    let out = diskvec(&[
        "search",
        "--index",
        f.i(),
        "--dataset",
        f.d(),
        "--k",
        "10",
        "--search-list",
        "5,8,20",
        "--json",
    ]);
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        err.matches("search list raised to k=10").count(),
        1,
        "{err}"
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    let used: Vec<u64> = lines[lines.len() - 3..]
        .iter()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["search_list"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(used, [10, 10, 20]);
    let rows: Vec<&str> = lines
        .iter()
        .filter(|l| l.split_whitespace().next().is_some_and(|c| c == "10"))
        .copied()
        .collect();
    assert_eq!(rows.len(), 2, "table rows say L=10: {stdout}");
    assert!(!lines.iter().any(|l| l.trim_start().starts_with("5 ")));
}

#[test]
fn a_closed_stdout_ends_the_program_quietly() {
    let f = Fixture::new();
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe(2) writes.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: pipe(2) just created both descriptors and nothing else owns them.
    let (reader, writer) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // The reader is gone before the first line, like `| head -0`: every write fails.
    drop(reader);
    let out = Command::new(env!("CARGO_BIN_EXE_diskvec"))
        .args([
            "search",
            "--index",
            f.i(),
            "--dataset",
            f.d(),
            "--search-list",
            "10,20",
        ])
        .stdout(Stdio::from(writer))
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !err.contains("panicked") && !err.contains("Broken pipe"),
        "{err}"
    );
    assert_ne!(out.status.code(), Some(101), "{err}");
    assert_eq!(out.status.signal(), Some(libc::SIGPIPE), "{:?}", out.status);

    // And like `| head -1`: the reader leaves after the first line.
    let mut child = Command::new(env!("CARGO_BIN_EXE_diskvec"))
        .args([
            "search",
            "--index",
            f.i(),
            "--dataset",
            f.d(),
            "--search-list",
            "10,20,30,40,50,60,70,80,90,100",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut first,
    )
    .unwrap();
    assert!(first.starts_with("index "), "{first}");
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_ne!(out.status.code(), Some(101), "{err}");
}

#[test]
fn ground_truth_that_does_not_fit_the_index_is_refused() {
    let f = Fixture::new();
    let path = f.data.join("neighbors.parquet");
    let truth = diskvec_dataset::read_neighbors(&path).unwrap();

    let foreign = diskvec_dataset::Neighbors {
        query_ids: truth.query_ids.clone(),
        lists: truth
            .lists
            .iter()
            .map(|l| l.iter().map(|id| id + 1_000_000).collect())
            .collect(),
    };
    diskvec_dataset::write_neighbors(&path, &foreign).unwrap();
    let err = refused(&["search", "--index", f.i(), "--dataset", f.d()]);
    assert!(err.contains("are not in the index (e.g. 1000"), "{err}");
    let err = refused(&["hnsw", "--dataset", f.d(), "--m", "8"]);
    assert!(err.contains("are not in the train vectors"), "{err}");

    let short = diskvec_dataset::Neighbors {
        query_ids: truth.query_ids.clone(),
        lists: truth.lists.iter().map(|l| l[..5].to_vec()).collect(),
    };
    diskvec_dataset::write_neighbors(&path, &short).unwrap();
    let err = refused(&["search", "--index", f.i(), "--dataset", f.d(), "--k", "10"]);
    assert!(
        err.contains("has 5 true neighbours, fewer than k = 10"),
        "{err}"
    );
    let err = refused(&["hnsw", "--dataset", f.d(), "--k", "10"]);
    assert!(err.contains("fewer than k = 10"), "{err}");
    // At k = 5 the same truth is enough.
    ok(&["search", "--index", f.i(), "--dataset", f.d(), "--k", "5"]);

    std::fs::remove_file(&path).unwrap();
    let err = refused(&["search", "--index", f.i(), "--dataset", f.d()]);
    assert!(err.contains("diskvec groundtruth --dataset"), "{err}");
}

#[test]
fn each_cause_is_said_once() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let sample = repo_root().join("data/wordnet-minilm384-5k");
    let err = refused(&[
        "search",
        "--index",
        "/nonexistent/idx",
        "--dataset",
        sample.to_str().unwrap(),
    ]);
    assert_eq!(
        err.trim_end(),
        "error: opening the index /nonexistent/idx: no index directory there"
    );

    let err = refused(&["build", "--dataset", "/nonexistent", "--index", d]);
    assert_eq!(
        err.trim_end(),
        "error: /nonexistent: no such file or directory"
    );

    let err = refused(&["build", "--dataset", d, "--index", d]);
    assert_eq!(err.matches("train.parquet").count(), 1, "{err}");
}

/// The checkout's root, where `data/wordnet-minilm384-5k` lives.
fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

#[test]
fn the_demo_binary_works_when_moved_and_says_where_it_looked() {
    let tmp = tempfile::tempdir().unwrap();
    let bin = tmp.path().join("bin").join("diskvec");
    std::fs::create_dir(bin.parent().unwrap()).unwrap();
    std::fs::copy(env!("CARGO_BIN_EXE_diskvec"), &bin).unwrap();
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();

    // ETXTBSY: another test thread may fork while our copy's write handle is still open,
    // and its child holds the handle until it execs; the copy is executable a moment later.
    let mut tries = 0;
    let out = loop {
        match Command::new(&bin).arg("demo").current_dir(&empty).output() {
            Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy && tries < 100 => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            other => break other.unwrap(),
        }
    };
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let looked = empty
        .canonicalize()
        .unwrap()
        .join("data/wordnet-minilm384-5k");
    let beside = bin
        .parent()
        .unwrap()
        .canonicalize()
        .unwrap()
        .join("data/wordnet-minilm384-5k");
    for place in [&looked, &beside] {
        assert!(err.contains(place.to_str().unwrap()), "{place:?} in {err}");
    }
    assert!(err.contains("--dataset"), "{err}");

    let db = tmp.path().join("demo-db");
    let out = Command::new(&bin)
        .args(["demo", "--db", db.to_str().unwrap()])
        .current_dir(repo_root())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("reopen check"), "{stdout}");
}
