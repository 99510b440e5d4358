//! What searching the rows no graph holds yet costs the searches, for the background work
//! whose worth depends on it.
//!
//! A search scans every row of the growing and frozen segments that the indexer has not
//! linked into their graphs: at 768-d a row costs a query about 0.3 µs (3 KiB of f32 from
//! DRAM), and linking it about 0.2-1 ms of one core (an HNSW insertion at ef 100, by how
//! clustered the data is), while a seal indexes it for a fraction of that. So the searches
//! time what they spend in the growing segments, the active one and the frozen ones apart,
//! and once that is a tenth of a core (`WORTH_INDEXING`) the indexer links beside the
//! searches instead of below them, and the seal of frozen rows not linked is overdue.
//! Measured at 2M (session 42): four clients at 1,537 queries a second while 500 points a
//! second were written; the indexer at the lowest priority linked nothing beside them, every query
//! scanned 37,500 rows and the rate fell to 160 a second. A query rate alone was not enough:
//! at 5,000 points a second the scans slowed the searches below a hundred a second, the rate
//! read as idle and the indexer went back down while 70,000 rows were scanned. Time spent
//! is also what a slow CPU or an unoptimized build really pays, where a byte count is not.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The share of a core the searches may spend in one kind of growing segment before
/// indexing its rows is worth the CPU it takes from them.
pub(crate) const WORTH_INDEXING: f64 = 0.1;

/// The shortest span a share is measured over.
const WINDOW: Duration = Duration::from_secs(1);

/// Which growing segments a search's time went to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Growing {
    /// The active segment, which the indexer links.
    Active,
    /// Frozen segments, which their seal indexes.
    Frozen,
}

#[derive(Default)]
pub(crate) struct SearchLoad {
    /// Nanoseconds spent searching the active and the frozen segments since open.
    spent: [AtomicU64; 2],
    window: Mutex<Window>,
    /// Milliseconds from `epoch()` to the end of the last search, plus one (0: none yet).
    last_search: AtomicU64,
}

/// The instant `SearchLoad::last_search` counts from.
fn epoch() -> Instant {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

struct Window {
    since: Instant,
    spent_then: [u64; 2],
    /// Shares of a core over the last closed window: active, frozen.
    shares: [f64; 2],
}

impl Default for Window {
    fn default() -> Self {
        Self {
            since: Instant::now(),
            spent_then: [0; 2],
            shares: [0.0; 2],
        }
    }
}

impl SearchLoad {
    /// Counts `spent` of a search in growing segments of kind `kind`.
    pub(crate) fn record(&self, kind: Growing, spent: Duration) {
        let nanos = u64::try_from(spent.as_nanos()).unwrap_or(u64::MAX);
        self.spent[kind as usize].fetch_add(nanos, Ordering::Relaxed);
    }

    /// The share of a core the searches spent in segments of kind `kind` over the last whole
    /// window (one second or more, since the window before was closed by a call).
    pub(crate) fn share(&self, kind: Growing) -> f64 {
        self.share_at(kind, Instant::now())
    }

    fn share_at(&self, kind: Growing, now: Instant) -> f64 {
        // A window's numbers are whole after any panic.
        let mut w = self.window.lock().unwrap_or_else(|e| e.into_inner());
        let span = now.saturating_duration_since(w.since);
        if span >= WINDOW {
            for k in 0..2 {
                let spent = self.spent[k].load(Ordering::Relaxed);
                w.shares[k] = spent.saturating_sub(w.spent_then[k]) as f64 / span.as_nanos() as f64;
                w.spent_then[k] = spent;
            }
            w.since = now;
        }
        w.shares[kind as usize]
    }

    /// Notes that a search ran now.
    pub(crate) fn note_search(&self) {
        let ms = u64::try_from(epoch().elapsed().as_millis()).unwrap_or(u64::MAX - 1);
        self.last_search.store(ms + 1, Ordering::Relaxed);
    }

    /// Whether a search ran within `span`.
    pub(crate) fn searched_within(&self, span: Duration) -> bool {
        match self.last_search.load(Ordering::Relaxed) {
            0 => false,
            stamp => {
                let since = epoch()
                    .elapsed()
                    .as_millis()
                    .saturating_sub(u128::from(stamp - 1));
                since < span.as_millis()
            }
        }
    }

    /// Whether indexing the segments of kind `kind` would save the searches more than it
    /// costs them: they spend a tenth of a core or more there.
    pub(crate) fn worth_indexing(&self, kind: Growing) -> bool {
        self.share(kind) >= WORTH_INDEXING
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_are_measured_over_whole_windows_and_fall_when_searches_stop() {
        let load = SearchLoad::default();
        let start = load.window.lock().unwrap().since;
        load.record(Growing::Active, Duration::from_millis(300));
        load.record(Growing::Frozen, Duration::from_millis(50));
        assert_eq!(
            load.share_at(Growing::Active, start + Duration::from_millis(500)),
            0.0
        );
        let active = load.share_at(Growing::Active, start + Duration::from_secs(1));
        assert!((active - 0.3).abs() < 1e-9, "{active}");
        assert!((load.share(Growing::Frozen) - 0.05).abs() < 1e-9);
        assert!(load.worth_indexing(Growing::Active) && !load.worth_indexing(Growing::Frozen));
        // Within the next window the last shares stand; then 40 ms over 4 s is 1%.
        load.record(Growing::Active, Duration::from_millis(40));
        assert!(
            (load.share_at(Growing::Active, start + Duration::from_millis(1500)) - 0.3).abs()
                < 1e-9
        );
        let active = load.share_at(Growing::Active, start + Duration::from_secs(5));
        assert!((active - 0.01).abs() < 1e-9, "{active}");
        assert_eq!(
            load.share_at(Growing::Frozen, start + Duration::from_secs(6)),
            0.0
        );
    }

    #[test]
    fn a_search_counts_as_recent_for_the_span_asked() {
        let load = SearchLoad::default();
        assert!(!load.searched_within(Duration::from_secs(3600)));
        load.note_search();
        assert!(load.searched_within(Duration::from_secs(60)));
        std::thread::sleep(Duration::from_millis(30));
        assert!(!load.searched_within(Duration::from_millis(20)));
    }
}
