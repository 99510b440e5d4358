//! The indexer links fresh points at the lowest CPU priority while the searches scan little,
//! and at the process's priority while their scans of the rows it has not linked take a
//! tenth of a core or more: at the lowest priority beside four searching clients it linked
//! nothing (docs/benchmarks.md, session 42). Linux schedules threads one by one; moving a
//! thread back up needs root or CAP_SYS_NICE, without which the test says so and checks
//! only the low priority.

mod common;
use common::{clustered_points, clustered_vector, process_nice, thread_nice, wait_until};
use std::time::Duration;

use diskvec_db::{CollectionConfig, Database, SearchRequest};
use diskvec_vector::Metric;

const DIM: usize = 256;

#[test]
#[cfg(target_os = "linux")]
fn the_indexer_moves_up_while_searches_scan_what_it_has_not_linked_and_back_down_after() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    // Never sealed here: the points stay in the growing segment the indexer links.
    let mut cfg = CollectionConfig::new(DIM, Metric::L2);
    cfg.seal_threshold = 100_000;
    let c = db.create_collection("busy", cfg).unwrap();
    let outside = process_nice();
    let lowest = 19.max(outside);
    // `None` until the collection's indexer thread has started (it names itself once it runs).
    let indexer = || thread_nice("index-busy");
    wait_until(
        "the indexer at the lowest priority",
        Duration::from_secs(10),
        || indexer() == Some(lowest),
    );
    // SAFETY: geteuid takes nothing and returns an integer.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("not root: a thread's priority cannot be raised here; only the low one checked");
        return;
    }
    // 20,000 rows of 1 KiB: linking them takes the indexer seconds, and until then every
    // search scans megabytes of them.
    c.upsert(clustered_points(0..20_000, DIM, 50)).unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let started = std::time::Instant::now();
            let query = clustered_vector(3, DIM, 50);
            while !stop.load(std::sync::atomic::Ordering::Relaxed)
                && started.elapsed() < Duration::from_secs(60)
            {
                c.search(&query, &SearchRequest::new(10)).unwrap();
            }
        });
        let up = (0..400).any(|_| {
            std::thread::sleep(Duration::from_millis(50));
            indexer() == Some(outside)
        });
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(
            up,
            "the indexer stayed at nice {:?} beside the scans",
            indexer()
        );
    });
    wait_until(
        "the indexer back down once searches stop",
        Duration::from_secs(10),
        || indexer() == Some(lowest),
    );
}
