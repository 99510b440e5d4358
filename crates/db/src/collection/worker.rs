//! The two background workers of a collection.
//!
//! The seal lane seals frozen segments (several together when writes outpaced it) and runs
//! the merge of everything that `optimize` or a pause in writes asks for. The merge lane
//! merges and vacuums sealed segments beside it. With one worker, a seal that writers were
//! held back behind queued behind a tiered merge of up to eight segments, for minutes at
//! 1M points (docs/benchmarks.md, session 14).
//!
//! The lanes never build from the same sealed segment: the merge lane starts nothing while
//! a merge of everything is asked for, and the seal lane starts a rebuild of sealed segments
//! only while the merge lane is idle. A merge lane build that a merge of everything would
//! redo gives way to it (superseded.rs). Merges build at a lower priority than seals
//! (`BuildPriority::Merge`), unless sealed segments piled up behind them (`merges_behind`),
//! and leave a seal's memory free in the build ledger.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::optimize::{Background, IDLE};
use super::rebuild::Maintenance;
use super::task::Lane;
use super::{is_cancelled, lock, Inner};

/// After a failure a lane waits this long before trying again (status stays red).
const RETRY: Duration = Duration::from_secs(10);

fn past_retry(failed_at: Option<Instant>) -> bool {
    failed_at.is_none_or(|t| t.elapsed() >= RETRY)
}

enum Task {
    Seal,
    Rebuild(Maintenance),
}

/// The seal lane: seal frozen segments, run the merge of everything when asked, sleep
/// otherwise.
pub(crate) fn run_seals(inner: Arc<Inner>) {
    crate::background::lower_priority();
    let mut failed_at: Option<Instant> = None;
    loop {
        let picked = next_task(&inner, Lane::Seal, |bg| {
            if !past_retry(failed_at) {
                return Next::Sleep;
            }
            let merges_may_run = past_retry(bg.merge_failed_at);
            if !bg.merge_all && merges_may_run && inner.idle_merge_due() {
                // As `optimize` does: freeze the growing tail and build everything as one
                // segment, before sealing any frozen segment on its own (the merge would
                // redo that seal).
                log::info!("collection {:?}: writes paused; merging", inner.name);
                bg.merge_all = true;
                return Next::Freeze;
            }
            // `optimize` builds frozen and sealed segments together when they fit.
            if bg.merge_all && !bg.merging && !bg.frozen_first {
                if let Some(m @ Maintenance::MergeAll { .. }) = inner.next_maintenance(true) {
                    return Next::Run(Task::Rebuild(m));
                }
            }
            // A merge of everything that fits waits for the merge lane's build (which gives
            // way to it) rather than seal frozen segments it would redo.
            let waits_for_merge_lane =
                bg.merge_all && bg.merging && inner.everything_fits_one_segment();
            if !waits_for_merge_lane {
                // Not before one seal has finished since open: after a crash the log
                // replays every frozen segment, and a build of several together that the
                // next crash interrupts starts again from nothing (under a loop of crashes
                // shorter than it, no seal ever finished and writers ended up refused).
                let together = (bg.sealed > 0).then(|| inner.frozen_together()).flatten();
                if let Some(m) = together {
                    return Next::Run(Task::Rebuild(m));
                }
                if inner.has_frozen() {
                    return Next::Run(Task::Seal);
                }
            }
            if bg.merge_all && !bg.merging {
                if let Some(m) = inner.next_maintenance(true).filter(|_| merges_may_run) {
                    return Next::Run(Task::Rebuild(m));
                }
                bg.merge_all = false;
                bg.frozen_first = false;
                inner.wake.notify_all();
            }
            Next::Sleep
        });
        let Some(task) = picked else { return };
        let outcome = match &task {
            Task::Seal => inner.seal_next().map(|_| ()),
            Task::Rebuild(m) => rebuild(&inner, m, Lane::Seal),
        };
        if let (Task::Rebuild(m @ Maintenance::MergeAll { sealed, frozen }), Err(e)) =
            (&task, &outcome)
        {
            if !sealed.is_empty() && !frozen.is_empty() && !is_cancelled(&outcome) {
                log::warn!(
                    "collection {:?}: {} failed: {e}; sealing the frozen segments on their \
                     own, then merging the sealed ones",
                    inner.name,
                    m.failure_name()
                );
                finish(&inner, Lane::Seal, "merge", Ok(()), |bg, _| {
                    bg.frozen_first = true
                });
                continue;
            }
        }
        // Frozen segments sealed together are a seal; a merge that took frozen segments
        // along is a merge (if it fails, they are sealed on their own next).
        let seals = match &task {
            Task::Seal => true,
            Task::Rebuild(m) => m.kind() == "seal",
        };
        let what = match &task {
            Task::Seal => "sealing",
            Task::Rebuild(m) => m.failure_name(),
        };
        if seals && outcome.is_ok() && inner.merges_behind() {
            crate::background::hurry_merges();
        }
        finish(&inner, Lane::Seal, what, outcome, |bg, failed| {
            if !seals {
                bg.frozen_first = false;
            }
            if failed {
                bg.merge_all = false;
                bg.sealing_failed = seals;
                if seals {
                    failed_at = Some(Instant::now());
                } else {
                    bg.merge_failed_at = Some(Instant::now());
                }
                return;
            }
            if seals {
                bg.sealed += 1;
            } else {
                bg.rebuilt += 1;
                bg.merge_failed_at = None;
            }
            bg.sealing_failed = false;
            failed_at = None;
        });
    }
}

