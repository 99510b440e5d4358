//! Seals go on while a merge of sealed segments runs: the merge lane builds beside the seal
//! lane, so writers held back behind frozen segments never wait for a merge. Every merge here
//! takes six seconds longer (`DISKVEC_DELAY`); this file is its own test process, so the
//! delay touches no other test.

mod common;
use common::{sealed_count, small_config, small_points, small_points_found, wait_until};
use std::time::{Duration, Instant};

use diskvec_db::Database;

const SEAL: usize = 100;

fn sealed(c: &diskvec_db::Collection) -> usize {
    sealed_count(&c.info())
}

#[test]
fn a_seal_does_not_wait_for_a_merge_running_beside_it() {
    std::env::set_var("DISKVEC_DELAY", "merge=6000");
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let cfg = small_config(SEAL);
    let c = db.create_collection("c", cfg).unwrap();
    // Nine sealed segments, one by one: a merge of four of them (one tier while writes come)
    // is then due.
    for s in 0..9u64 {
        c.upsert(small_points(s * SEAL as u64..(s + 1) * SEAL as u64))
            .unwrap();
        wait_until("a seal", Duration::from_secs(60), || {
            sealed(&c) > s as usize || c.info().tasks.iter().any(|t| t.kind == "merge")
        });
    }
    wait_until("the merge to start", Duration::from_secs(60), || {
        c.info().tasks.iter().any(|t| t.kind == "merge")
    });
    let merge_started = Instant::now();
    let seals_before = c.info().seals_done;
    // Two more segments' worth while the merge runs: both are sealed before it ends.
    for s in 9..11u64 {
        c.upsert(small_points(s * SEAL as u64..(s + 1) * SEAL as u64))
            .unwrap();
    }
    wait_until(
        "the seals beside the merge",
        Duration::from_secs(60),
        || c.info().seals_done >= seals_before + 2,
    );
    let info = c.info();
    assert!(
        info.tasks.iter().any(|t| t.kind == "merge") && info.rebuilds_done == 0,
        "the merge ended before the seals ({:?} after it started): {info:?}",
        merge_started.elapsed()
    );
    assert_eq!(info.task.as_ref().map(|t| t.kind), Some("merge"));
    // The merge then switches in; every point is found once.
    wait_until("the merge", Duration::from_secs(60), || {
        c.info().rebuilds_done == 1
    });
    let info = c.info();
    assert_eq!(info.points, 11 * SEAL);
    assert!(info.error.is_none(), "{info:?}");
    // Four merged into one, five left, two sealed beside the merge.
    assert_eq!(sealed(&c), 1 + 5 + 2, "{info:?}");
    small_points_found(&c, &[0, 450, 899, 950, 1099]);
    std::env::remove_var("DISKVEC_DELAY");
}
