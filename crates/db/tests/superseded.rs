//! A seal that a merge of everything would redo is cancelled, so a bulk load followed by
//! `optimize` (or a pause in writes) builds its points once. Every build here starts 1.5 s
//! late (`DISKVEC_DELAY`), so the merge is asked for while the first seal is running; this
//! file is its own test process, so the delay touches no other test.

use std::time::{Duration, Instant};

use diskvec_db::{Collection, CollectionConfig, Database, PointId, PointRecord, Status};
use diskvec_vector::Metric;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const DIM: usize = 16;

fn points(range: std::ops::Range<u64>) -> Vec<PointRecord> {
    range
        .map(|i| {
            let mut rng = SmallRng::seed_from_u64(i);
            let vector = (0..DIM).map(|_| rng.random_range(-1.0f32..1.0)).collect();
            PointRecord::new(PointId::Num(i), vector, Default::default())
        })
        .collect()
}

fn config(idle_merge_ms: u64) -> CollectionConfig {
    let mut c = CollectionConfig::new(DIM, Metric::L2);
    c.seal_threshold = 2_000;
    c.max_degree = 16;
    c.build_list = 32;
    c.idle_merge_ms = idle_merge_ms;
    c
}

/// One build of every point: one seal of the frozen segments together, no seal of the first
/// one alone and no merge after it.
fn built_once(c: &Collection, points: usize) {
    let info = c.info();
    assert_eq!(info.status, Status::Green, "{:?}", info.error);
    assert_eq!(info.indexed_points, points);
    assert_eq!(
        (info.seals_done, info.rebuilds_done),
        (1, 0),
        "one build of everything: {:?}",
        info.last_task
    );
    let last = info.last_task.unwrap();
    assert_eq!(last.points, points, "{last:?}");
    let sealed = info.segments.iter().filter(|s| s.kind == "sealed").count();
    assert_eq!(sealed, 1, "{:?}", info.segments);
    let hits = c
        .search(&points_vector(777), &diskvec_db::SearchRequest::new(1))
        .unwrap();
    assert_eq!(hits[0].id, PointId::Num(777));
}

fn points_vector(i: u64) -> Vec<f32> {
    points(i..i + 1).remove(0).vector().unwrap().to_vec()
}

#[test]
fn optimize_cancels_the_seal_it_would_redo() {
    std::env::set_var("DISKVEC_DELAY", "build=1500");
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let c = db.create_collection("c", config(0)).unwrap();
    c.upsert(points(0..2_000)).unwrap(); // freezes: the seal starts
    c.upsert(points(2_000..2_500)).unwrap();
    c.optimize(true).unwrap();
    built_once(&c, 2_500);
}

#[test]
fn a_pause_in_writes_cancels_the_seal_the_idle_merge_would_redo() {
    std::env::set_var("DISKVEC_DELAY", "build=1500");
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let c = db.create_collection("c", config(300)).unwrap();
    c.upsert(points(0..2_000)).unwrap();
    c.upsert(points(2_000..3_500)).unwrap();
    let started = Instant::now();
    while c.info().status != Status::Green || c.info().indexed_points < 3_500 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{:?}",
            c.info()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    built_once(&c, 3_500);
}
