//! Where background work runs: below the priority of writers and searches.
//!
//! Seals, vacuums and merges build DiskANN segments with every core; at the default
//! priority they took the CPU from searches (p99 several times higher while a seal ran). On
//! a pool of threads at nice 10 they still use idle cores fully, but a search or a write
//! that needs a core gets it first.

use std::sync::OnceLock;

/// Nice value of background threads (0 is the default, 19 the lowest priority).
const BACKGROUND_NICE: i32 = 10;

/// Runs `build` on the background pool (one per process, shared by collections; one thread
/// per core, at `BACKGROUND_NICE`), or on rayon's global pool if it could not be started.
/// `waited_for`: a caller waits for this build (`optimize(wait=True)`), so it runs at the
/// default priority instead, on a second pool: a process without privileges cannot raise a
/// thread's priority again once lowered, and beside other work the low priority left a
/// waited-for build one core of two (docs/benchmarks.md, session 13).
pub(crate) fn run_build<R: Send>(waited_for: bool, build: impl FnOnce() -> R + Send) -> R {
    static LOW: OnceLock<Option<rayon::ThreadPool>> = OnceLock::new();
    static DEFAULT: OnceLock<Option<rayon::ThreadPool>> = OnceLock::new();
    let pool = if waited_for {
        DEFAULT.get_or_init(|| pool("diskvec-build-now", false))
    } else {
        LOW.get_or_init(|| pool("diskvec-build", true))
    };
    match pool {
        Some(pool) => pool.install(build),
        None => build(),
    }
}

fn pool(name: &'static str, low_priority: bool) -> Option<rayon::ThreadPool> {
    rayon::ThreadPoolBuilder::new()
        .thread_name(move |i| format!("{name}-{i}"))
        .start_handler(move |_| {
            if low_priority {
                lower_priority()
            }
        })
        .build()
        .map_err(|e| log::warn!("no background build pool ({e}); builds share the global one"))
        .ok()
}

/// Moves the calling thread to `BACKGROUND_NICE` (Linux schedules threads one by one),
/// best effort.
pub(crate) fn lower_priority() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: gettid and setpriority take and return plain integers and touch no memory
        // of ours; a failure (e.g. no permission) only leaves the priority as it was.
        let failed = unsafe {
            let tid = libc::gettid();
            libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, BACKGROUND_NICE) != 0
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
        let (low, waited) = (run_build(false, nice), run_build(true, nice));
        assert_eq!(
            waited, outside,
            "a waited-for build keeps the default priority"
        );
        // Lowering may be refused (it is not here); it never raises.
        assert!(low == BACKGROUND_NICE || low == outside, "{low}");
        assert!(low >= waited);
    }
}
