use std::sync::atomic::{AtomicU64, Ordering};

/// Latency buckets: four per power of two of microseconds, from 1 us to about 70 s.
const BUCKETS: usize = 4 * 26;

/// Counters of one storage path, shared by every thread that reads from it.
pub struct PathStats {
    pub reads: AtomicU64,
    pub bytes: AtomicU64,
    /// Reads that waited in software because the path was at its queue-depth cap.
    pub waited: AtomicU64,
    /// Reads of this path that failed and were served by its mirror instead.
    pub failovers: AtomicU64,
    /// Reads of this path given up on after the read deadline.
    pub timeouts: AtomicU64,
    in_flight: AtomicU64,
    max_in_flight: AtomicU64,
    latency: Vec<AtomicU64>,
}

/// A copy of a path's counters at one moment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PathSnapshot {
    pub reads: u64,
    pub bytes: u64,
    pub waited: u64,
    pub failovers: u64,
    pub timeouts: u64,
    pub max_in_flight: u64,
    pub p50_us: f64,
    pub p99_us: f64,
}

fn bucket_of(us: f64) -> usize {
    if us <= 1.0 {
        return 0;
    }
    ((us.log2() * 4.0) as usize).min(BUCKETS - 1)
}

/// The upper edge of a bucket, in microseconds.
fn bucket_edge(b: usize) -> f64 {
    2f64.powf((b + 1) as f64 / 4.0)
}

impl Default for PathStats {
    fn default() -> Self {
        Self {
            reads: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            waited: AtomicU64::new(0),
            failovers: AtomicU64::new(0),
            timeouts: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
            max_in_flight: AtomicU64::new(0),
            latency: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

impl PathStats {
    pub fn started(&self, bytes: usize) {
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
        let now = self.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
        self.max_in_flight.fetch_max(now, Ordering::Relaxed);
    }

    pub fn finished(&self, latency_us: f64) {
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
        self.latency[bucket_of(latency_us)].fetch_add(1, Ordering::Relaxed);
    }

    /// Zeroes the counters; reads in flight keep being counted as in flight.
    pub fn reset(&self) {
        for c in [
            &self.reads,
            &self.bytes,
            &self.waited,
            &self.failovers,
            &self.timeouts,
            &self.max_in_flight,
        ] {
            c.store(0, Ordering::Relaxed);
        }
        self.latency
            .iter()
            .for_each(|c| c.store(0, Ordering::Relaxed));
    }

    pub fn snapshot(&self) -> PathSnapshot {
        let counts: Vec<u64> = self
            .latency
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .collect();
        let total: u64 = counts.iter().sum();
        let quantile = |q: f64| -> f64 {
            if total == 0 {
                return 0.0;
            }
            let want = (q * total as f64).ceil().max(1.0) as u64;
            let mut seen = 0;
            for (b, &c) in counts.iter().enumerate() {
                seen += c;
                if seen >= want {
                    return bucket_edge(b);
                }
            }
            bucket_edge(BUCKETS - 1)
        };
        PathSnapshot {
            reads: self.reads.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            waited: self.waited.load(Ordering::Relaxed),
            failovers: self.failovers.load(Ordering::Relaxed),
            timeouts: self.timeouts.load(Ordering::Relaxed),
            max_in_flight: self.max_in_flight.load(Ordering::Relaxed),
            p50_us: quantile(0.5),
            p99_us: quantile(0.99),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_land_in_the_right_bucket() {
        let s = PathStats::default();
        for _ in 0..98 {
            s.started(4096);
            s.finished(100.0);
        }
        for _ in 0..2 {
            s.started(4096);
            s.finished(5000.0);
        }
        let snap = s.snapshot();
        assert_eq!((snap.reads, snap.bytes), (100, 409_600));
        // Buckets are a quarter-octave wide: the edge is within 19% above the true value.
        assert!(snap.p50_us >= 100.0 && snap.p50_us < 119.0, "{snap:?}");
        assert!(snap.p99_us >= 5000.0 && snap.p99_us < 5950.0, "{snap:?}");
        assert_eq!(snap.max_in_flight, 1);
    }

    #[test]
    fn in_flight_maximum_is_tracked() {
        let s = PathStats::default();
        for _ in 0..5 {
            s.started(1);
        }
        for _ in 0..5 {
            s.finished(1.0);
        }
        s.started(1);
        assert_eq!(s.snapshot().max_in_flight, 5);
        assert_eq!(PathStats::default().snapshot().p99_us, 0.0);
    }
}
