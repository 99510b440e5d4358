//! A merge lets its sealed sources go from DRAM before it opens the segment it built (so a
//! large collection's points are never held twice); when that segment then fails to open,
//! the sources come back from their files with the deletes they had. This file is its own
//! test process: the injected failure (`DISKVEC_FAIL`) touches no other test.

mod common;
use common::{small_config, small_points, wait_until};
use std::time::Duration;

use diskvec_db::{Database, PointId, SearchRequest};

const SEAL: usize = 100;
const SEGMENTS: u64 = 3;

fn kinds(c: &diskvec_db::Collection) -> Vec<(&'static str, usize)> {
    c.info()
        .segments
        .iter()
        .filter(|s| s.points > 0)
        .map(|s| (s.kind, s.points))
        .collect()
}

/// Every live point is found by its own vector, and no deleted one is found or counted.
fn check_points(c: &diskvec_db::Collection, deleted: &[u64], when: &str) {
    let all = SEGMENTS * SEAL as u64;
    assert_eq!(c.len(), all as usize - deleted.len(), "{when}");
    for p in small_points(0..all) {
        let PointId::Num(i) = p.id else {
            unreachable!()
        };
        let found = c.get(&[p.id], false, false).unwrap();
        let mut req = SearchRequest::new(10);
        req.search_list = Some(64);
        let hits = c.search(p.vector().unwrap(), &req).unwrap();
        if deleted.contains(&i) {
            assert!(found.is_empty(), "{when}: deleted point {i} is still there");
            assert!(
                hits.iter().all(|h| h.id != p.id),
                "{when}: found deleted {i}"
            );
        } else {
            assert_eq!(found.len(), 1, "{when}: point {i} is missing");
            assert!(
                hits.iter().any(|h| h.id == p.id),
                "{when}: point {i} is not among its 10 nearest"
            );
        }
    }
}

#[test]
fn a_merge_whose_segment_does_not_open_gives_its_sources_back() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let cfg = small_config(SEAL);
    let c = db.create_collection("c", cfg).unwrap();
    for s in 0..SEGMENTS {
        c.upsert(small_points(s * SEAL as u64..(s + 1) * SEAL as u64))
            .unwrap();
    }
    let sealed_points = |c: &diskvec_db::Collection| {
        kinds(c)
            .iter()
            .filter(|(k, _)| *k == "sealed")
            .map(|(_, n)| n)
            .sum::<usize>()
    };
    wait_until("the seals", Duration::from_secs(60), || {
        sealed_points(&c) >= SEGMENTS as usize * SEAL
    });
    assert!(kinds(&c).len() >= 2, "{:?}", kinds(&c));
    // Deletes after sealing live only in the sealed segments' bitmaps in DRAM (and the log).
    let deleted = [5, 150, 299];
    c.delete(deleted.iter().map(|&i| PointId::Num(i)).collect())
        .unwrap();

    check_points(&c, &deleted, "before the merge");
    c.upsert(small_points(0..1)).unwrap();
    c.delete(vec![PointId::Num(0)]).unwrap();
    let deleted_now = [0, 5, 150, 299];
    // The new segment fails to open: beside its sources (the machine has room), then under
    // the lock after the sources have left DRAM (made to have none), whence they come back.
    for failure in ["switch:open", "switch:no-room,switch:open"] {
        std::env::set_var("DISKVEC_FAIL", failure);
        let failed = c.optimize(true);
        std::env::remove_var("DISKVEC_FAIL");
        let error = failed.expect_err("the merge's segment was made not to open");
        assert!(error.to_string().contains("injected failure"), "{error}");
        check_points(
            &c,
            &deleted_now,
            &format!("after the failed switch ({failure})"),
        );
        // The segment built for the failed switch is gone: one directory per segment listed.
        let on_disk = std::fs::read_dir(dir.path().join("collections/c/segments"))
            .unwrap()
            .count();
        let sealed = common::sealed_count(&c.info());
        assert_eq!(on_disk, sealed, "{failure}: {:?}", kinds(&c));
    }

    c.optimize(true)
        .unwrap_or_else(|e| panic!("the merge again: {e}"));
    let sealed: Vec<_> = kinds(&c);
    assert_eq!(sealed.len(), 1, "{sealed:?}");
    assert_eq!(
        c.info()
            .segments
            .iter()
            .map(|s| s.points - s.deleted)
            .sum::<usize>(),
        296
    );
    check_points(&c, &deleted_now, "after the merge");
    drop(c);
    drop(db);

    let db = Database::open(dir.path()).unwrap();
    let c = db.collection("c").unwrap();
    check_points(&c, &deleted_now, "after reopening");
}
