//! A seal in shards killed part-way (kill -9 at a named step) resumes after the shards it
//! had finished when the database is opened again and the seal runs again on the same
//! points, instead of starting over; the segment it ends with answers like any other and
//! nothing of the checkpoint stays once it is committed.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

mod common;

use common::{clustered_points, clustered_vector};
use diskvec_db::{CollectionConfig, Database, PointId, SearchRequest};
use diskvec_vector::Metric;

const DIM: usize = 32;
const N: u64 = 6_000;
const CHILD_ENV: &str = "DISKVEC_RESUME_CHILD";
const CENTRES: u64 = 30;

/// The child: opens the database (replaying what a killed run acknowledged), writes the
/// points the first time, seals them all in shards and prints the seal's task info.
fn child(dir: &Path) {
    let db = Database::open(dir).unwrap();
    let c = match db.collection("docs") {
        Ok(c) => c,
        Err(_) => {
            let mut cfg = CollectionConfig::new(DIM, Metric::L2);
            cfg.seal_threshold = 2 * N as usize;
            cfg.max_degree = 24;
            cfg.build_list = 48;
            cfg.idle_merge_ms = 0;
            let c = db.create_collection("docs", cfg).unwrap();
            c.upsert(clustered_points(0..N, DIM, CENTRES)).unwrap();
            c
        }
    };
    c.optimize(true).unwrap();
    let info = c.info();
    assert_eq!(info.indexed_points, N as usize, "{info:?}");
    // Each of a sample of points finds itself first.
    let found = (0..N)
        .step_by(60)
        .filter(|&i| {
            let query = clustered_vector(i, DIM, CENTRES);
            let hits = c.search(&query, &SearchRequest::new(1)).unwrap();
            hits.first().map(|h| h.id) == Some(PointId::Num(i))
        })
        .count();
    println!("found {found}");
    println!(
        "task {}",
        serde_json::to_string(&info.last_task.unwrap()).unwrap()
    );
}

fn run(dir: &Path, failpoint: Option<&str>) -> std::process::Output {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "a_seal_killed_part_way_resumes_after_its_finished_shards",
        "--exact",
        "--nocapture",
    ])
    .env(CHILD_ENV, dir)
    .env(diskvec_index::diskann::SHARD_CAPACITY_VAR, "1500")
    .env_remove("DISKVEC_FAILPOINT")
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    if let Some(f) = failpoint {
        cmd.env("DISKVEC_FAILPOINT", f);
    }
    cmd.output().unwrap()
}

/// Finished shards in the database's checkpoint directories.
fn finished_shards(dir: &Path) -> usize {
    fn walk(p: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(p).into_iter().flatten().flatten() {
            if e.path().is_dir() {
                walk(&e.path(), out)
            } else {
                out.push(e.path())
            }
        }
    }
    let mut all = Vec::new();
    walk(dir, &mut all);
    all.iter()
        .filter(|p| {
            p.to_string_lossy()
                .contains(diskvec_index::diskann::CHECKPOINT_DIR)
                && p.extension().is_some_and(|e| e == "done")
        })
        .count()
}

#[test]
fn a_seal_killed_part_way_resumes_after_its_finished_shards() {
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        child(Path::new(&dir));
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    for round in 1..=3 {
        let out = run(&db, Some("build:first-shard"));
        assert!(
            !out.status.success(),
            "round {round}: the seal did not stop: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        assert!(String::from_utf8_lossy(&out.stderr).contains("failpoint build:first-shard"));
        assert_eq!(finished_shards(&db), round, "after round {round}");
    }
    let out = run(&db, None);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let task: serde_json::Value = serde_json::from_str(
        stdout
            .lines()
            .find_map(|l| l.strip_prefix("task "))
            .expect("the child's task line"),
    )
    .unwrap();
    assert_eq!(task["kind"], "seal", "{task}");
    assert_eq!(task["points"], N, "{task}");
    assert!(task["shards"].as_u64().unwrap() > 3, "{task}");
    assert_eq!(task["resumed_shards"], 3, "{task}");
    let found: usize = stdout
        .lines()
        .find_map(|l| l.strip_prefix("found "))
        .unwrap()
        .parse()
        .unwrap();
    assert!(found >= 95, "{found} of 100 points found themselves first");
    assert_eq!(
        finished_shards(&db),
        0,
        "a committed seal keeps no checkpoint"
    );
}
