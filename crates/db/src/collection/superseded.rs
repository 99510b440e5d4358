//! Background builds that give way. A seal (or a merge of sealed segments beside it) that a
//! merge of everything is about to redo is cancelled. After a bulk load the
//! first segment freezes and starts sealing while the last points are written; `optimize`
//! (or the idle merge once writes pause) then rebuilds every point as one segment, so the
//! seal's work is thrown away: about 40% of the build CPU of such a load (docs/benchmarks.md,
//! session 13). And a merge picked while writes paused is cancelled when writes come back and
//! merges of segments it does not take are overdue (`Inner::writes_want_the_merge_lane`).
//! The build asks `cancelled()` as it goes and stops.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::task::Lane;
use super::{lock, Inner};

/// How often a running seal looks again (the check takes the collection's locks).
const CHECK_EVERY: Duration = Duration::from_millis(100);

/// What a background build gives way to.
#[derive(Clone, Debug)]
pub(crate) struct GivesWay {
    /// A merge of everything that would redo it: seals of frozen segments and merges in the
    /// merge lane; not the merge of everything itself.
    pub to_merge_of_everything: bool,
    /// A merge of these sealed segments, picked while writes paused, to the merges of new
    /// seals once writes come back.
    pub to_returning_writes: Option<Vec<u64>>,
}

impl GivesWay {
    pub fn to_merge_of_everything() -> Self {
        Self {
            to_merge_of_everything: true,
            to_returning_writes: None,
        }
    }

    fn to_anything(&self) -> bool {
        self.to_merge_of_everything || self.to_returning_writes.is_some()
    }
}

/// The progress of one background build, forwarded to `info()`, and whether it has been
/// superseded (`GivesWay`).
pub(crate) struct BuildProgress<'a> {
    inner: &'a Inner,
    lane: Lane,
    gives_way: GivesWay,
    started: Instant,
    /// Milliseconds since `started` before which it does not look again.
    next_check: AtomicU64,
    superseded: AtomicBool,
}

impl<'a> BuildProgress<'a> {
    pub fn new(inner: &'a Inner, lane: Lane, gives_way: GivesWay) -> Self {
        Self {
            inner,
            lane,
            gives_way,
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

    /// Why the build should stop now, if it should.
    fn superseded_by(&self) -> Option<&'static str> {
        if self.gives_way.to_merge_of_everything && self.merge_of_everything_due() {
            return Some("a merge of every segment is due");
        }
        match &self.gives_way.to_returning_writes {
            Some(running) if self.inner.writes_want_the_merge_lane(running) => {
                Some("writes came back and merges of the new segments are overdue")
            }
            _ => None,
        }
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
        if !self.gives_way.to_anything() {
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
        let Some(why) = self.superseded_by() else {
            return false;
        };
        log::info!(
            "collection {:?}: {why}; the {} stops",
            self.inner.name,
            match self.lane {
                Lane::Seal => "seal",
                Lane::Merge => "merge",
            }
        );
        self.superseded.store(true, Ordering::Relaxed);
        true
    }
}
