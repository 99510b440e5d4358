//! The indexer: links points of the active growing segment into its HNSW graph off the write
//! path. Writes wake it; a search meanwhile scans what is not linked yet.
//!
//! Frozen segments are not linked further: a DiskANN build is about to replace them, and
//! under bulk ingest linking them only took CPU from that build (their unlinked tail is
//! scanned until the switch). For the same reason the thread runs at a lower CPU priority
//! than writers, searches and seals: linking is an optimization of searches over fresh data,
//! never something a caller waits for.

use std::sync::Arc;
use std::time::Duration;

use super::{lock, Inner};

/// Points linked per lock hold: writers wait at most this many insertions.
const BATCH: usize = 32;

impl Inner {
    /// Tells the indexer there are points to link.
    pub(crate) fn wake_indexer(&self) {
        *lock(&self.index_pending) = true;
        self.index_wake.notify_one();
    }

    /// Links one batch; returns how many points it linked.
    fn link_some(&self) -> usize {
        let active = {
            let state = self.state.read().unwrap_or_else(|e| e.into_inner());
            state.growing(state.active).cloned()
        };
        match active {
            Some(g) => g
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .link_pending(BATCH),
            None => 0,
        }
    }
}

pub(crate) fn run(inner: Arc<Inner>) {
    crate::background::lower_priority();
    loop {
        if lock(&inner.background).stop {
            return;
        }
        if inner.link_some() > 0 {
            continue;
        }
        let mut pending = lock(&inner.index_pending);
        if !*pending {
            pending = inner
                .index_wake
                .wait_timeout(pending, Duration::from_millis(200))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        *pending = false;
    }
}
