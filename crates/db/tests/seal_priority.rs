//! A seal runs below searches, unless the searches spend a tenth of a core or more in
//! growing segments and the frozen one it indexes holds many rows not linked: then it is
//! overdue and its pool runs at the process's priority (a seal is the cheaper way to index
//! those rows, docs/benchmarks.md session 42). The build pools are one per process, so this
//! file is its own test process. Moving a thread back up needs root or CAP_SYS_NICE.

mod common;
use common::{clustered_points, clustered_vector, process_nice, thread_nice, wait_until};
use std::time::Duration;

use diskvec_db::{CollectionConfig, Database, SearchRequest};
use diskvec_vector::Metric;

#[test]
#[cfg(target_os = "linux")]
fn a_seal_of_rows_busy_searches_scan_runs_beside_them_and_one_nobody_scans_below() {
    // SAFETY: geteuid takes nothing and returns an integer.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: not root, a build thread's priority cannot be raised here");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let mut cfg = CollectionConfig::new(64, Metric::L2);
    cfg.seal_threshold = 2_000;
    cfg.max_degree = 16;
    cfg.build_list = 32;
    cfg.idle_merge_ms = 0;
    let c = db.create_collection("c", cfg).unwrap();
    let sealed = || common::sealed_count(&c.info());
    let seal_pool = || thread_nice("diskvec-build-0").expect("the seal pool's first thread");
    // One batch fills the growing segment: it freezes with its rows not linked.
    c.upsert(clustered_points(0..2_000, 64, 20)).unwrap();
    wait_until("the first seal", Duration::from_secs(60), || sealed() == 1);
    let outside = process_nice();
    assert_eq!(
        seal_pool(),
        10.max(outside),
        "a seal nobody waits for runs at nice 10"
    );

    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let started = std::time::Instant::now();
            let query = clustered_vector(7, 64, 20);
            while !stop.load(std::sync::atomic::Ordering::Relaxed)
                && started.elapsed() < Duration::from_secs(60)
            {
                c.search(&query, &SearchRequest::new(10)).unwrap();
            }
        });
        // Rows the searches spend their time on for a whole second and more, then the rest of
        // a segment's worth in one batch: it freezes with those not linked.
        c.upsert(clustered_points(2_000..3_000, 64, 20)).unwrap();
        std::thread::sleep(Duration::from_millis(1_500));
        c.upsert(clustered_points(3_000..4_500, 64, 20)).unwrap();
        wait_until("the second seal", Duration::from_secs(60), || sealed() == 2);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    assert_eq!(
        seal_pool(),
        outside,
        "the seal of 1,500 rows every search scanned ran below the searches"
    );
}
