//! The database's search memory: sealed segments hold as many node records in DRAM as it
//! pays for (after their navigation data), collections without a setting of their own split
//! it, a collection's own setting is its own, and it is shared out again when segments are
//! merged or collections dropped. Searches answer alike whatever is held; they read the
//! SSD less the more is held, and not at all with every node held.

mod common;

use common::{clustered_points, clustered_vector};
use diskvec_db::{
    CollectionConfig, Database, DbOptions, MemoryBudget, PointId, PqCodes, SearchRequest,
};
use diskvec_vector::Metric;

const DIM: usize = 32;
const N: u64 = 3_000;
const CENTRES: u64 = 25;

fn vector(i: u64) -> Vec<f32> {
    clustered_vector(i, DIM, CENTRES)
}

fn config() -> CollectionConfig {
    let mut c = CollectionConfig::new(DIM, Metric::L2);
    c.seal_threshold = 1_000;
    c.max_degree = 24;
    c.build_list = 48;
    c.idle_merge_ms = 0;
    c
}

/// A collection of N points in one sealed segment.
fn filled(
    db: &Database,
    name: &str,
    c: CollectionConfig,
) -> std::sync::Arc<diskvec_db::Collection> {
    let col = db.create_collection(name, c).unwrap();
    col.upsert(clustered_points(0..N, DIM, CENTRES)).unwrap();
    col.optimize(true).unwrap();
    let info = col.info();
    assert_eq!(info.indexed_points, N as usize, "{info:?}");
    assert_eq!(common::sealed_count(&info), 1, "{:?}", info.segments);
    col
}

/// Bytes of every node record of a collection, from one whose every node is held.
fn all_nodes_bytes(db_path: &std::path::Path, name: &str) -> u64 {
    let db = Database::open(db_path).unwrap();
    let m = db.collection(name).unwrap().info().search_memory;
    assert_eq!(m.cached_nodes, m.nodes, "{m:?}");
    db.close().unwrap();
    m.node_cache_bytes
}

/// The share of `got`'s ids that `want` has too. A cached node is expanded at once, a read
/// one when its read completes, so the walk's order, and now and then a last result,
/// depend on what is held.
fn overlap(got: &[Vec<PointId>], want: &[Vec<PointId>]) -> f64 {
    let kept: usize = got
        .iter()
        .zip(want)
        .map(|(g, w)| g.iter().filter(|id| w.contains(id)).count())
        .sum();
    kept as f64 / want.iter().map(Vec::len).sum::<usize>() as f64
}

/// Top-10 ids of 30 queries, and the node reads per graph search they took.
fn answers(col: &diskvec_db::Collection) -> (Vec<Vec<PointId>>, f64) {
    answers_of(col, 30)
}

/// Top-10 ids of the first `queries` of `answers`' queries, and the node reads per graph
/// search they took.
fn answers_of(col: &diskvec_db::Collection, queries: u64) -> (Vec<Vec<PointId>>, f64) {
    let before = col.info().search_memory;
    let hits = (0..queries)
        .map(|q| {
            col.search(&vector(q * 97 + 5), &SearchRequest::new(10))
                .unwrap()
                .into_iter()
                .map(|h| h.id)
                .collect()
        })
        .collect();
    let after = col.info().search_memory;
    let searches = after.graph_searches - before.graph_searches;
    assert_eq!(searches, queries, "every query is a graph search");
    let reads = after.reads_per_search * after.graph_searches as f64
        - before.reads_per_search * before.graph_searches as f64;
    (hits, reads / searches as f64)
}

fn options(search_memory: MemoryBudget) -> DbOptions {
    DbOptions {
        search_memory,
        ..Default::default()
    }
}

