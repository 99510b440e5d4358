//! How often a collection is searched, for the background work whose worth depends on it.
//!
//! A search scans every row of the growing and frozen segments that the indexer has not
//! linked into their graphs yet. At 768-d a scanned row costs a query about 0.3 µs (3 KiB of
//! f32 from DRAM) and linking it about 1 ms of one core (an HNSW insertion, ef 100): linking
//! pays for itself once a row would be scanned by a few thousand queries. A row waits in a
//! growing segment for tens of seconds at a few hundred points a second, so at a hundred
//! queries a second linking (and sealing) is the cheaper way, and below that scanning is.
//! Measured at 2M (session 42): four clients at 1,537 queries a second, 500 points a second
//! written, the indexer at the lowest priority linked nothing beside the searches, 37,500
//! rows were scanned by every query and the rate fell to 160 a second.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Queries a second from which rows waiting to be linked or sealed are worth the CPU that
/// linking or sealing them takes from the searches.
pub(crate) const BUSY_QUERIES_PER_SECOND: f64 = 100.0;

/// The shortest span a rate is measured over.
const WINDOW: Duration = Duration::from_secs(1);

pub(crate) struct SearchLoad {
    queries: AtomicU64,
    window: Mutex<Window>,
}

struct Window {
    since: Instant,
    queries_then: u64,
    rate: f64,
}

impl Default for SearchLoad {
    fn default() -> Self {
        Self {
            queries: AtomicU64::new(0),
            window: Mutex::new(Window {
                since: Instant::now(),
                queries_then: 0,
                rate: 0.0,
            }),
        }
    }
}

impl SearchLoad {
    /// Counts `queries` searched.
    pub(crate) fn record(&self, queries: usize) {
        self.queries.fetch_add(queries as u64, Ordering::Relaxed);
    }

    /// Queries a second over the last whole window (one second or more, since the window
    /// before was closed by a call).
    pub(crate) fn rate(&self) -> f64 {
        self.rate_at(Instant::now())
    }

    fn rate_at(&self, now: Instant) -> f64 {
        // A window's three numbers are whole after any panic.
        let mut w = self.window.lock().unwrap_or_else(|e| e.into_inner());
        let span = now.saturating_duration_since(w.since);
        if span >= WINDOW {
            let queries = self.queries.load(Ordering::Relaxed);
            w.rate = queries.saturating_sub(w.queries_then) as f64 / span.as_secs_f64();
            w.since = now;
            w.queries_then = queries;
        }
        w.rate
    }

    /// Whether searches come often enough that rows waiting to be linked or sealed cost them
    /// more than the linking or sealing would.
    pub(crate) fn busy(&self) -> bool {
        self.rate() >= BUSY_QUERIES_PER_SECOND
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_is_measured_over_whole_windows_and_falls_when_searches_stop() {
        let load = SearchLoad::default();
        let start = load.window.lock().unwrap().since;
        load.record(150);
        assert_eq!(load.rate_at(start + Duration::from_millis(500)), 0.0);
        let rate = load.rate_at(start + Duration::from_secs(1));
        assert!((rate - 150.0).abs() < 1e-9, "{rate}");
        // Within the next window the last rate stands.
        load.record(10);
        assert!((load.rate_at(start + Duration::from_millis(1500)) - 150.0).abs() < 1e-9);
        // Ten queries over the four seconds since.
        let rate = load.rate_at(start + Duration::from_secs(5));
        assert!((rate - 2.5).abs() < 1e-9, "{rate}");
        assert_eq!(load.rate_at(start + Duration::from_secs(6)), 0.0);
    }
}
