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
/// per core), or on rayon's global pool if the background one could not be started.
pub(crate) fn run_build<R: Send>(build: impl FnOnce() -> R + Send) -> R {
    static POOL: OnceLock<Option<rayon::ThreadPool>> = OnceLock::new();
    let pool = POOL.get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            .thread_name(|i| format!("diskvec-build-{i}"))
            .start_handler(|_| lower_priority())
            .build()
            .map_err(|e| log::warn!("no background build pool ({e}); builds share the global one"))
            .ok()
    });
    match pool {
        Some(pool) => pool.install(build),
        None => build(),
    }
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
