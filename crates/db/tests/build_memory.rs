//! Seals and merges within a collection's build memory: a budget below what a build in
//! memory needs makes it run in shards (the merge reading its sealed sources' vectors from
//! SSD as it goes), and the segments it produces answer like any other.

mod common;

use diskvec_db::{
    CollectionConfig, Database, DbError, DbOptions, MemoryBudget, PointId, PointRecord,
    SearchRequest,
};
use diskvec_vector::Metric;
use serde_json::json;

const DIM: usize = 32;
const SEAL: usize = 20_000;

/// Points around 40 centres, so the shards' k-means has structure to find.
fn vector(i: u64) -> Vec<f32> {
    common::clustered_vector(i, DIM, 40)
}

fn points(range: std::ops::Range<u64>) -> Vec<PointRecord> {
    range
        .map(|i| {
            let payload = json!({"i": i}).as_object().unwrap().clone();
            PointRecord::new(PointId::Num(i), vector(i), payload)
        })
        .collect()
}

fn config() -> CollectionConfig {
    let mut c = CollectionConfig::new(DIM, Metric::L2);
    c.seal_threshold = SEAL;
    c.max_degree = 32;
    c.build_list = 64;
    c.idle_merge_ms = 0;
    c
}

/// A budget that a build of `n` points can work in, but only in shards.
fn sharding_budget(c: &CollectionConfig, n: usize) -> u64 {
    let shape = c.build_params(&c.dense[0], &[], n).shape(n, DIM).unwrap();
    let smallest = shape.smallest_budget().unwrap();
    let in_memory = shape.plan(u64::MAX / 4).unwrap().in_memory_bytes;
    assert!(
        smallest + (2 << 20) < in_memory,
        "{smallest} vs {in_memory}"
    );
    smallest + (in_memory - smallest) / 4
}

fn recall(c: &diskvec_db::Collection, live: &dyn Fn(u64) -> bool, n: u64) -> f64 {
    let mut found = 0;
    let queries = 40;
    for q in 0..queries {
        let query = vector(n + 7_919 * q);
        let mut exact: Vec<(f32, u64)> = (0..n)
            .filter(|&i| live(i))
            .map(|i| (Metric::L2.distance(&query, &vector(i)), i))
            .collect();
        exact.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let truth: Vec<u64> = exact.iter().take(10).map(|e| e.1).collect();
        let mut req = SearchRequest::new(10);
        req.search_list = Some(100);
        let hits = c.search(&query, &req).unwrap();
        found += hits
            .iter()
            .filter(|h| matches!(h.id, PointId::Num(i) if truth.contains(&i)))
            .count();
    }
    found as f64 / (queries * 10) as f64
}

#[test]
fn seals_and_merges_run_in_shards_within_the_collections_build_memory() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config();
    // Sized for the merge of both seals; the seals, half the size, may fit in memory.
    let budget = sharding_budget(&cfg, 2 * SEAL - 2_000);
    cfg.build_memory = Some(MemoryBudget::Bytes(budget));
    {
        let db = Database::open(dir.path()).unwrap();
        let c = db.create_collection("docs", cfg.clone()).unwrap();
        for chunk in (0..SEAL as u64).step_by(5_000) {
            c.upsert(points(chunk..chunk + 5_000)).unwrap();
        }
        c.optimize(true).unwrap();
        let seal = c.info().last_task.expect("a seal ran");
        assert_eq!(seal.kind, "seal");
        assert!(seal.memory_budget <= budget, "{seal:?}");
        assert!(seal.estimated_peak <= budget, "{seal:?}");

        // A second batch, 2,000 deletes among the sealed points, and a merge of the sealed
        // segment (read back from SSD) with the frozen one.
        c.upsert(points(SEAL as u64..2 * SEAL as u64)).unwrap();
        let gone: Vec<PointId> = (0..2_000u64).map(|i| PointId::Num(i * 10)).collect();
        c.delete(gone).unwrap();
        c.optimize(true).unwrap();
        let info = c.info();
        let merge = info.last_task.clone().expect("a merge ran");
        assert_eq!(merge.kind, "merge", "{merge:?}");
        assert_eq!(merge.points, 2 * SEAL - 2_000, "{merge:?}");
        assert!(
            merge.shards > 1,
            "the merge must have run in shards: {merge:?}"
        );
        assert!(merge.memory_budget <= budget, "{merge:?}");
        assert_eq!(info.points, 2 * SEAL - 2_000);
        assert_eq!(info.indexed_points, 2 * SEAL - 2_000);
        assert_eq!(common::sealed_count(&info), 1, "{:?}", info.segments);

        let live = |i: u64| !(i < 20_000 && i.is_multiple_of(10));
        let r = recall(&c, &live, 2 * SEAL as u64);
        assert!(r >= 0.8, "recall@10 {r}");
        // Every live point kept its payload and its vector.
        for i in [1u64, 19_999, 20_000, 39_999] {
            let got = c.get(&[PointId::Num(i)], true, true).unwrap();
            assert_eq!(got.len(), 1, "point {i}");
            assert_eq!(got[0].payload.as_ref().unwrap()["i"], i);
            let v = got[0].vector().unwrap();
            assert!(v.iter().zip(vector(i)).all(|(a, b)| (a - b).abs() < 1e-5));
        }
        assert!(c.get(&[PointId::Num(10)], false, false).unwrap().is_empty());
        db.close().unwrap();
    }
    // The setting is kept in the manifest.
    let db = Database::open(dir.path()).unwrap();
    assert_eq!(
        db.collection("docs").unwrap().config().build_memory,
        Some(MemoryBudget::Bytes(budget))
    );
}

