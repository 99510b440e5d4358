//! Helpers shared by the test files that include this module (each uses some of them).
#![allow(dead_code)]

use std::time::{Duration, Instant};

use diskvec_db::{CollectionConfig, PointId, PointRecord};
use diskvec_vector::Metric;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Point `i`'s vector of `dim` dimensions near one of `centres` seeded centres (point `i`
/// near centre `i % centres`), so k-means and graphs have structure to find; the same for
/// the same arguments.
pub fn clustered_vector(i: u64, dim: usize, centres: u64) -> Vec<f32> {
    let mut centre_rng = SmallRng::seed_from_u64(i % centres);
    let mut rng = SmallRng::seed_from_u64(1_000_000 + i);
    (0..dim)
        .map(|_| centre_rng.random_range(-1.0f32..1.0) * 3.0 + rng.random_range(-1.0f32..1.0))
        .collect()
}

/// The points of `range` with their `clustered_vector`s and no payload.
pub fn clustered_points(range: std::ops::Range<u64>, dim: usize, centres: u64) -> Vec<PointRecord> {
    range
        .map(|i| {
            PointRecord::new(
                PointId::Num(i),
                clustered_vector(i, dim, centres),
                Default::default(),
            )
        })
        .collect()
}

/// Points of 4 dimensions, no payload, each vector distinct and found by itself.
pub fn small_points(range: std::ops::Range<u64>) -> Vec<PointRecord> {
    range
        .map(|i| {
            PointRecord::new(
                PointId::Num(i),
                vec![i as f32, 1.0, (i % 7) as f32, 2.0],
                Default::default(),
            )
        })
        .collect()
}

/// How many sealed segments `info` lists.
pub fn sealed_count(info: &diskvec_db::CollectionInfo) -> usize {
    info.segments.iter().filter(|s| s.kind == "sealed").count()
}

/// Each of `ids`, a `small_points` point, is the nearest hit for its own vector.
pub fn small_points_found(c: &diskvec_db::Collection, ids: &[u64]) {
    for &id in ids {
        let v = small_points(id..id + 1)
            .remove(0)
            .vector()
            .unwrap()
            .to_vec();
        let hits = c.search(&v, &diskvec_db::SearchRequest::new(1)).unwrap();
        assert_eq!(hits[0].id, PointId::Num(id));
    }
}

/// A collection of `small_points` (L2) sealed every `seal_threshold` points, with a small
/// graph (quick builds) and no idle merge (the tests say when to merge).
pub fn small_config(seal_threshold: usize) -> CollectionConfig {
    let mut cfg = CollectionConfig::new(4, Metric::L2);
    cfg.seal_threshold = seal_threshold;
    cfg.max_degree = 8;
    cfg.build_list = 16;
    cfg.idle_merge_ms = 0;
    cfg
}

/// Polls `done` every 20 ms; fails the test, naming `what`, after `limit`.
pub fn wait_until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < limit, "{what}: waited {limit:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The nice value of this process's thread named `name` (the kernel keeps 15 bytes of it),
/// or `None` if it has none.
pub fn thread_nice(name: &str) -> Option<i32> {
    for task in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim_end() == name {
            let stat = std::fs::read_to_string(task.path().join("stat")).ok()?;
            return nice_in_stat(&stat);
        }
    }
    None
}

/// The nice value of this process (its main thread's).
pub fn process_nice() -> i32 {
    nice_in_stat(&std::fs::read_to_string("/proc/self/stat").unwrap()).unwrap()
}

/// Field 19 (nice) of a /proc stat line: the 17th after the name's closing parenthesis.
fn nice_in_stat(stat: &str) -> Option<i32> {
    stat[stat.rfind(')')? + 2..]
        .split(' ')
        .nth(16)?
        .parse()
        .ok()
}
