//! Writes held back while frozen segments wait for their seals: an upsert with a deadline
//! is refused unwritten once it passes, one without waits for room, deletes never wait.
//! Every seal here takes two seconds longer (`DISKVEC_DELAY`), so the queue fills; this
//! file is its own test process, so the delay touches no other test.

mod common;
use common::{small_config, small_points};
use std::time::{Duration, Instant};

use diskvec_db::{Database, DbError, PointId};

#[test]
fn a_held_back_upsert_answers_by_its_deadline_and_writes_nothing() {
    // Set by every test of this file (its own process), never removed while one runs.
    std::env::set_var("DISKVEC_DELAY", "build=2000");
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let cfg = small_config(100);
    let c = db.create_collection("c", cfg).unwrap();
    // Each 100-point write freezes a segment; the queue takes 16 before writers wait.
    let mut next = 0u64;
    let started = Instant::now();
    let refused = loop {
        assert!(next < 100 * 40, "never held back");
        let deadline = Instant::now() + Duration::from_millis(300);
        match c.upsert_within(small_points(next..next + 100), deadline) {
            Ok(_) => next += 100,
            Err(e) => break (e, Instant::now().saturating_duration_since(deadline)),
        }
    };
    let (err, late) = refused;
    assert!(matches!(err, DbError::Busy(_)), "{err}");
    assert!(err.to_string().contains("retry later"), "{err}");
    assert!(
        late < Duration::from_millis(500),
        "answered {late:?} after its deadline"
    );
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    // Nothing of the refused write landed.
    assert!(c
        .get(&[PointId::Num(next)], false, false)
        .unwrap()
        .is_empty());
    assert_eq!(c.len(), next as usize);
    // Deletes are not held back.
    let t = Instant::now();
    c.delete(vec![PointId::Num(0)]).unwrap();
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    // Without a deadline the write waits for room and lands.
    c.upsert(small_points(next..next + 100)).unwrap();
    assert_eq!(c.len(), next as usize + 99);
}

/// After a restart, the frozen segments the log replays are sealed one at a time before any
/// are sealed together: a build of several that a crash interrupts starts again from
/// nothing, and under a loop of crashes shorter than it, no seal would ever finish (the
/// checkpoint would never move and writers would end up refused).
#[test]
fn after_a_restart_the_first_seal_takes_one_segment() {
    std::env::set_var("DISKVEC_DELAY", "build=2000");
    let dir = tempfile::tempdir().unwrap();
    let cfg = small_config(100);
    {
        let db = Database::open(dir.path()).unwrap();
        let c = db.create_collection("c", cfg).unwrap();
        // Indexing off: one growing segment takes all 300 points, nothing is sealed, and
        // reopening replays them from the log, freezing a segment after each write of 100.
        c.set_indexing(false);
        for from in [0, 100, 200] {
            c.upsert(small_points(from..from + 100)).unwrap();
        }
        assert_eq!(c.info().seals_done, 0);
    }
    let db = Database::open(dir.path()).unwrap();
    let c = db.collection("c").unwrap();
    let started = Instant::now();
    let first = loop {
        if let Some(t) = c.info().task {
            break t;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no seal started"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!((first.kind, first.points), ("seal", 100), "{first:?}");
}
