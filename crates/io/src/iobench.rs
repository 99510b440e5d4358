//! An fio-style storage benchmark over one or more paths: random reads, or a read/write
//! mix, at a block size and queue depth, from several jobs (threads), each with one
//! io_uring ring. It answers "what will this storage give me" with the same I/O path the
//! index uses.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use io_uring::{opcode, types, IoUring};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::{AlignedBuf, IoError, PathSnapshot, PathStats, Result, SECTOR};

/// One measurement's settings.
#[derive(Clone, Debug)]
pub struct BenchSpec {
    pub block_bytes: usize,
    /// Percent of operations that are reads (100: random read; 75: fio's rw mix 75/25).
    pub read_percent: u32,
    /// Operations in flight per job.
    pub queue_depth: usize,
    pub jobs: usize,
    pub duration: Duration,
}

/// One measurement's results.
#[derive(Clone, Debug)]
pub struct BenchResult {
    pub iops: f64,
    pub mb_per_s: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    /// Share of the machine's CPU time this process used, in percent of all cores.
    pub cpu_percent: f64,
    pub per_path: Vec<PathSnapshot>,
}

/// The files a benchmark runs on: a directory gets a test file of `size` bytes laid out
/// with real data (so reads hit the device, not holes); a file or block device is used as is.
pub fn prepare_targets(paths: &[PathBuf], size: u64, writes: bool) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for p in paths {
        let meta = std::fs::metadata(p).map_err(|source| IoError::Os {
            path: p.display().to_string(),
            source,
        })?;
        if meta.is_dir() {
            let f = p.join("diskvec-iobench.dat");
            let current = std::fs::metadata(&f).map(|m| m.len()).unwrap_or(0);
            if current < size {
                lay_out(&f, size)?;
            }
            out.push(f);
        } else if meta.file_type().is_block_device() && writes {
            return Err(IoError::Usage(format!(
                "{}: refusing to write to a block device; use a read-only mix or a directory",
                p.display()
            )));
        } else {
            out.push(p.clone());
        }
    }
    Ok(out)
}

fn lay_out(path: &Path, size: u64) -> Result<()> {
    let os = |source| IoError::Os {
        path: path.display().to_string(),
        source,
    };
    let mut f = File::create(path).map_err(os)?;
    let mut rng = SmallRng::seed_from_u64(7);
    let mut chunk = vec![0u8; 1 << 20];
    let mut written = 0u64;
    while written < size {
        rng.fill(&mut chunk[..]);
        let take = (size - written).min(chunk.len() as u64) as usize;
        f.write_all(&chunk[..take]).map_err(os)?;
        written += take as u64;
    }
    f.sync_all().map_err(os)
}

fn cpu_seconds() -> f64 {
    // SAFETY: rusage is plain integers, for which all-zero bytes are a valid value.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes only into the struct it is given, which lives on this stack.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(u.ru_utime) + t(u.ru_stime)
}

/// Runs one measurement over `targets` (as made by `prepare_targets`).
pub fn run(targets: &[PathBuf], spec: &BenchSpec) -> Result<BenchResult> {
    if spec.block_bytes == 0
        || !spec.block_bytes.is_multiple_of(SECTOR)
        || spec.queue_depth == 0
        || spec.jobs == 0
    {
        return Err(IoError::Usage(format!(
            "iobench needs a block size that is a multiple of {SECTOR}, queue depth >= 1 and jobs >= 1"
        )));
    }
    if spec.read_percent > 100 {
        return Err(IoError::Usage(
            "read percent must be between 0 and 100".into(),
        ));
    }
    let writes = spec.read_percent < 100;
    let mut files = Vec::new();
    for t in targets {
        let os = |source| IoError::Os {
            path: t.display().to_string(),
            source,
        };
        let f = OpenOptions::new()
            .read(true)
            .write(writes)
            .custom_flags(libc::O_DIRECT)
            .open(t)
            .map_err(os)?;
        let len = std::fs::metadata(t).map_err(os)?.len();
        let len = if len == 0 { block_device_len(&f) } else { len };
        if len < spec.block_bytes as u64 {
            return Err(IoError::Usage(format!(
                "{}: smaller than one block",
                t.display()
            )));
        }
        files.push((Arc::new(f), len));
    }
    let stats: Vec<Arc<PathStats>> = targets
        .iter()
        .map(|_| Arc::new(PathStats::default()))
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let cpu0 = cpu_seconds();
    let start = Instant::now();
    let handles: Vec<_> = (0..spec.jobs)
        .map(|job| {
            let files = files.clone();
            let stats = stats.clone();
            let stop = stop.clone();
            let spec = spec.clone();
            std::thread::spawn(move || job_loop(job, &files, &stats, &spec, &stop))
        })
        .collect();
    std::thread::sleep(spec.duration);
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.join()
            .map_err(|_| IoError::Usage("an iobench job panicked".into()))??;
    }
    let wall = start.elapsed().as_secs_f64();
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1) as f64;
    let cpu_percent = 100.0 * (cpu_seconds() - cpu0) / (wall * cpus);
    let per_path: Vec<PathSnapshot> = stats.iter().map(|s| s.snapshot()).collect();
    let ops: u64 = per_path.iter().map(|p| p.reads).sum();
    let bytes: u64 = per_path.iter().map(|p| p.bytes).sum();
    // Overall percentiles: merge by taking each path's, weighted by its operations.
    let weighted = |f: fn(&PathSnapshot) -> f64| {
        per_path.iter().map(|p| f(p) * p.reads as f64).sum::<f64>() / ops.max(1) as f64
    };
    Ok(BenchResult {
        iops: ops as f64 / wall,
        mb_per_s: bytes as f64 / wall / 1e6,
        p50_us: weighted(|p| p.p50_us),
        p99_us: weighted(|p| p.p99_us),
        cpu_percent,
        per_path,
    })
}

