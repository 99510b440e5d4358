//! `optimize`'s merge of everything takes frozen segments along; when that build fails (its
//! memory, most often: a frozen segment's vectors are in DRAM until it is sealed), the frozen
//! segments are sealed on their own and the sealed ones merged, and `optimize` succeeds. This
//! file is its own test process: the injected failure (`DISKVEC_FAIL`) touches no other test.

mod common;
use common::{small_config, small_points, wait_until};
use std::time::Duration;

use diskvec_db::{Database, SearchRequest};

const SEAL: usize = 100;

#[test]
fn a_failed_merge_with_frozen_segments_seals_them_first_and_merges_again() {
    std::env::set_var("DISKVEC_FAIL", "merge:with-frozen");
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let c = db.create_collection("docs", small_config(SEAL)).unwrap();
    // Two sealed segments, then points left growing: optimize freezes them and builds
    // everything together, which the injected failure refuses.
    c.upsert(small_points(0..2 * SEAL as u64)).unwrap();
    wait_until("two seals", Duration::from_secs(60), || {
        c.info().indexed_points == 2 * SEAL
    });
    c.upsert(small_points(2 * SEAL as u64..2 * SEAL as u64 + 50))
        .unwrap();
    c.optimize(true)
        .expect("optimize falls back to sealing first");
    let info = c.info();
    assert_eq!(info.indexed_points, 2 * SEAL + 50, "{info:?}");
    let sealed: Vec<usize> = info
        .segments
        .iter()
        .filter(|s| s.kind == "sealed")
        .map(|s| s.points)
        .collect();
    assert_eq!(sealed, vec![2 * SEAL + 50], "{info:?}");
    let last = info.last_task.clone().expect("a merge ran");
    assert_eq!(last.kind, "merge", "{last:?}");
    assert!(info.error.is_none(), "{info:?}");
    // Every point answers for its own vector.
    for p in small_points(0..2 * SEAL as u64 + 50) {
        let mut req = SearchRequest::new(3);
        req.search_list = Some(64);
        let hits = c.search(p.vector().unwrap(), &req).unwrap();
        assert!(
            hits.iter().any(|h| h.id == p.id),
            "point {:?} not found by its vector",
            p.id
        );
    }
    assert_eq!(c.len(), 2 * SEAL + 50);
}
