//! Where background work runs: below the priority of writers and searches.
//!
//! Seals, vacuums and merges build DiskANN segments with every core; at the default
//! priority they took the CPU from searches (p99 several times higher while a seal ran). On
//! a pool of threads at nice 10 they still use idle cores fully, but a search or a write
//! that needs a core gets it first.
//!
//! Except when the work is overdue: below searches, a seal writers were held back behind got
//! a twentieth of the cores while four clients searched a 10M collection, and writes at
//! 5,000 points/s stood still for minutes; the merges fell behind the seals until 44
//! segments answered each search (docs/benchmarks.md, session 40). A seal started while
//! writers are held back, and a merge started while sealed segments pile up, run at the
//! default priority (`OverdueSeal`, `OverdueMerge`); one already running when that happens is moved up to it
//! where the system lets the process raise a thread's priority (`hurry`), and back down
//! before the next build of its pool.

use std::sync::{Mutex, OnceLock};

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
    /// A seal writers are held back behind now, or one while merges are overdue (a seal
    /// never runs below a merge): the default priority, as `WaitedFor`.
    OverdueSeal,
    /// A merge or vacuum of sealed segments, which nothing waits for.
    Merge,
    /// A merge of segments piled up past what the merges should keep to: the default
    /// priority.
    OverdueMerge,
}

/// Runs `build` on the background pool of its priority (one per process, shared by
/// collections; one thread per core), or on rayon's global pool if it could not be started.
/// A waited-for build runs at the default priority on a pool of its own: a process without
/// privileges cannot raise a thread's priority again once lowered, and beside other work the
/// low priority left a waited-for build one core of two (docs/benchmarks.md, session 13).
pub(crate) fn run_build<R: Send>(priority: BuildPriority, build: impl FnOnce() -> R + Send) -> R {
    match priority {
        BuildPriority::WaitedFor => now_pool(),
        BuildPriority::Seal => seal_pool().calmed(),
        BuildPriority::Merge => merge_pool().calmed(),
        // On the lane's own pool moved up, so that an overdue seal and an overdue merge do
        // not queue on one pool (a rayon thread takes its own build's work before another
        // one's); where the system refuses to raise it, on the waited-for pool.
        BuildPriority::OverdueSeal => seal_pool().hurried().unwrap_or_else(now_pool),
        BuildPriority::OverdueMerge => merge_pool().hurried().unwrap_or_else(now_pool),
    }
    .install(build)
}

/// Starts the build pools from the calling thread (a user's, at the process's priority).
/// A thread starts at its creator's nice value: the waited-for pool, started lazily from a
/// collection's background lane, ran at that lane's nice 10, and a seal writers waited for
/// with it (measured at 10M: 6% of a core each beside four searching clients).
pub(crate) fn start_pools() {
    now_pool();
    seal_pool();
    merge_pool();
}

fn now_pool() -> &'static BuildPool {
    static NOW: OnceLock<BuildPool> = OnceLock::new();
    NOW.get_or_init(|| BuildPool::new("diskvec-build-now", None))
}

fn seal_pool() -> &'static BuildPool {
    static SEAL: OnceLock<BuildPool> = OnceLock::new();
    SEAL.get_or_init(|| BuildPool::new("diskvec-build", Some(BACKGROUND_NICE)))
}

fn merge_pool() -> &'static BuildPool {
    static MERGE: OnceLock<BuildPool> = OnceLock::new();
    MERGE.get_or_init(|| BuildPool::new("diskvec-merge", Some(MERGE_NICE)))
}

/// Moves the seal pool's threads up to the process's priority (writers are held back behind
/// the seal they run), where the system lets the process raise a thread's priority (root or
/// CAP_SYS_NICE); elsewhere they stay where they are and the next seal starts at the default
/// priority (`BuildPriority::OverdueSeal`). Returns whether any thread moved.
pub(crate) fn hurry_seals() -> bool {
    seal_pool().hurry()
}

/// `hurry_seals` for the merge pool (sealed segments piled up behind its merge).
pub(crate) fn hurry_merges() -> bool {
    merge_pool().hurry()
}

/// A pool of build threads at one nice value, which knows its threads' kernel ids so that
/// they can be moved up while someone waits for its build (`hurry`) and back (`calm`).
struct BuildPool {
    pool: Option<rayon::ThreadPool>,
    /// `None`: the default priority.
    nice: Option<i32>,
    threads: std::sync::Arc<Mutex<Vec<i32>>>,
}

impl BuildPool {
    fn new(name: &'static str, nice: Option<i32>) -> Self {
        let threads = std::sync::Arc::new(Mutex::new(Vec::new()));
        let registered = std::sync::Arc::clone(&threads);
        let pool = rayon::ThreadPoolBuilder::new()
            .thread_name(move |i| format!("{name}-{i}"))
            .start_handler(move |_| {
                if let Some(nice) = nice {
                    set_nice(nice)
                }
                lock_threads(&registered).push(thread_id());
            })
            .build()
            .map_err(|e| log::warn!("no background build pool ({e}); builds share the global one"))
            .ok();
        Self {
            pool,
            nice,
            threads,
        }
    }

    fn install<R: Send>(&self, build: impl FnOnce() -> R + Send) -> R {
        match &self.pool {
            Some(pool) => pool.install(build),
            None => build(),
        }
    }

    /// Moves the pool's threads up to the process's priority; whether any moved.
    fn hurry(&self) -> bool {
        let target = process_nice();
        let mut moved = false;
        for &tid in lock_threads(&self.threads).iter() {
            moved |= move_thread(tid, |current| current > target, target);
        }
        moved
    }

