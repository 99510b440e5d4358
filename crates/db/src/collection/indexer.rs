//! The indexer: links points of growing segments into their HNSW graphs off the write path,
//! the active segment first. Writes wake it; a search meanwhile scans what is not linked yet.

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
        let segments = {
            let state = self.state.read().unwrap_or_else(|e| e.into_inner());
            let mut order = vec![state.active];
            order.extend(state.frozen.iter().copied());
            order
                .into_iter()
                .filter_map(|id| state.growing(id).cloned())
                .collect::<Vec<_>>()
        };
        for g in segments {
            let g = g.read().unwrap_or_else(|e| e.into_inner());
            let linked = g.link_pending(BATCH);
            if linked > 0 {
                return linked;
            }
        }
        0
    }
}

pub(crate) fn run(inner: Arc<Inner>) {
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
