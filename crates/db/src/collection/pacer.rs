//! Pacing of upserts while frozen segments queue for their seals. Without it writers ran at
//! full speed until the queue was full and then every write waited for a whole seal: one
//! HTTP client writing as fast as acknowledged saw p99 17 ms but single writes of 7-10 s.
//! From half the queue on, each upsert takes a slot in a schedule that lets points in at
//! the rate the last seals built them, slower as the queue nears its end, so the wait is
//! spread over many writes, a few milliseconds each. The wall at the full queue stays.

use std::time::{Duration, Instant};

/// Longest one write is paced (a burst of many writers pays in turn, each at most this).
const MAX_DELAY: Duration = Duration::from_secs(1);

/// The paced rate never falls below this share of the seals' rate (near the full queue).
const SLOWEST: f64 = 0.1;

/// How many frozen segments queue before writers are paced, with writers held back at
/// `limit`: half of them, at least two.
pub(crate) fn pacing_from(limit: usize) -> usize {
    (limit / 2).max(2)
}

pub(crate) struct Pacer {
    /// Points per second the recent seals built (each new seal weighs half), `None` before
    /// the first seal: nothing to pace by.
    seal_rate: Option<f64>,
    /// When the next paced write may go.
    next: Instant,
}

impl Pacer {
    pub fn new() -> Self {
        Self {
            seal_rate: None,
            next: Instant::now(),
        }
    }

    /// A seal built `points` points in `seconds`.
    pub fn record_seal(&mut self, points: usize, seconds: f64) {
        if points == 0 || seconds <= 0.0 {
            return;
        }
        let rate = points as f64 / seconds;
        self.seal_rate = Some(self.seal_rate.map_or(rate, |r| (r + rate) / 2.0));
    }

    /// How long an upsert of `points` waits before it goes, with `queued` frozen segments
    /// waiting and writers held back at `limit`; reserves its slot in the schedule.
    pub fn delay(&mut self, now: Instant, points: usize, queued: usize, limit: usize) -> Duration {
        let start = pacing_from(limit);
        let Some(rate) = self
            .seal_rate
            .filter(|_| queued >= start && limit >= 2 * start)
        else {
            self.next = now;
            return Duration::ZERO;
        };
        // Full rate at `start`, falling towards SLOWEST as the queue nears the limit.
        let room = (limit.saturating_sub(queued)) as f64 / (limit - start) as f64;
        let paced = rate * room.clamp(SLOWEST, 1.0);
        // A schedule further ahead than MAX_DELAY is pulled back, so writers capped at it
        // do not push it ever further (each would then wait the whole cap).
        let slot = self.next.max(now).min(now + MAX_DELAY);
        self.next = slot + Duration::from_secs_f64(points as f64 / paced);
        slot - now
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_are_paced_at_the_seal_rate_from_half_the_queue_on() {
        let mut p = Pacer::new();
        let now = Instant::now();
        // Nothing to pace by before a seal, and nothing paced below half the queue.
        assert_eq!(p.delay(now, 200, 12, 16), Duration::ZERO);
        p.record_seal(8_000, 0.5);
        assert_eq!(p.delay(now, 200, 7, 16), Duration::ZERO);
        // At half the queue: 16,000 points/s, so 200-point writes go 12.5 ms apart.
        assert_eq!(p.delay(now, 200, 8, 16), Duration::ZERO);
        assert_eq!(p.delay(now, 200, 8, 16), Duration::from_micros(12_500));
        assert_eq!(p.delay(now, 200, 8, 16), Duration::from_micros(25_000));
        // A small queue (a limit of 2 or 3) is never paced: the wall alone holds it.
        let mut small = Pacer::new();
        small.record_seal(8_000, 0.5);
        small.delay(now, 200, 2, 3);
        assert_eq!(small.delay(now, 200, 2, 3), Duration::ZERO);
    }

    #[test]
    fn the_pace_slows_as_the_queue_fills_and_one_wait_is_bounded() {
        let mut p = Pacer::new();
        p.record_seal(8_000, 0.5);
        let now = Instant::now();
        p.delay(now, 200, 14, 16);
        // Two of eight slots of room left: a quarter of the seal rate, 50 ms a write.
        assert_eq!(p.delay(now, 200, 14, 16), Duration::from_millis(50));
        let mut p = Pacer::new();
        p.record_seal(100, 10.0);
        p.delay(now, 100_000, 15, 16);
        assert_eq!(p.delay(now, 200, 15, 16), MAX_DELAY);
        // The queue drained: the schedule starts over.
        assert_eq!(p.delay(now, 200, 3, 16), Duration::ZERO);
        assert_eq!(p.delay(now, 200, 8, 16), Duration::ZERO);
    }

    #[test]
    fn the_seal_rate_follows_recent_seals() {
        let mut p = Pacer::new();
        p.record_seal(10_000, 1.0);
        p.record_seal(30_000, 1.0);
        assert_eq!(p.seal_rate, Some(20_000.0));
        p.record_seal(0, 1.0);
        p.record_seal(10, 0.0);
        assert_eq!(p.seal_rate, Some(20_000.0));
    }
}