    /// The pool with every thread moved up to the process's priority, or `None` where the
    /// system refused to move one (or the pool has no threads of its own).
    fn hurried(&self) -> Option<&Self> {
        let pool = self.pool.as_ref()?;
        self.hurry();
        let target = process_nice();
        let threads = lock_threads(&self.threads);
        // A pool whose threads have not all started yet cannot be checked: not hurried.
        let all_started = threads.len() == pool.current_num_threads();
        let all_up = threads.iter().all(|&tid| thread_nice(tid) <= target);
        (all_started && all_up).then_some(self)
    }

    /// The pool with its threads moved back down to its nice value (never up: see
    /// `set_nice`).
    fn calmed(&self) -> &Self {
        if let Some(nice) = self.nice {
            for &tid in lock_threads(&self.threads).iter() {
                move_thread(tid, |current| current < nice, nice);
            }
        }
        self
    }
}

fn lock_threads(threads: &Mutex<Vec<i32>>) -> std::sync::MutexGuard<'_, Vec<i32>> {
    // A list of thread ids is whole after any panic.
    threads.lock().unwrap_or_else(|e| e.into_inner())
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

/// Moves the calling thread (the indexer, while searches scan what it has not linked) up to
/// the process's priority, where the system lets the process raise a thread's priority.
/// Returns whether the thread is there now.
pub(crate) fn process_priority() -> bool {
    let target = process_nice();
    move_thread(thread_id(), |current| current > target, target);
    thread_nice(thread_id()) <= target
}

/// Moves the calling thread down to `nice`, best effort; never up: a process started at a
/// lower priority (`nice -n 19`) keeps its background below its other threads too, even
/// where it may raise a priority (as root).
fn set_nice(nice: i32) {
    move_thread(thread_id(), |current| current < nice, nice);
}

/// The calling thread's kernel id (0 off Linux).
fn thread_id() -> i32 {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: gettid takes nothing and returns an integer.
        unsafe { libc::gettid() }
    }
    #[cfg(not(target_os = "linux"))]
    0
}

/// The process's nice value: its main thread's (Linux sets priorities thread by thread, and
/// the one whose id is the process's is the main thread; only background threads lower
/// themselves). 0 off Linux.
fn process_nice() -> i32 {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: getpid and getpriority take and return plain integers and touch no memory
        // of ours; getpriority's -1 can also mean an error, read as a process at nice -1
        // (moves nothing below it that would not move anyway).
        unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::getpid() as libc::id_t) }
    }
    #[cfg(not(target_os = "linux"))]
    0
}

/// The nice value of thread `tid` of this process (0 off Linux).
fn thread_nice(tid: i32) -> i32 {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: getpriority takes and returns plain integers and touches no memory of
        // ours; its -1 can also mean an error (a thread that ended), read as nice -1.
        unsafe { libc::getpriority(libc::PRIO_PROCESS, tid as libc::id_t) }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = tid;
        0
    }
}

/// Moves thread `tid` of this process to `nice` when its current value passes `should`;
/// best effort (a thread that ended, or no permission to raise a priority, leaves it as it
/// was). Returns whether it moved.
fn move_thread(tid: i32, should: impl Fn(i32) -> bool, nice: i32) -> bool {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: getpriority and setpriority take and return plain integers and touch no
        // memory of ours; a failure only leaves the priority as it was. getpriority's -1 can
        // also mean an error: then the thread is moved as if it were at -1.
        let (wanted, failed) = unsafe {
            let current = libc::getpriority(libc::PRIO_PROCESS, tid as libc::id_t);
            let wanted = should(current);
            (
                wanted,
                wanted && libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice) != 0,
            )
        };
        if failed {
            log::debug!(
                "build thread {tid} keeps its priority: {}",
                std::io::Error::last_os_error()
            );
        }
        wanted && !failed
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (tid, should, nice);
        false
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
        assert_eq!(run_build(BuildPriority::OverdueSeal, nice), outside);
        assert_eq!(run_build(BuildPriority::OverdueMerge, nice), outside);
    }

    #[test]
    fn a_waited_for_build_runs_at_the_openers_priority_when_a_lowered_lane_asks_for_it() {
        let outside = nice();
        start_pools();
        let from_lane = std::thread::spawn(|| {
            lower_priority();
            run_build(BuildPriority::WaitedFor, nice)
        })
        .join()
        .unwrap();
        assert_eq!(from_lane, outside);
    }

    #[test]
    fn a_running_seal_moves_up_when_writers_wait_and_the_next_one_starts_low_again() {
        let outside = nice();
        let seals = std::sync::Arc::new(BuildPool::new("test-seal", Some(BACKGROUND_NICE)));
        let (started_tx, started) = std::sync::mpsc::channel();
        let (go_on, go_on_rx) = std::sync::mpsc::channel::<()>();
        let seal = {
            let seals = std::sync::Arc::clone(&seals);
            std::thread::spawn(move || {
                seals.install(move || {
                    started_tx.send(nice()).unwrap();
                    go_on_rx.recv().unwrap();
                    nice()
                })
            })
        };
        let before = started.recv().unwrap();
        let moved = seals.hurry();
        go_on.send(()).unwrap();
        let during = seal.join().unwrap();
        if moved {
            assert_eq!(during, outside, "hurried from {before}");
        } else {
            // Without the right to raise a priority the seal stays where it started.
            assert_eq!(during, before);
        }
        seals.calmed();
        assert_eq!(
            seals.install(nice),
            before,
            "the next seal starts low again"
        );
    }
}
