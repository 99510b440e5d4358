//! The indexer: links points of the active growing segment into its HNSW graph off the write
//! path. Writes wake it; a search meanwhile scans what is not linked yet.
//!
//! Frozen segments are not linked further: a DiskANN build is about to replace them, and
//! under bulk ingest linking them only took CPU from that build (their unlinked tail is
//! scanned until the switch). For the same reason the thread runs at the lowest CPU priority,
//! below writers, searches, seals and merges, while the searches scan little: linking is an
//! optimization of searches over fresh data, never something a caller waits for. While their
//! scans of the rows not linked take a tenth of a core or more (`linking_is_overdue`) it runs
//! at the process's priority beside them: at the lowest priority beside four searching
//! clients it linked nothing (`search_load.rs`).

use std::sync::Arc;
use std::time::Duration;

use super::{lock, Inner};

/// Points linked between checks of the stop flag.
const BATCH: usize = 32;

impl Inner {
    /// Tells the indexer there are points to link.
    pub(crate) fn wake_indexer(&self) {
        *lock(&self.index_pending) = true;
        self.index_wake.notify_one();
    }

    /// Links up to one batch; returns how many points it linked.
    ///
    /// The segment's lock is taken only to pick up the next insertion's handle, never across
    /// the insertion: this thread runs at low priority, and a writer waiting for the lock
    /// holds the collection's state lock, which every search and `info` then waits for.
    /// Held across insertions (3-5 ms each at 768-d), it made every write wait for one.
    fn link_some(&self) -> usize {
        let active = {
            let state = self.state.read().unwrap_or_else(|e| e.into_inner());
            if state.indexing_paused {
                return 0;
            }
            state.growing(state.active).cloned()
        };
        let Some(g) = active else { return 0 };
        let mut linked = 0;
        while linked < BATCH {
            // The segment's lock only for taking the handle: writers append meanwhile.
            let Some(linker) = g.read().unwrap_or_else(|e| e.into_inner()).linker() else {
                // Rows written during the last insertion's plan wait beside the settled
                // ones; the last write may have come then, so no write settles them.
                if g.write()
                    .unwrap_or_else(|e| e.into_inner())
                    .settle_unshared()
                {
                    continue;
                }
                break;
            };
            linker.link_next();
            linked += 1;
        }
        linked
    }
}

pub(crate) fn run(inner: Arc<Inner>) {
    crate::background::lowest_priority();
    let mut raised = false;
    loop {
        if lock(&inner.background).stop {
            return;
        }
        let overdue = inner.linking_is_overdue();
        if overdue && !raised {
            // Where raising is refused the thread stays low and tries again next batch.
            raised = crate::background::process_priority();
        } else if !overdue && raised {
            crate::background::lowest_priority();
            raised = false;
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
