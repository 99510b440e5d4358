//! Where memory allows, a merge opens the segment it built beside its sources, before the
//! state lock: searches, writes and `info()` go on while it opens (a 1M x 768 segment took
//! about a second). This file is its own test process: the delay it injects
//! (`DISKVEC_DELAY`) touches no other test.

mod common;
use common::{small_config, small_points, wait_until};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use diskvec_db::{Database, PointId, SearchRequest};

const SEAL: usize = 100;

#[test]
fn searches_writes_and_info_go_on_while_a_merged_segment_opens() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let c = db.create_collection("c", small_config(SEAL)).unwrap();
    // One seal at a time (frozen segments waiting together are sealed as one).
    for part in 0..3 {
        let from = part * SEAL as u64;
        c.upsert(small_points(from..from + SEAL as u64)).unwrap();
        wait_until("a seal", Duration::from_secs(60), || {
            c.info().indexed_points == (part as usize + 1) * SEAL
        });
    }
    let sealed = |c: &diskvec_db::Collection| {
        c.info()
            .segments
            .iter()
            .filter(|s| s.kind == "sealed" && s.points > 0)
            .count()
    };
    assert_eq!(sealed(&c), 3);
    // The new segment takes 3 s to open.
    std::env::set_var("DISKVEC_DELAY", "switch:open=3000");
    let merged = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            c.optimize(true).unwrap();
            merged.store(true, Ordering::SeqCst);
        });
        wait_until("the merge's build", Duration::from_secs(60), || {
            c.info().last_task.is_some_and(|t| t.kind == "merge")
        });
        // Well inside the open's 3 s: the sources still answer, and nothing waits for it.
        std::thread::sleep(Duration::from_millis(500));
        assert_eq!(sealed(&c), 3, "info() saw the switch done");
        let p = &small_points(7..8)[0];
        let hits = c
            .search(p.vector().unwrap(), &SearchRequest::new(1))
            .unwrap();
        assert_eq!(hits[0].id, PointId::Num(7));
        c.upsert(small_points(1_000..1_001)).unwrap();
        assert!(
            !merged.load(Ordering::SeqCst),
            "the merge finished before the search and the write did"
        );
    });
    std::env::remove_var("DISKVEC_DELAY");
    assert_eq!(sealed(&c), 1);
    assert_eq!(c.len(), 3 * SEAL + 1);
}
