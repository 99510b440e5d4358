//! Where background work runs: below the priority of writers and searches.
//!
//! Seals, vacuums and merges build DiskANN segments with every core; at the default
//! priority they took the CPU from searches (p99 several times higher while a seal ran). On
//! a pool of threads at nice 10 they still use idle cores fully, but a search or a write
//! that needs a core gets it first.

use std::sync::OnceLock;

/// Nice value of seals' build threads (0 is the default, 19 the lowest priority).
const BACKGROUND_NICE: i32 = 10;
/// Nice value of merges' and vacuums' build threads: below seals, so a seal that writers
/// wait for gets about three quarters of the cores while a merge runs beside it.
const MERGE_NICE: i32 = 15;

/// Nice value of the indexer, which links fresh points into growing segments' HNSW graphs:
/// the lowest. Its links only speed up searches over points not sealed yet (a search scans
/// what is unlinked), while writers wait for seals: at nice 10, beside seals, it took as much
/// CPU as they did during a 10M import (835 s against 826 s in its first 28 minutes).
const INDEXER_NICE: i32 = 19;

/// Who a background build runs for, which sets its priority.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BuildPriority {
    /// A caller waits for it (`optimize(wait=True)`): the default priority.
    WaitedFor,
    /// A seal of frozen segments, which writers may be held back behind.
    Seal,
    /// A merge or vacuum of sealed segments, which nothing waits for.
    Merge,
}

/// Runs `build` on the background pool of its priority (one per process, shared by
/// collections; one thread per core), or on rayon's global pool if it could not be started.
/// A waited-for build runs at the default priority on a pool of its own: a process without
/// privileges cannot raise a thread's priority again once lowered, and beside other work the
/// low priority left a waited-for build one core of two (docs/benchmarks.md, session 13).
pub(crate) fn run_build<R: Send>(priority: BuildPriority, build: impl FnOnce() -> R + Send) -> R {
    static NOW: OnceLock<Option<rayon::ThreadPool>> = OnceLock::new();
    static SEAL: OnceLock<Option<rayon::ThreadPool>> = OnceLock::new();
    static MERGE: OnceLock<Option<rayon::ThreadPool>> = OnceLock::new();
    let pool = match priority {
        BuildPriority::WaitedFor => NOW.get_or_init(|| pool("diskvec-build-now", None)),
        BuildPriority::Seal => SEAL.get_or_init(|| pool("diskvec-build", Some(BACKGROUND_NICE))),
        BuildPriority::Merge => MERGE.get_or_init(|| pool("diskvec-merge", Some(MERGE_NICE))),
    };
    match pool {
        Some(pool) => pool.install(build),
        None => build(),
    }
}

fn pool(name: &'static str, nice: Option<i32>) -> Option<rayon::ThreadPool> {
    rayon::ThreadPoolBuilder::new()
        .thread_name(move |i| format!("{name}-{i}"))
        .start_handler(move |_| {
            if let Some(nice) = nice {
                set_nice(nice)
            }
        })
        .build()
        .map_err(|e| log::warn!("no background build pool ({e}); builds share the global one"))
        .ok()
}

/// Moves the calling thread to `BACKGROUND_NICE` (Linux schedules threads one by one),
/// best effort.
pub(crate) fn lower_priority() {
    set_nice(BACKGROUND_NICE)
}

/// Moves the calling thread (the indexer) to `INDEXER_NICE`, best effort.
pub(crate) fn lowest_priority() {
    set_nice(INDEXER_NICE)
}

/// Moves the calling thread down to `nice`, best effort; never up: a process started at a
/// lower priority (`nice -n 19`) keeps its background below its other threads too, even
/// where it may raise a priority (as root).
fn set_nice(nice: i32) {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: gettid, getpriority and setpriority take and return plain integers and
        // touch no memory of ours; a failure (e.g. no permission) only leaves the priority as
        // it was. getpriority's -1 can also mean an error: then the thread is moved to `nice`
        // as before this check.
        let failed = unsafe {
            let tid = libc::gettid() as libc::id_t;
            let current = libc::getpriority(libc::PRIO_PROCESS, tid);
            current < nice && libc::setpriority(libc::PRIO_PROCESS, tid, nice) != 0
        };
        if failed {
            log::debug!(
                "background thread keeps its priority: {}",
                std::io::Error::last_os_error()
            );
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// The nice value of the calling thread.
    fn nice() -> i32 {
        // SAFETY: gettid and getpriority take and return plain integers and touch no memory
        // of ours.
        unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t) }
    }

    #[test]
    fn a_build_someone_waits_for_runs_at_the_default_priority_others_below_it() {
        let outside = nice();
        let (low, lower, waited) = (
            run_build(BuildPriority::Seal, nice),
            run_build(BuildPriority::Merge, nice),
            run_build(BuildPriority::WaitedFor, nice),
        );
        assert_eq!(
            waited, outside,
            "a waited-for build keeps the default priority"
        );
        // Lowering may be refused; it never raises (also when run under `nice -n 19`).
        assert!(
            low == BACKGROUND_NICE.max(outside) || low == outside,
            "{low}"
        );
        assert!(
            lower == MERGE_NICE.max(outside) || lower == outside,
            "{lower}"
        );
        assert!(lower >= low && low >= waited, "{lower} {low} {waited}");
    }
}