#[test]
fn node_caches_follow_the_search_memory_and_searches_read_less_the_more_is_held() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    // Nothing to spare: no node records held; every search reads.
    let (none, none_reads) = {
        let db = Database::open_with_options(&path, options(MemoryBudget::Bytes(0))).unwrap();
        let col = filled(&db, "docs", config());
        let m = col.info().search_memory;
        assert_eq!((m.setting.as_str(), m.cached_nodes), ("shared", 0), "{m:?}");
        assert_eq!(db.search_memory().1.budget, 0);
        let (hits, reads) = answers(&col);
        assert!(reads > 5.0, "reads per search with nothing held: {reads}");
        db.close().unwrap();
        (hits, reads)
    };
    // Navigation and room for half of the node records: the records the searches read are
    // held, up to that room; asked again, the same queries read far less.
    let all_nodes = all_nodes_bytes(&path, "docs");
    let navigation = {
        let db = Database::open(&path).unwrap();
        let m = db.collection("docs").unwrap().info().search_memory;
        db.close().unwrap();
        m.navigation_bytes
    };
    let half = navigation + all_nodes / 2;
    {
        let db = Database::open_with_options(&path, options(MemoryBudget::Bytes(half))).unwrap();
        let col = db.collection("docs").unwrap();
        let m = col.info().search_memory;
        assert!((0.4..0.6).contains(&m.node_share), "{m:?}");
        // A few queries whose reads fit the room.
        let (_, first_reads) = answers_of(&col, 3);
        let (_, again_reads) = answers_of(&col, 3);
        assert!(
            again_reads * 4.0 < first_reads,
            "{again_reads} asked again, {first_reads} the first time"
        );
        // All of them (their reads do not fit): still fewer reads than with nothing held.
        answers(&col);
        let (hits, reads) = answers(&col);
        let m = col.info().search_memory;
        assert!(m.cached_nodes > 0 && m.cached_nodes * 2 <= m.nodes, "{m:?}");
        assert!(m.node_cache_bytes <= all_nodes / 2 + (64 << 10), "{m:?}");
        assert!(overlap(&hits, &none) >= 0.95, "{}", overlap(&hits, &none));
        assert!(
            reads < none_reads,
            "{reads} vs {none_reads} with nothing held"
        );
        db.close().unwrap();
    }
    // Plenty (the automatic budget on this machine): every node held, nothing read.
    {
        let db = Database::open(&path).unwrap();
        let col = db.collection("docs").unwrap();
        let m = col.info().search_memory;
        assert_eq!((m.node_share, m.cached_nodes), (1.0, N), "{m:?}");
        let (hits, reads) = answers(&col);
        assert!(overlap(&hits, &none) >= 0.95, "{}", overlap(&hits, &none));
        assert_eq!(reads, 0.0, "a search with every node in DRAM reads nothing");
        assert!(col.info().search_memory.cache_hit_rate > 0.99);
        db.close().unwrap();
    }
}

