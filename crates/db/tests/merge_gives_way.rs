//! A merge picked while writes paused gives way when writes come back and merges of the new
//! seals are overdue: it must not hold the one merge lane while seals pile up behind it.
//! Every merge here takes 30 seconds longer (`DISKVEC_DELAY`, cut short when the merge is
//! cancelled); this file is its own test process, so the delay touches no other test.

mod common;
use common::{sealed_count, small_config, small_points, small_points_found, wait_until};
use std::time::Duration;

use diskvec_db::Collection;

const SEAL: usize = 100;

fn sealed(c: &Collection) -> usize {
    sealed_count(&c.info())
}

/// Points of the running merge, if one runs.
fn merging(c: &Collection) -> Option<usize> {
    c.info()
        .tasks
        .iter()
        .find(|t| t.kind == "merge")
        .map(|t| t.points)
}

/// Writes `points` points as one operation (one segment of that many) and waits for its seal.
fn one_segment(c: &Collection, next_id: &mut u64, points: u64) {
    let before = sealed(c);
    c.upsert(small_points(*next_id..*next_id + points)).unwrap();
    *next_id += points;
    wait_until("a seal", Duration::from_secs(60), || sealed(c) > before);
}

#[test]
fn a_merge_picked_at_rest_gives_way_to_the_merges_of_new_seals() {
    std::env::set_var("DISKVEC_DELAY", "merge=30000");
    let dir = tempfile::tempdir().unwrap();
    let db = diskvec_db::Database::open(dir.path()).unwrap();
    let c = db.create_collection("c", small_config(SEAL)).unwrap();
    let mut next_id = 0;
    // Nine segments of three tiers (three each of 200, 900 and 2,000 points): no tier holds
    // the four a merge takes while writes come, so nothing merges until they pause.
    for points in [200, 900, 2000] {
        for _ in 0..3 {
            one_segment(&c, &mut next_id, points);
        }
    }
    assert_eq!(merging(&c), None, "{:?}", c.info().tasks);
    // Writes paused: the eight smallest are merged back to eight segments.
    // (A merge shows 0 points until it has gathered its input.)
    wait_until("the merge at rest", Duration::from_secs(30), || {
        merging(&c) == Some(3 * 200 + 3 * 900 + 2 * 2000)
    });
    // A seal of 100 comes: the lowest tier then holds four (the new one, three old), which
    // the running merge does not cover. It stops and that merge starts, long before the 30 s
    // the first one's delay would hold the lane.
    one_segment(&c, &mut next_id, SEAL as u64);
    wait_until("the merge of the new seal", Duration::from_secs(20), || {
        merging(&c) == Some(SEAL + 3 * 200)
    });
    let info = c.info();
    assert_eq!(info.rebuilds_done, 0, "{info:?}");
    assert!(info.error.is_none(), "{info:?}");
    assert_eq!(info.points, next_id as usize);
    assert_eq!(
        sealed(&c),
        10,
        "the cancelled merge switched nothing in: {info:?}"
    );
    small_points_found(&c, &[0, 599, 600, 3299, 3300, 9299, next_id - 1]);
    drop(c);
    drop(db);
    std::env::remove_var("DISKVEC_DELAY");
}
