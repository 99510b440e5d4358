//! The indexer links fresh points at the lowest CPU priority while searches are few, and at
//! the process's priority while they come often: every query scans the rows it has not
//! linked, and at the lowest priority beside four searching clients it linked nothing
//! (docs/benchmarks.md, session 42). Linux schedules threads one by one; moving a thread
//! back up needs root or CAP_SYS_NICE, without which the test says so and checks only the
//! low priority.

mod common;
use common::{process_nice, small_config, small_points, thread_nice, wait_until};
use std::time::Duration;

use diskvec_db::{Database, SearchRequest};

#[test]
#[cfg(target_os = "linux")]
fn the_indexer_moves_up_while_searches_come_often_and_back_down_after() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    // Never sealed here: the points stay in the growing segment the indexer links.
    let c = db.create_collection("busy", small_config(100_000)).unwrap();
    c.upsert(small_points(0..2_000)).unwrap();
    let outside = process_nice();
    let lowest = 19.max(outside);
    let indexer = || thread_nice("index-busy").expect("the indexer thread");
    wait_until(
        "the indexer at the lowest priority",
        Duration::from_secs(10),
        || indexer() == lowest,
    );
    // SAFETY: geteuid takes nothing and returns an integer.
    let may_raise = unsafe { libc::geteuid() } == 0;
    if !may_raise {
        eprintln!("not root: a thread's priority cannot be raised here; only the low one checked");
        return;
    }
    // Searches at thousands a second (far above the hundred that makes them busy) until
    // the indexer is up beside them.
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let started = std::time::Instant::now();
            while !stop.load(std::sync::atomic::Ordering::Relaxed)
                && started.elapsed() < Duration::from_secs(20)
            {
                c.search(&[5.0, 1.0, 5.0, 2.0], &SearchRequest::new(3))
                    .unwrap();
            }
        });
        let up = (0..200).any(|_| {
            std::thread::sleep(Duration::from_millis(50));
            indexer() == outside
        });
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(
            up,
            "the indexer stayed at nice {} beside busy searches",
            indexer()
        );
    });
    wait_until(
        "the indexer back down once searches stop",
        Duration::from_secs(10),
        || indexer() == lowest,
    );
}
