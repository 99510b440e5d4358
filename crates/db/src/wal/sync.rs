//! Durability: group commit for [`SyncMode::Always`](super::SyncMode::Always) and the
//! background syncer for [`SyncMode::Interval`](super::SyncMode::Interval).
//!
//! Group commit is leader/follower: a thread that needs op `n` durable and finds no sync under
//! way becomes the leader, syncs everything written so far (without holding the writer's
//! lock, so others keep appending), publishes the new durable op and wakes the waiters;
//! a thread that finds a sync under way waits for it and checks again. So one fdatasync
//! covers every record written before it started, however many threads wrote them.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use super::{io_err, Shared, WalError};

/// What the group-commit mutex guards.
#[derive(Debug, Default)]
pub(super) struct SyncState {
    /// Every op up to this one is durable.
    pub durable_op: u64,
    /// A leader is in fdatasync.
    pub syncing: bool,
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding one of these locks leaves nothing half-updated that a later
    // caller could misread: the poison flag, not the mutex's, stops writes after failures.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    /// Returns once `op` is durable, syncing it as the leader if no sync is under way.
    pub(super) fn wait_durable(&self, op: u64) -> Result<(), WalError> {
        let mut st = lock(&self.group);
        loop {
            self.check_poison()?;
            if st.durable_op >= op {
                return Ok(());
            }
            if st.syncing {
                st = self.group_cv.wait(st).unwrap_or_else(|e| e.into_inner());
                continue;
            }
            st.syncing = true;
            drop(st);
            let synced = self.sync_written();
            st = lock(&self.group);
            st.syncing = false;
            self.group_cv.notify_all();
            match synced {
                Ok(through) => st.durable_op = st.durable_op.max(through),
                Err(e) => {
                    // The followers just notified run only once `st` is released, so they
                    // see the poison, never a durable op this failed sync did not cover.
                    self.poison(&e);
                    return Err(e);
                }
            }
        }
    }

    /// Syncs everything written so far; returns the op through which it is now durable.
    fn sync_written(&self) -> Result<u64, WalError> {
        // Taken under the writer's lock, released before the sync: every op up to `through`
        // is in this file (older files were synced when the log moved past them).
        let (through, handle, path) = lock(&self.writer).sync_target();
        if !self.faults.skip_data_sync {
            lock(&handle)
                .sync_data()
                .map_err(io_err("fdatasync", &path))?;
            self.syncs.fetch_add(1, Ordering::Relaxed);
        }
        Ok(through)
    }

    /// Publishes that the log is durable through `op` (a new file was started, which synced
    /// the old one).
    pub(super) fn mark_durable(&self, op: u64) {
        let mut st = lock(&self.group);
        st.durable_op = st.durable_op.max(op);
        self.group_cv.notify_all();
    }

    pub(super) fn durable_op(&self) -> u64 {
        lock(&self.group).durable_op
    }
}

/// The body of the [`SyncMode::Interval`](super::SyncMode::Interval) thread: syncs what was
/// written every `every`, until told to stop or the log fails.
pub(super) fn run_interval_syncer(shared: Arc<Shared>, every: Duration) {
    let mut stop = lock(&shared.stop);
    while !*stop {
        stop = shared
            .stop_cv
            .wait_timeout(stop, every)
            .unwrap_or_else(|e| e.into_inner())
            .0;
        if *stop {
            break;
        }
        drop(stop);
        if let Err(e) = shared.flush() {
            // Poisoned: appends report it from now on; syncing again cannot help.
            log::error!("{}: background log sync failed: {e}", shared.dir.display());
            return;
        }
        stop = lock(&shared.stop);
    }
}