#[test]
fn a_build_memory_too_small_for_a_seal_is_refused_at_creation() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let mut cfg = config();
    cfg.build_memory = Some(MemoryBudget::Bytes(4 << 20));
    let err = db.create_collection("small", cfg.clone()).err().unwrap();
    assert!(matches!(err, DbError::InvalidInput(_)), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("build_memory") && text.contains("at least"),
        "{text}"
    );
    cfg.build_memory = Some(MemoryBudget::Auto);
    assert!(db.create_collection("auto", cfg).is_err());
    assert!(db.collection_names().is_empty());
    // A share of the raw vectors is a collection's setting, not the database's.
    let err = Database::open_with_options(
        &dir.path().join("other"),
        DbOptions {
            build_memory: MemoryBudget::ShareOfRaw(0.25),
            ..Default::default()
        },
    )
    .err()
    .unwrap();
    assert!(err.to_string().contains("bytes or auto"), "{err}");
}

#[test]
fn the_databases_build_memory_bounds_a_collection_without_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config();
    let budget = sharding_budget(&cfg, SEAL);
    let db = Database::open_with_options(
        &dir.path().join("budgeted"),
        DbOptions {
            build_memory: MemoryBudget::Bytes(budget),
            ..Default::default()
        },
    )
    .unwrap();
    let c = db.create_collection("docs", cfg.clone()).unwrap();
    c.upsert(points(0..SEAL as u64)).unwrap();
    c.optimize(true).unwrap();
    let seal = c.info().last_task.unwrap();
    assert!(seal.shards > 1, "{seal:?}");
    assert!(seal.memory_budget <= budget, "{seal:?}");
    let (limit, in_use, total) = db.build_memory();
    assert_eq!(limit, MemoryBudget::Bytes(budget));
    assert_eq!((in_use, total), (0, budget));
    let sharded = recall(&c, &|_| true, SEAL as u64);

    // The same points sealed in memory, as a peer.
    let roomy = Database::open(&dir.path().join("roomy")).unwrap();
    let peer = roomy.create_collection("docs", cfg).unwrap();
    peer.upsert(points(0..SEAL as u64)).unwrap();
    peer.optimize(true).unwrap();
    assert_eq!(peer.info().last_task.unwrap().shards, 1);
    let in_memory = recall(&peer, &|_| true, SEAL as u64);
    assert!(in_memory >= 0.8, "recall@10 in memory {in_memory}");
    assert!(
        sharded >= in_memory - 0.03,
        "recall@10 in shards {sharded}, in memory {in_memory}"
    );
}