#[test]
fn collections_share_the_database_budget_and_their_own_settings_are_their_own() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    // Room for a third of the nodes of the two shared collections (with their navigation).
    let probe = {
        let db = Database::open_with_options(&path, options(MemoryBudget::Bytes(0))).unwrap();
        let a = filled(&db, "a", config());
        let m = a.info().search_memory;
        db.close().unwrap();
        m
    };
    let node_bytes = all_nodes_bytes(&path, "a");
    let budget = 2 * probe.navigation_bytes + 2 * node_bytes / 3;
    let db = Database::open_with_options(&path, options(MemoryBudget::Bytes(budget))).unwrap();
    let a = db.collection("a").unwrap();
    let b = filled(&db, "b", config());
    let mut own = config();
    own.search_memory = Some(MemoryBudget::Bytes(0));
    let c = filled(&db, "c", own);
    let (ma, mb, mc) = (
        a.info().search_memory,
        b.info().search_memory,
        c.info().search_memory,
    );
    assert_eq!(mc.setting, "0MiB", "{mc:?}");
    assert_eq!(
        mc.cached_nodes, 0,
        "its own budget of 0, whatever the database's"
    );
    assert!(
        (ma.node_share - mb.node_share).abs() < 1e-9 && (0.25..0.42).contains(&ma.node_share),
        "{ma:?} {mb:?}"
    );
    let held = db.search_memory().1.held;
    assert!(held <= budget + (64 << 10), "{held} > {budget}");
    // Dropping one: the other gets its share.
    db.drop_collection("b").unwrap();
    let ma = a.info().search_memory;
    assert!(ma.node_share > 0.6, "{ma:?}");
    // A merge's new segment takes the collection's share.
    a.upsert(clustered_points(N..N + 1_000, DIM, CENTRES))
        .unwrap();
    a.optimize(true).unwrap();
    let after = a.info();
    assert_eq!(common::sealed_count(&after), 1, "{:?}", after.segments);
    for q in 0..20u64 {
        a.search(&vector(q * 31 + 1), &SearchRequest::new(10))
            .unwrap();
    }
    let m = a.info().search_memory;
    assert!(
        m.cached_nodes > 0 && m.cached_nodes as f64 <= m.node_share * m.nodes as f64 + 2.0,
        "{m:?}"
    );
    let held = db.search_memory().1.held;
    assert!(held <= budget + (64 << 10), "{held} > {budget}");
}

#[test]
fn bad_search_memory_settings_are_refused() {
    let mut c = config();
    c.search_memory = Some(MemoryBudget::Auto);
    let err = c.check().unwrap_err().to_string();
    assert!(err.contains("search_memory"), "{err}");
    for bad in ["", "lots", "-1GiB", "0%"] {
        let err = diskvec_db::parse_search_memory(bad)
            .unwrap_err()
            .to_string();
        assert!(err.contains("search_memory"), "{bad:?}: {err}");
    }
    assert_eq!(
        diskvec_db::parse_search_memory("0").unwrap(),
        MemoryBudget::Bytes(0)
    );
    let dir = tempfile::tempdir().unwrap();
    let err = Database::open_with_options(dir.path(), options(MemoryBudget::ShareOfRaw(0.5)))
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("search memory"), "{err}");
}

#[test]
fn compact_codes_hold_a_quarter_of_the_pq_bytes_and_answer_alike() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let mut c = config();
    c.pq_bytes = Some(16);
    c.navigation = false;
    let open = |pq_codes: PqCodes| {
        let options = DbOptions {
            search_memory: MemoryBudget::Bytes(0),
            pq_codes,
            ..Default::default()
        };
        Database::open_with_options(&path, options).unwrap()
    };
    let full = {
        let db = open(PqCodes::Full);
        let col = filled(&db, "docs", c);
        let m = col.info().search_memory;
        assert_eq!(
            (m.compact_code_segments, m.code_bytes),
            (0, N * 16),
            "{m:?}"
        );
        let (hits, _) = answers(&col);
        db.close().unwrap();
        hits
    };
    let db = open(PqCodes::Compact);
    let col = db.collection("docs").unwrap();
    let m = col.info().search_memory;
    assert_eq!((m.compact_code_segments, m.code_bytes), (1, N * 4), "{m:?}");
    let (compact, _) = answers(&col);
    let kept = overlap(&compact, &full);
    assert!(
        kept >= 0.9,
        "compact codes found {kept} of the full codes' answers"
    );
    // A segment sealed now opens with its compact codes too.
    col.upsert(clustered_points(N..N + 1_200, DIM, CENTRES))
        .unwrap();
    col.optimize(true).unwrap();
    let m = col.info().search_memory;
    assert_eq!(
        m.compact_code_segments as usize,
        common::sealed_count(&col.info()),
        "{m:?}"
    );
    assert_eq!(m.code_bytes, (N + 1_200) * 4, "{m:?}");
    db.close().unwrap();
    assert!("sometimes".parse::<PqCodes>().is_err());
}
