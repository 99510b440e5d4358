use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::{IoError, Result};

/// What an emulated path adds to the real device: a fixed latency, and caps on IOPS and
/// bandwidth. Written `latency_us=80,iops=20000,mbps=1500` (any subset).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PathEmulation {
    pub latency_us: f64,
    pub iops: Option<f64>,
    pub mbps: Option<f64>,
}

impl std::str::FromStr for PathEmulation {
    type Err = IoError;
    fn from_str(s: &str) -> Result<Self> {
        let mut e = PathEmulation::default();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (key, value) = part.split_once('=').ok_or_else(|| {
                IoError::Usage(format!("path emulation {part:?}: expected key=value"))
            })?;
            let v: f64 = value
                .trim()
                .parse()
                .ok()
                .filter(|v: &f64| v.is_finite() && *v >= 0.0)
                .ok_or_else(|| {
                    IoError::Usage(format!(
                        "path emulation {part:?}: {value:?} is not a non-negative number"
                    ))
                })?;
            match key.trim() {
                "latency_us" => e.latency_us = v,
                "iops" if v > 0.0 => e.iops = Some(v),
                "mbps" if v > 0.0 => e.mbps = Some(v),
                "iops" | "mbps" => {
                    return Err(IoError::Usage(format!(
                        "path emulation {part:?}: a cap must be above zero"
                    )))
                }
                other => {
                    return Err(IoError::Usage(format!(
                        "path emulation: unknown key {other:?} (expected latency_us, iops, mbps)"
                    )))
                }
            }
        }
        Ok(e)
    }
}

/// One emulated path, shared by every thread: a single server that takes requests in
/// arrival order, each for max(1/iops, bytes/bandwidth), then adds the latency.
pub(crate) struct EmulatedPath {
    spec: PathEmulation,
    next_free: Mutex<Instant>,
}

impl EmulatedPath {
    pub fn new(spec: PathEmulation) -> Self {
        Self {
            spec,
            next_free: Mutex::new(Instant::now()),
        }
    }

    /// When a request of `bytes` sent now completes on this path.
    pub fn schedule(&self, bytes: usize) -> Instant {
        let per_io = self.spec.iops.map_or(0.0, |iops| 1.0 / iops);
        let per_byte = self
            .spec
            .mbps
            .map_or(0.0, |mbps| bytes as f64 / (mbps * 1e6));
        let service = Duration::from_secs_f64(per_io.max(per_byte));
        let now = Instant::now();
        let mut next = self.next_free.lock().unwrap_or_else(|e| e.into_inner());
        let start = (*next).max(now);
        *next = start + service;
        start + service + Duration::from_secs_f64(self.spec.latency_us / 1e6)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_specs_and_refuses_bad_ones() {
        let e: PathEmulation = "latency_us=80, iops=20000,mbps=1500".parse().unwrap();
        assert_eq!(
            e,
            PathEmulation {
                latency_us: 80.0,
                iops: Some(20000.0),
                mbps: Some(1500.0)
            }
        );
        assert_eq!(
            "".parse::<PathEmulation>().unwrap(),
            PathEmulation::default()
        );
        for bad in ["latency=5", "iops=0", "iops=-3", "mbps=abc", "latency_us"] {
            assert!(bad.parse::<PathEmulation>().is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn requests_queue_behind_the_iops_cap() {
        let p = EmulatedPath::new(PathEmulation {
            latency_us: 100.0,
            iops: Some(1000.0),
            mbps: None,
        });
        let t0 = Instant::now();
        let done: Vec<Instant> = (0..5).map(|_| p.schedule(4096)).collect();
        // 1 ms of service each, one after another, plus 100 us latency.
        let last = done[4].duration_since(t0).as_secs_f64();
        assert!(
            (last - 0.0051).abs() < 0.0008,
            "fifth request done after {last} s"
        );
        assert!(done.windows(2).all(|w| w[1] > w[0]));
        let bw = EmulatedPath::new(PathEmulation {
            latency_us: 0.0,
            iops: None,
            mbps: Some(1.0),
        });
        let t = bw
            .schedule(1_000_000)
            .duration_since(Instant::now())
            .as_secs_f64();
        assert!(t > 0.9 && t < 1.01, "1 MB at 1 MB/s took {t} s");
    }
}