/// The merge lane: vacuum and merge sealed segments when they are due and no merge of
/// everything is asked for; sleep otherwise.
pub(crate) fn run_merges(inner: Arc<Inner>) {
    crate::background::lower_priority();
    loop {
        let picked = next_task(&inner, Lane::Merge, |bg| {
            if bg.merge_all || !past_retry(bg.merge_failed_at) || inner.idle_merge_due() {
                return Next::Sleep;
            }
            inner.next_maintenance(false).map_or(Next::Sleep, Next::Run)
        });
        let Some(task) = picked else { return };
        let outcome = rebuild(&inner, &task, Lane::Merge);
        finish(
            &inner,
            Lane::Merge,
            task.failure_name(),
            outcome,
            |bg, failed| {
                if failed {
                    bg.merge_failed_at = Some(Instant::now());
                } else {
                    bg.rebuilt += 1;
                    bg.merge_failed_at = None;
                }
            },
        );
    }
}

/// What a lane does next.
enum Next<T> {
    Run(T),
    /// Freeze the growing segment first (the writer lock comes before the background one,
    /// so the lane lets go of it), then look again.
    Freeze,
    Sleep,
}

fn busy(bg: &mut Background, lane: Lane) -> &mut bool {
    match lane {
        Lane::Seal => &mut bg.sealing,
        Lane::Merge => &mut bg.merging,
    }
}

/// Waits until `pick` names a task for `lane` (woken on every freeze and every build's end,
/// and every `IDLE`) and marks the lane busy; `None` once the collection closes.
fn next_task<T>(
    inner: &Inner,
    lane: Lane,
    mut pick: impl FnMut(&mut Background) -> Next<T>,
) -> Option<T> {
    let mut bg = lock(&inner.background);
    loop {
        if bg.stop {
            return None;
        }
        match pick(&mut bg) {
            Next::Run(task) => {
                *busy(&mut bg, lane) = true;
                return Some(task);
            }
            Next::Freeze => {
                drop(bg);
                inner.freeze_now();
                bg = lock(&inner.background);
            }
            Next::Sleep => {
                bg = inner
                    .wake
                    .wait_timeout(bg, IDLE)
                    .unwrap_or_else(|e| e.into_inner())
                    .0
            }
        }
    }
}

/// Marks `lane` idle after its build and records how it went: a cancelled build (superseded
/// by a merge of everything, which the next round picks) is neither; a failure is reported
/// as `what` failed (a merge's failure never hides a sealing one); `record` updates the
/// lane's counters, told whether it failed. Wakes the other lane and `optimize`.
fn finish(
    inner: &Inner,
    lane: Lane,
    what: &str,
    outcome: crate::Result<()>,
    record: impl FnOnce(&mut Background, bool),
) {
    // A build frees a graph's worth of small blocks from several threads, which glibc keeps
    // in its per-thread arenas; the next build, and the memory cgroup, count them on top.
    diskvec_vector::release_freed_memory();
    let mut bg = lock(&inner.background);
    *busy(&mut bg, lane) = false;
    if !is_cancelled(&outcome) {
        match outcome {
            Ok(()) => {
                record(&mut bg, false);
                if !bg.sealing_failed {
                    bg.error = None;
                }
            }
            Err(e) => {
                log::error!("collection {:?}: {what} failed: {e}", inner.name);
                if lane == Lane::Seal || !bg.sealing_failed {
                    bg.error = Some(format!("{what} failed: {e}"));
                }
                record(&mut bg, true);
            }
        }
    }
    drop(bg);
    inner.wake.notify_all();
}

fn rebuild(inner: &Inner, m: &Maintenance, lane: Lane) -> crate::Result<()> {
    match m {
        Maintenance::Vacuum(id) => inner.rebuild(&[*id], &[], lane),
        Maintenance::Merge(ids) => inner.rebuild(ids, &[], lane),
        Maintenance::MergeAll { sealed, frozen } => inner.rebuild(sealed, frozen, lane),
    }
}