/// A merge that its collection's build memory cannot hold fails, and the collection goes on
/// sealing and taking writes: the failed merge is tried again later, the seals do not wait
/// for it (they used to wait out its retry delay, with writers held back behind them).
#[test]
fn a_merge_that_does_not_fit_leaves_seals_and_writes_going() {
    const SMALL_SEAL: usize = 4_000;
    let mut cfg = config();
    cfg.seal_threshold = SMALL_SEAL;
    let shape = |n: usize| {
        cfg.build_params(&cfg.dense[0], &[], n)
            .shape(n, DIM)
            .unwrap()
    };
    let seal_budget = shape(SMALL_SEAL).smallest_budget().unwrap();
    let merge_needs = shape(8 * SMALL_SEAL).smallest_budget().unwrap();
    assert!(merge_needs > seal_budget, "{merge_needs} vs {seal_budget}");
    cfg.build_memory = Some(MemoryBudget::Bytes(seal_budget));
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let c = db.create_collection("docs", cfg).unwrap();
    let sealed = |c: &diskvec_db::Collection| common::sealed_count(&c.info());
    // Nine segments sealed one by one: a merge of the smallest is then due.
    for s in 0..9 {
        let from = (s * SMALL_SEAL) as u64;
        c.upsert(points(from..from + SMALL_SEAL as u64)).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        while sealed(&c) < s + 1 && c.info().error.is_none() {
            assert!(
                std::time::Instant::now() < deadline,
                "segment {s} not sealed"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while !c.info().error.is_some_and(|e| e.contains("merge failed")) {
        assert!(
            std::time::Instant::now() < deadline,
            "no merge failed: {:?}",
            c.info()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // Past the failure: more writes are taken and sealed while the merge waits to retry.
    let next = (9 * SMALL_SEAL) as u64;
    c.upsert(points(next..next + SMALL_SEAL as u64)).unwrap();
    let started = std::time::Instant::now();
    while sealed(&c) < 10 {
        // The merge's retry delay is 10 s; a seal of 4,000 points takes well under a second.
        assert!(
            started.elapsed() < std::time::Duration::from_secs(8),
            "the seal waited for the failed merge: {:?}",
            c.info()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(c.info().points, 10 * SMALL_SEAL);
}

#[test]
fn a_merge_in_shards_keeps_its_sealed_sources_lists_and_their_recall() {
    let dir = tempfile::tempdir().unwrap();
    let third = SEAL / 2;
    let n = 3 * third;
    let mut cfg = config();
    cfg.seal_threshold = third;
    cfg.build_memory = Some(MemoryBudget::Bytes(sharding_budget(&cfg, n)));
    let db = Database::open(&dir.path().join("merged")).unwrap();
    let c = db.create_collection("docs", cfg.clone()).unwrap();
    // Three segments sealed on their own (the seal threshold), then merged in shards.
    for part in 0..3u64 {
        let from = part * third as u64;
        c.upsert(points(from..from + third as u64)).unwrap();
        let started = std::time::Instant::now();
        while c.info().indexed_points < (part as usize + 1) * third {
            assert!(started.elapsed().as_secs() < 300, "{:?}", c.info());
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
    assert_eq!(common::sealed_count(&c.info()), 3);
    let gone: Vec<PointId> = (0..500u64).map(|i| PointId::Num(i * 7)).collect();
    c.delete(gone).unwrap();
    c.optimize(true).unwrap();
    let merge = c.info().last_task.expect("a merge ran");
    assert_eq!(merge.kind, "merge", "{merge:?}");
    assert_eq!(merge.points, n - 500, "{merge:?}");
    // Every point came from a sealed segment: each kept its lists and went into one shard.
    assert_eq!(merge.seeded, n - 500, "{merge:?}");
    let live = |i: u64| !(i < 3_500 && i.is_multiple_of(7));
    let merged = recall(&c, &live, n as u64);

    // The same points in one build in shards, seeded by nothing, as a peer.
    let peer_db = Database::open(&dir.path().join("peer")).unwrap();
    let mut peer_cfg = cfg;
    peer_cfg.seal_threshold = n;
    let peer = peer_db.create_collection("docs", peer_cfg).unwrap();
    peer.upsert(points(0..n as u64)).unwrap();
    peer.delete((0..500u64).map(|i| PointId::Num(i * 7)).collect())
        .unwrap();
    peer.optimize(true).unwrap();
    let built = peer.info().last_task.unwrap();
    assert!(built.shards > 1 && built.seeded == 0, "{built:?}");
    let unseeded = recall(&peer, &live, n as u64);
    eprintln!("recall@10: seeded merge {merged}, one build in shards {unseeded}");
    assert!(
        unseeded >= 0.8,
        "recall@10 of the unseeded build {unseeded}"
    );
    assert!(
        merged >= unseeded - 0.03,
        "recall@10 of the seeded merge {merged}, of one build {unseeded}"
    );
}