fn block_device_len(f: &File) -> u64 {
    use std::io::Seek;
    let mut f = f;
    f.seek(std::io::SeekFrom::End(0)).unwrap_or(0)
}

fn job_loop(
    job: usize,
    files: &[(Arc<File>, u64)],
    stats: &[Arc<PathStats>],
    spec: &BenchSpec,
    stop: &AtomicBool,
) -> Result<()> {
    let os = |source| IoError::Os {
        path: "io_uring".into(),
        source,
    };
    let depth = spec.queue_depth;
    let ring = IoUring::new(depth.next_power_of_two().max(8) as u32).map_err(os)?;
    // Registered files spare the kernel a file lookup per operation, as fio's
    // `registerfiles` does; where registration is refused, plain descriptors are used.
    let raw: Vec<i32> = files.iter().map(|(f, _)| f.as_raw_fd()).collect();
    let registered = ring.submitter().register_files(&raw).is_ok();
    let mut bufs: Vec<AlignedBuf> = (0..depth)
        .map(|_| AlignedBuf::new(spec.block_bytes))
        .collect();
    for b in &mut bufs {
        SmallRng::seed_from_u64(job as u64).fill(b.as_mut_slice());
    }
    let mut job_ring = JobRing {
        ring,
        bufs,
        in_flight: 0,
    };
    let mut rng = SmallRng::seed_from_u64(0x10b_e7c4 ^ job as u64);
    let mut sent = vec![(Instant::now(), 0usize); depth];
    let mut next_path = job % files.len();
    let mut issue = |slot: usize,
                     ring: &mut IoUring,
                     bufs: &mut [AlignedBuf],
                     rng: &mut SmallRng,
                     sent: &mut [(Instant, usize)]|
     -> Result<()> {
        let path = next_path;
        next_path = (next_path + 1) % files.len();
        let (file, len) = &files[path];
        let blocks = len / spec.block_bytes as u64;
        let offset = rng.random_range(0..blocks) * spec.block_bytes as u64;
        let ptr = bufs[slot].as_mut_ptr();
        let read = rng.random_range(0..100) < spec.read_percent;
        let len = spec.block_bytes as u32;
        let entry = match (registered, read) {
            (true, true) => opcode::Read::new(types::Fixed(path as u32), ptr, len)
                .offset(offset)
                .build(),
            (true, false) => opcode::Write::new(types::Fixed(path as u32), ptr, len)
                .offset(offset)
                .build(),
            (false, true) => opcode::Read::new(types::Fd(file.as_raw_fd()), ptr, len)
                .offset(offset)
                .build(),
            (false, false) => opcode::Write::new(types::Fd(file.as_raw_fd()), ptr, len)
                .offset(offset)
                .build(),
        };
        sent[slot] = (Instant::now(), path);
        stats[path].started(spec.block_bytes);
        // SAFETY: the buffer lives in the `JobRing`, which does not free it before the
        // operation's completion is reaped (see `JobRing`).
        unsafe { ring.submission().push(&entry.user_data(slot as u64)) }
            .map_err(|_| IoError::Usage("io_uring submission queue full".into()))?;
        Ok(())
    };
    let JobRing {
        ring,
        bufs,
        in_flight,
    } = &mut job_ring;
    for slot in 0..depth {
        issue(slot, ring, bufs, &mut rng, &mut sent)?;
        *in_flight += 1;
    }
    while *in_flight > 0 {
        match ring.submit_and_wait(1) {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            Err(e) => return Err(os(e)),
        }
        let done: Vec<(usize, i32)> = ring
            .completion()
            .map(|c| (c.user_data() as usize, c.result()))
            .collect();
        // Every completion taken off the ring is counted before anything can return, so
        // `JobRing::drop` waits for exactly the operations still with the kernel.
        *in_flight -= done.len();
        let mut first_error = None;
        for (slot, res) in done {
            let (at, path) = sent[slot];
            stats[path].finished(at.elapsed().as_secs_f64() * 1e6);
            if res < 0 {
                first_error.get_or_insert(os(std::io::Error::from_raw_os_error(-res)));
                continue;
            }
            if first_error.is_none() && !stop.load(Ordering::Relaxed) {
                issue(slot, ring, bufs, &mut rng, &mut sent)?;
                *in_flight += 1;
            }
        }
        if let Some(e) = first_error {
            return Err(e);
        }
    }
    Ok(())
}

/// One job's ring and the buffers its operations read into and write from.
///
/// Soundness: the kernel uses a buffer from the push of its operation until that
/// operation's completion is taken off the ring; `in_flight` counts those operations
/// (pushed ones, sent or not). An early return (an error, or unwinding from a panic)
/// drops this value, and `Drop` waits for every one of them before the buffers are freed;
/// if the ring cannot be waited on, the buffers are leaked instead.
struct JobRing {
    ring: IoUring,
    bufs: Vec<AlignedBuf>,
    in_flight: usize,
}

impl Drop for JobRing {
    fn drop(&mut self) {
        while self.in_flight > 0 {
            match self.ring.submit_and_wait(self.in_flight) {
                Ok(_) => self.in_flight -= self.ring.completion().count(),
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                Err(_) => {
                    std::mem::forget(std::mem::take(&mut self.bufs));
                    return;
                }
            }
        }
    }
}
