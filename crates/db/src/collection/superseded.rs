//! A seal (or a merge of sealed segments beside it) that a merge of everything is about to
//! redo is cancelled. After a bulk load the
//! first segment freezes and starts sealing while the last points are written; `optimize`
//! (or the idle merge once writes pause) then rebuilds every point as one segment, so the
//! seal's work is thrown away: about 40% of the build CPU of such a load (docs/benchmarks.md,
//! session 13). The seal's build asks `cancelled()` as it goes and stops.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::task::Lane;
use super::{lock, Inner};

/// How often a running seal looks again (the check takes the collection's locks).
const CHECK_EVERY: Duration = Duration::from_millis(100);

/// The progress of one background build, forwarded to `info()`; for a seal or a merge
/// beside one, also whether it has been superseded.
pub(crate) struct BuildProgress<'a> {
    inner: &'a Inner,
    lane: Lane,
    /// Seals of frozen segments and merges in the merge lane are superseded; the merge of
    /// everything itself is not.
    supersedable: bool,
    started: Instant,
    /// Milliseconds since `started` before which it does not look again.
    next_check: AtomicU64,
    superseded: AtomicBool,
}

impl<'a> BuildProgress<'a> {
    pub fn new(inner: &'a Inner, lane: Lane, supersedable: bool) -> Self {
        Self {
            inner,
            lane,
            supersedable,
            started: Instant::now(),
            next_check: AtomicU64::new(0),
            superseded: AtomicBool::new(false),
        }
    }

    /// Whether a merge of every segment, the frozen ones being sealed included, is wanted
    /// now (`optimize`, or writes paused past `idle_merge_ms`) and fits one segment.
    /// Not while the frozen segments are being sealed first (`Background::frozen_first`).
    fn merge_of_everything_due(&self) -> bool {
        let (asked, frozen_first) = {
            let bg = lock(&self.inner.background);
            (bg.merge_all, bg.frozen_first)
        };
        !frozen_first
            && (asked || self.inner.idle_merge_due())
            && self.inner.everything_fits_one_segment()
    }
}

impl diskvec_index::Progress for BuildProgress<'_> {
    fn phase(&self, name: &str, total: u64) {
        self.inner.task.phase(self.lane, name, total);
    }

    fn advance(&self, steps: u64) {
        self.inner.task.advance(self.lane, steps);
    }

    fn cancelled(&self) -> bool {
        if !self.supersedable {
            return false;
        }
        if self.superseded.load(Ordering::Relaxed) {
            return true;
        }
        let now = self.started.elapsed().as_millis() as u64;
        let next = self.next_check.load(Ordering::Relaxed);
        let later = now + CHECK_EVERY.as_millis() as u64;
        // One thread looks at a time; the others go on until the next round.
        if now < next
            || self
                .next_check
                .compare_exchange(next, later, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return false;
        }
        let due = self.merge_of_everything_due();
        if due {
            log::info!(
                "collection {:?}: a merge of every segment is due; the {} it would redo stops",
                self.inner.name,
                match self.lane {
                    Lane::Seal => "seal",
                    Lane::Merge => "merge",
                }
            );
            self.superseded.store(true, Ordering::Relaxed);
        }
        due
    }
}
