//! What the harness reads from the machine: memory high-water marks, bytes read from the
//! device, energy counters (RAPL) where they exist, and a description for reports.

use std::path::Path;

/// The number after `label` on its line of a /proc file ("VmHWM:   1234 kB" gives 1234).
fn proc_number(path: &str, label: &str) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines()
        .find(|l| l.starts_with(label))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// This process's peak resident set size in bytes (VmHWM), if the kernel reports it.
pub fn peak_rss_bytes() -> Option<u64> {
    proc_number("/proc/self/status", "VmHWM:").map(|k| k * 1024)
}

/// `peak_rss_bytes` in MiB, NaN where the kernel does not report it (for tables and JSON).
pub fn peak_rss_mib() -> f64 {
    peak_rss_bytes().map_or(f64::NAN, |b| b as f64 / 1048576.0)
}

pub fn rss_bytes() -> Option<u64> {
    proc_number("/proc/self/status", "VmRSS:").map(|k| k * 1024)
}

/// Returns freed heap to the system and restarts the peak-RSS mark from the current RSS,
/// so the serving phase's peak excludes what loading needed. False where the kernel does
/// not allow it (then the peak includes the load).
pub fn reset_peak_rss() -> bool {
    diskvec_vector::release_freed_memory();
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// Bytes this process has caused to be read from storage (`read_bytes` of /proc/self/io).
pub fn device_read_bytes() -> Option<u64> {
    proc_number("/proc/self/io", "read_bytes:")
}

/// Package energy counters of Intel/AMD RAPL under /sys/class/powercap.
pub struct Rapl {
    /// (energy_uj file, wrap-around range in microjoules)
    domains: Vec<(std::path::PathBuf, u64)>,
}

impl Rapl {
    /// The top-level (package) domains, or `None` where the machine exposes none or they
    /// cannot be read (virtual machines usually do not expose them).
    pub fn open() -> Option<Self> {
        Self::open_at(Path::new("/sys/class/powercap"))
    }

    pub fn open_at(root: &Path) -> Option<Self> {
        let mut domains = Vec::new();
        for entry in std::fs::read_dir(root).ok()?.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            // intel-rapl:0 is a package; intel-rapl:0:0 is a sub-domain counted within it.
            if !name.contains("rapl:") || name.matches(':').count() != 1 {
                continue;
            }
            let energy = entry.path().join("energy_uj");
            let range = std::fs::read_to_string(entry.path().join("max_energy_range_uj"))
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .unwrap_or(u64::MAX);
            if std::fs::read_to_string(&energy).is_ok() {
                domains.push((energy, range));
            }
        }
        domains.sort();
        (!domains.is_empty()).then_some(Self { domains })
    }

    /// A reading of every domain, in microjoules.
    pub fn read(&self) -> Vec<u64> {
        self.domains
            .iter()
            .map(|(p, _)| {
                std::fs::read_to_string(p)
                    .ok()
                    .and_then(|s| s.trim().parse().ok())
                    .unwrap_or(0)
            })
            .collect()
    }

    /// Joules between two readings, allowing each counter to wrap once.
    pub fn joules_between(&self, before: &[u64], after: &[u64]) -> f64 {
        self.domains
            .iter()
            .zip(before.iter().zip(after))
            .map(|((_, range), (&b, &a))| {
                if a >= b {
                    a - b
                } else {
                    range.saturating_sub(b) + a
                }
            })
            .sum::<u64>() as f64
            / 1e6
    }
}

/// One line describing the machine, for reports.
pub fn describe() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let mem_gib = proc_number("/proc/meminfo", "MemTotal:").map(|k| k as f64 / 1048576.0);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    format!(
        "{cores} x {cpu}, {} RAM, Linux {kernel}",
        mem_gib.map_or("? GiB".into(), |g| format!("{g:.0} GiB"))
    )
}

/// Total bytes of the regular files under `path`.
pub fn bytes_under(path: &Path) -> u64 {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return 0;
    };
    if meta.is_file() {
        return meta.len();
    }
    if !meta.is_dir() {
        return 0;
    }
    std::fs::read_dir(path)
        .map(|entries| entries.flatten().map(|e| bytes_under(&e.path())).sum())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rapl_counters_are_summed_over_packages_and_wrap() {
        let root = tempfile::tempdir().unwrap();
        for (name, energy) in [
            ("intel-rapl:0", "1000"),
            ("intel-rapl:1", "50"),
            ("intel-rapl:0:0", "7"),
        ] {
            let d = root.path().join(name);
            std::fs::create_dir(&d).unwrap();
            std::fs::write(d.join("energy_uj"), energy).unwrap();
            std::fs::write(d.join("max_energy_range_uj"), "2000").unwrap();
        }
        let rapl = Rapl::open_at(root.path()).unwrap();
        assert_eq!(rapl.read(), vec![1000, 50]);
        // Package 0 wrapped: 1900 -> 2000 -> 100 is 200 uJ; package 1 moved 1,000,000 uJ.
        let j = rapl.joules_between(&[1900, 0], &[100, 1_000_000]);
        assert!((j - 1.0002).abs() < 1e-9, "{j}");
        assert!(Rapl::open_at(&root.path().join("none")).is_none());
    }

    #[test]
    fn memory_and_file_sizes_are_read() {
        assert!(peak_rss_bytes().unwrap() >= rss_bytes().unwrap() / 2);
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("a")).unwrap();
        std::fs::write(dir.path().join("a/x"), [0u8; 10]).unwrap();
        std::fs::write(dir.path().join("y"), [0u8; 5]).unwrap();
        assert_eq!(bytes_under(dir.path()), 15);
        assert!(describe().contains("Linux"));
    }
}
