use std::collections::VecDeque;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::emulation::EmulatedPath;
use crate::engine::Slots;
use crate::stripe::{Piece, StripeMap};
use crate::{
    open_engine, open_for_reading, DataFile, EngineChoice, EngineKind, EngineStats, IoError,
    PathEmulation, PathStats, ReadDone, ReadEngine, Result, SECTOR,
};

/// Checks one sector as read: its number in the logical file and its bytes. The layer
/// above knows the sector format; the volume uses the check to tell a good copy from a
/// bad one and to name the file and offset of bad bytes.
pub type SectorCheck = fn(logical_sector: u64, sector: &[u8]) -> bool;

/// A logical file striped over several storage paths (files on separate devices or
/// NVMe-oF namespaces). One path is a plain file.
///
/// With mirroring, a path whose file is missing, unreadable or the wrong size at open is
/// marked failed and served from its copy, as is a path whose reads fail later; a sector
/// that fails its check is read again from its copy.
pub struct Volume {
    /// Each path's file; `None` for a path lost at open (mirrored volumes only).
    pub files: Vec<Option<Arc<DataFile>>>,
    /// Each path's file name, lost or not.
    pub names: Vec<PathBuf>,
    pub map: StripeMap,
    pub stats: Vec<Arc<PathStats>>,
    emulation: Vec<Option<Arc<EmulatedPath>>>,
    /// Each path's file also holds a copy of the previous path's stripes.
    pub mirror: bool,
    logical_len: u64,
    health: Arc<Health>,
    check: Option<SectorCheck>,
    /// How long a read may take before it is given up on (`None`: forever).
    deadline: Option<Duration>,
}

/// How long a read may take by default before the engine gives up on it: three orders of
/// magnitude above a loaded SSD's milliseconds, far below the minutes a kernel may hold
/// the I/O of a vanished NVMe-oF path (`ctrl_loss_tmo`, 600 s by default) while it tries
/// to reconnect.
pub const DEFAULT_READ_DEADLINE: Duration = Duration::from_secs(5);

/// Which paths have failed, shared by every engine of a volume, and injected faults.
struct Health {
    failed: Vec<AtomicBool>,
    /// Why each failed path failed (first reason), for messages.
    reasons: std::sync::Mutex<Vec<Option<String>>>,
    /// A path fails once it has served this many reads (fault injection; u64::MAX: never).
    fail_after: Vec<AtomicU64>,
    /// Fault injection: every n-th piece sent to a path fails (0: none).
    fail_every: Vec<AtomicU64>,
    /// Pieces sent per path, counted for `fail_every`.
    sent: Vec<AtomicU64>,
    /// Reads failed by injection, all paths.
    injected: AtomicU64,
    /// Per path: reads given up on after the read deadline that have not come back yet.
    /// A mirrored volume serves a path with any from its copy; it is used again once the
    /// device has answered them all.
    stalled: Vec<AtomicU64>,
    /// Fault injection: the path's device stops answering (its reads finish only once
    /// this is cleared), as a fabric path that vanished under the kernel's multipath.
    stall_injected: Vec<AtomicBool>,
}

impl Health {
    fn new(paths: usize) -> Self {
        Self {
            failed: (0..paths).map(|_| AtomicBool::new(false)).collect(),
            reasons: std::sync::Mutex::new(vec![None; paths]),
            fail_after: (0..paths).map(|_| AtomicU64::new(u64::MAX)).collect(),
            fail_every: (0..paths).map(|_| AtomicU64::new(0)).collect(),
            sent: (0..paths).map(|_| AtomicU64::new(0)).collect(),
            injected: AtomicU64::new(0),
            stalled: (0..paths).map(|_| AtomicU64::new(0)).collect(),
            stall_injected: (0..paths).map(|_| AtomicBool::new(false)).collect(),
        }
    }

    fn is_stalled(&self, path: usize) -> bool {
        self.stalled[path].load(Ordering::Relaxed) > 0
    }

    /// Marks `path` failed; returns true the first time.
    fn fail(&self, path: usize, reason: impl FnOnce() -> String) -> bool {
        if self.failed[path].swap(true, Ordering::Relaxed) {
            return false;
        }
        let mut reasons = self.reasons.lock().unwrap_or_else(|e| e.into_inner());
        reasons[path] = Some(reason());
        true
    }

    /// Whether the next piece sent to `path` should fail by injection.
    fn injected(&self, path: usize, served: u64) -> bool {
        let every = self.fail_every[path].load(Ordering::Relaxed);
        let n = self.sent[path].fetch_add(1, Ordering::Relaxed) + 1;
        let fail = served >= self.fail_after[path].load(Ordering::Relaxed)
            || (every > 0 && n.is_multiple_of(every));
        if fail {
            self.injected.fetch_add(1, Ordering::Relaxed);
        }
        fail
    }
}

/// Where the mirror copy of the bytes at `physical` on `path` lives: on the next path,
/// after that path's own stripes.
fn mirror_target(map: &StripeMap, logical_len: u64, path: usize, physical: u64) -> (usize, u64) {
    let q = (path + 1) % map.paths;
    (q, map.path_len(q, logical_len) + physical)
}

/// The first sector of `bytes` (which start at logical byte `logical`) that fails
/// `check`, if any.
fn first_bad(check: Option<SectorCheck>, bytes: &[u8], logical: u64) -> Option<usize> {
    let check = check?;
    let first = logical / SECTOR as u64;
    bytes
        .chunks_exact(SECTOR)
        .enumerate()
        .position(|(i, s)| !check(first + i as u64, s))
}

/// Bytes each path's file must have: its own stripes, plus with mirroring a copy of the
/// previous path's.
pub fn expected_path_len(map: &StripeMap, logical_len: u64, mirror: bool, path: usize) -> u64 {
    let mirrored = if mirror {
        map.path_len((path + map.paths - 1) % map.paths, logical_len)
    } else {
        0
    };
    map.path_len(path, logical_len) + mirrored
}

impl Volume {
    /// Opens the path files of a volume whose logical size is `logical_len`, checking that
    /// each file has exactly the bytes the stripe map puts on it. With `mirror`, a path
    /// that cannot be opened or has the wrong size is marked failed (and logged) as long
    /// as its copy's path is there; without it, any such path is an error.
    pub fn open(
        paths: &[PathBuf],
        stripe_bytes: u64,
        logical_len: u64,
        direct: bool,
        mirror: bool,
    ) -> Result<Self> {
        let map = StripeMap::new(paths.len(), stripe_bytes)?;
        if mirror && paths.len() < 2 {
            return Err(IoError::Usage("mirroring needs at least two paths".into()));
        }
        let health = Arc::new(Health::new(paths.len()));
        let mut files = Vec::with_capacity(paths.len());
        for (i, p) in paths.iter().enumerate() {
            let want = expected_path_len(&map, logical_len, mirror, i);
            let opened = open_for_reading(p, direct).and_then(|f| {
                if f.len == want {
                    Ok(f)
                } else {
                    Err(IoError::Usage(format!(
                        "{}: size is {} bytes, the index expects {want} on this path (truncated or from another build?)",
                        p.display(),
                        f.len
                    )))
                }
            });
            match opened {
                Ok(f) => files.push(Some(Arc::new(f))),
                Err(e) if mirror => {
                    log::warn!(
                        "path {i} lost at open, serving its stripes from the copy on path {}: {e}",
                        (i + 1) % paths.len()
                    );
                    health.fail(i, || e.to_string());
                    files.push(None);
                }
                Err(e) => return Err(e),
            }
        }
        if mirror {
            for i in 0..paths.len() {
                let next = (i + 1) % paths.len();
                if files[i].is_none() && files[next].is_none() {
                    return Err(IoError::Usage(format!(
                        "{} and its mirror {} are both lost: the stripes of the first have no readable copy",
                        paths[i].display(),
                        paths[next].display()
                    )));
                }
            }
        }
        Ok(Self {
            stats: paths
                .iter()
                .map(|_| Arc::new(PathStats::default()))
                .collect(),
            emulation: paths.iter().map(|_| None).collect(),
            mirror,
            logical_len,
            health,
            check: None,
            deadline: Some(DEFAULT_READ_DEADLINE),
            names: paths.to_vec(),
            files,
            map,
        })
    }

    /// Checks every sector read (the query path's reads and `read_exact_at`) with `check`.
    /// Set it before making engines.
    pub fn set_sector_check(&mut self, check: SectorCheck) {
        self.check = Some(check);
    }

    /// Fault injection: `path` fails every read after serving `reads` more.
    pub fn inject_fault(&self, path: usize, reads: u64) {
        let served = self.stats[path].reads.load(Ordering::Relaxed);
        self.health.fail_after[path].store(served + reads, Ordering::Relaxed);
    }

    /// Fault injection: every `n`-th read sent to `path` fails (0 stops it). Unlike a
    /// failed path, these faults are transient: the path is not marked failed when the
    /// volume has no mirror.
    pub fn inject_intermittent_fault(&self, path: usize, n: u64) {
        self.health.fail_every[path].store(n, Ordering::Relaxed);
    }

    /// How long an engine's read may take before it is given up on (`None`: no limit):
    /// on a mirrored volume the read goes to the copy and the path is served from its copy
    /// until the device answers what it was given; otherwise the read fails. Engines made
    /// afterwards use it. It needs timed waits (io_uring); the pread engine blocks in each
    /// read.
    pub fn set_read_deadline(&mut self, deadline: Option<Duration>) {
        self.deadline = deadline;
    }

    /// Fault injection: `path`'s device stops answering (`true`) or answers again.
    pub fn inject_stall(&self, path: usize, stalled: bool) {
        self.health.stall_injected[path].store(stalled, Ordering::Relaxed);
    }

    /// Paths with reads given up on that the device has not answered yet.
    pub fn stalled_paths(&self) -> Vec<usize> {
        (0..self.names.len())
            .filter(|&p| self.health.is_stalled(p))
            .collect()
    }

    /// Reads failed by injection so far.
    pub fn injected_faults(&self) -> u64 {
        self.health.injected.load(Ordering::Relaxed)
    }

    /// Paths that have failed since the volume was opened.
    pub fn failed_paths(&self) -> Vec<usize> {
        (0..self.names.len())
            .filter(|&p| self.health.failed[p].load(Ordering::Relaxed))
            .collect()
    }

    /// Each failed path, with the file and why it failed.
    pub fn lost_paths(&self) -> Vec<(usize, PathBuf, String)> {
        let reasons = self
            .health
            .reasons
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        self.failed_paths()
            .into_iter()
            .map(|p| {
                (
                    p,
                    self.names[p].clone(),
                    reasons[p].clone().unwrap_or_default(),
                )
            })
            .collect()
    }

    /// Emulates slower paths (added latency, IOPS and bandwidth caps) on top of the real
    /// ones: one spec for every path, or one per path. Engines made afterwards use it.
    pub fn set_emulation(&mut self, specs: &[PathEmulation]) -> Result<()> {
        self.emulation = match specs.len() {
            0 => self.names.iter().map(|_| None).collect(),
            1 => self
                .names
                .iter()
                .map(|_| Some(Arc::new(EmulatedPath::new(specs[0]))))
                .collect(),
            n if n == self.names.len() => specs
                .iter()
                .map(|s| Some(Arc::new(EmulatedPath::new(*s))))
                .collect(),
            n => {
                return Err(IoError::Usage(format!(
                    "{n} path emulations given for {} paths: give one for all, or one per path",
                    self.names.len()
                )))
            }
        };
        Ok(())
    }

    /// True when every path that is there bypasses the page cache.
    pub fn direct(&self) -> bool {
        self.files.iter().flatten().all(|f| f.direct)
    }

    /// Reads one piece from one file synchronously and checks its sectors.
    fn read_piece(&self, path: usize, physical: u64, buf: &mut [u8], logical: u64) -> Result<()> {
        let name = &self.names[path];
        let file = self.files[path]
            .as_ref()
            .ok_or_else(|| IoError::Usage(format!("{}: path lost at open", name.display())))?;
        file.file
            .read_exact_at(buf, physical)
            .map_err(|source| IoError::Os {
                path: name.display().to_string(),
                source,
            })?;
        match first_bad(self.check, buf, logical) {
            Some(bad) => Err(IoError::Corrupt {
                path: name.display().to_string(),
                offset: physical + (bad * SECTOR) as u64,
            }),
            None => Ok(()),
        }
    }

    /// Reads a logical range synchronously (for open-time loading, not the query path),
    /// checking sectors and falling back to the mirror copy of a piece that fails.
    pub fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        for piece in self.map.pieces(offset, buf.len()) {
            let dst = &mut buf[piece.at..piece.at + piece.len];
            let logical = offset + piece.at as u64;
            let primary = if self.health.failed[piece.path].load(Ordering::Relaxed) {
                Err(IoError::Usage(format!(
                    "{}: path failed",
                    self.names[piece.path].display()
                )))
            } else {
                self.read_piece(piece.path, piece.physical, dst, logical)
            };
            let Err(err) = primary else { continue };
            if !self.mirror {
                return Err(err);
            }
            if !matches!(err, IoError::Corrupt { .. }) {
                self.health.fail(piece.path, || err.to_string());
            }
            self.stats[piece.path]
                .failovers
                .fetch_add(1, Ordering::Relaxed);
            let (q, physical) =
                mirror_target(&self.map, self.logical_len, piece.path, piece.physical);
            self.read_piece(q, physical, dst, logical)
                .map_err(|copy| IoError::Usage(format!("{err}; its mirror copy: {copy}")))?;
        }
        Ok(())
    }

    /// An engine for one thread: `depth` logical reads of up to `slot_bytes`, and on each
    /// path at most `path_depth` reads in flight (further pieces wait in a queue).
    pub fn engine(
        &self,
        choice: EngineChoice,
        depth: usize,
        slot_bytes: usize,
        path_depth: usize,
    ) -> Result<VolumeEngine> {
        if path_depth == 0 {
            return Err(IoError::Usage(
                "the per-path queue depth must be at least 1".into(),
            ));
        }
        let paths = self
            .files
            .iter()
            .map(|f| {
                f.as_ref()
                    .map(|f| open_engine(f.clone(), choice, path_depth, slot_bytes))
                    .transpose()
            })
            .collect::<Result<Vec<_>>>()?;
        let unused = Piece {
            path: 0,
            physical: 0,
            at: 0,
            len: 0,
        };
        Ok(VolumeEngine {
            map: self.map,
            mirror: self.mirror,
            logical_len: self.logical_len,
            health: self.health.clone(),
            check: self.check,
            names: self.names.iter().map(|p| p.display().to_string()).collect(),
            stats: self.stats.clone(),
            emulation: self.emulation.clone(),
            release_at: (0..paths.len())
                .map(|_| vec![Instant::now(); path_depth])
                .collect(),
            held: Vec::new(),
            stuck: Vec::new(),
            deadline: self.deadline,
            abandoned_on_device: vec![0; paths.len()],
            next_check: Instant::now(),
            started: (0..paths.len())
                .map(|_| {
                    vec![
                        Sent {
                            at: Instant::now(),
                            logical: 0,
                            piece: unused,
                            is_copy: false,
                            active: false,
                            abandoned: false,
                        };
                        path_depth
                    ]
                })
                .collect(),
            waiting: paths.iter().map(|_| VecDeque::new()).collect(),
            paths,
            slots: Slots::new(depth, slot_bytes),
            offsets: vec![0; depth],
            outstanding: vec![0; depth],
            failure: (0..depth).map(|_| None).collect(),
            in_flight: 0,
            max_in_flight: 0,
            ready: Vec::new(),
            scratch: Vec::new(),
        })
    }
}

/// A piece on a path's device, in the path engine's slot.
#[derive(Clone, Copy)]
struct Sent {
    at: Instant,
    /// The logical read (slot) it is part of.
    logical: usize,
    piece: Piece,
    is_copy: bool,
    /// The slot's read is on the device (or held by emulation) and not yet landed.
    active: bool,
    /// Given up on after the deadline: when it lands, it is dropped.
    abandoned: bool,
}

/// Reads from a striped volume: splits each logical read into per-path pieces, sends them
/// to that path's engine within its queue-depth cap, and reassembles them.
///
/// Every piece of a logical read ends in exactly one of three ways: it lands (and passes
/// the sector check), it is sent again to its mirror copy, or it fails its logical read.
/// A logical read is reported once all its pieces have ended, so `complete` always makes
/// progress: no failure, on any path, leaves a read that never finishes.
pub struct VolumeEngine {
    map: StripeMap,
    mirror: bool,
    logical_len: u64,
    health: Arc<Health>,
    check: Option<SectorCheck>,
    names: Vec<String>,
    stats: Vec<Arc<PathStats>>,
    emulation: Vec<Option<Arc<EmulatedPath>>>,
    /// Per path, per inner slot: when an emulated path would have finished the piece.
    release_at: Vec<Vec<Instant>>,
    /// Pieces the device has finished but their emulated path has not: (path, read).
    /// They keep their path slot, so the queue-depth cap also bounds emulated queueing.
    held: Vec<(usize, ReadDone)>,
    /// Pieces the device finished on a path whose stall is injected: they keep their path
    /// slot and land once the stall is cleared, as a real stalled device's would.
    stuck: Vec<(usize, ReadDone)>,
    /// Each path's engine; `None` for a path lost at open.
    paths: Vec<Option<Box<dyn ReadEngine>>>,
    /// Per path, per inner slot: the piece sent there.
    started: Vec<Vec<Sent>>,
    /// Per path: pieces (logical slot, piece, is a mirror copy, when queued) waiting for
    /// room on the path.
    waiting: Vec<VecDeque<(usize, Piece, bool, Instant)>>,
    /// How long a piece may wait and be on the device before it is given up on.
    deadline: Option<Duration>,
    /// Per path: this engine's reads given up on that are still on the device (counted in
    /// its engine's in-flight; those held by emulation or stuck have landed there).
    abandoned_on_device: Vec<usize>,
    /// No piece passes the deadline before this (the earliest deadline at the last scan;
    /// pieces sent since have later ones), so most calls skip the scan.
    next_check: Instant,
    slots: Slots,
    /// Per logical slot: the logical offset read (to check sectors by their number).
    offsets: Vec<u64>,
    /// Per logical slot: pieces not yet ended.
    outstanding: Vec<usize>,
    failure: Vec<Option<IoError>>,
    in_flight: usize,
    max_in_flight: usize,
    ready: Vec<ReadDone>,
    scratch: Vec<ReadDone>,
}

impl VolumeEngine {
    fn path_free_slots(&self, path: usize) -> usize {
        self.paths[path].as_ref().map_or(0, |e| e.free_slots())
    }

    fn path_in_flight(&self, path: usize) -> usize {
        self.paths[path].as_ref().map_or(0, |e| e.in_flight())
    }

    /// Sends waiting pieces to `path` while it is under its cap.
    fn pump(&mut self, path: usize) {
        while self.path_free_slots(path) > 0 {
            let Some((slot, piece, is_copy, _)) = self.waiting[path].pop_front() else {
                break;
            };
            let served = self.stats[path].reads.load(Ordering::Relaxed);
            if self.health.injected(path, served) {
                let err = IoError::Usage(format!(
                    "{}: read failed (injected fault)",
                    self.names[path]
                ));
                self.piece_failed(path, slot, piece, is_copy, err, true);
                continue;
            }
            let tag = (slot as u64) << 32 | piece.at as u64;
            let engine = self.paths[path].as_mut().expect("a path with free slots");
            match engine.submit(piece.physical, piece.len, tag) {
                Ok(inner) => {
                    self.started[path][inner] = Sent {
                        at: Instant::now(),
                        logical: slot,
                        piece,
                        is_copy,
                        active: true,
                        abandoned: false,
                    };
                    if let Some(em) = &self.emulation[path] {
                        self.release_at[path][inner] = em.schedule(piece.len);
                    }
                    self.stats[path].started(piece.len);
                }
                Err(e) => self.piece_failed(path, slot, piece, is_copy, e, true),
            }
        }
    }

    /// Queues a piece on the path that should serve it: its own, or its mirror once the
    /// path has failed.
    fn enqueue(&mut self, slot: usize, piece: Piece) {
        if self.health.failed[piece.path].load(Ordering::Relaxed)
            || self.paths[piece.path].is_none()
            || (self.mirror && self.health.is_stalled(piece.path))
        {
            if self.mirror {
                return self.enqueue_copy(slot, piece);
            }
            let err = IoError::Usage(format!("{}: path has failed", self.names[piece.path]));
            return self.piece_failed(piece.path, slot, piece, true, err, false);
        }
        if self.path_free_slots(piece.path) == 0 {
            self.stats[piece.path]
                .waited
                .fetch_add(1, Ordering::Relaxed);
        }
        self.waiting[piece.path].push_back((slot, piece, false, Instant::now()));
        self.pump(piece.path)
    }

    fn enqueue_copy(&mut self, slot: usize, piece: Piece) {
        let (q, physical) = mirror_target(&self.map, self.logical_len, piece.path, piece.physical);
        let copy = Piece {
            path: q,
            physical,
            ..piece
        };
        if self.paths[q].is_none()
            || self.health.failed[q].load(Ordering::Relaxed)
            || self.health.is_stalled(q)
        {
            let err = IoError::Usage(format!(
                "no readable copy: {} has failed, and its mirror {} has failed or stalled",
                self.names[piece.path], self.names[q]
            ));
            return self.piece_failed(q, slot, copy, true, err, false);
        }
        self.waiting[q].push_back((slot, copy, true, Instant::now()));
        self.pump(q)
    }

    /// A piece failed on `path` (`piece` is where it was read from). A primary piece of a
    /// mirrored volume goes to its copy, and if `path_fault` (the read itself failed, not
    /// just one sector's check) the path is marked failed; otherwise the logical read fails.
    fn piece_failed(
        &mut self,
        path: usize,
        slot: usize,
        piece: Piece,
        is_copy: bool,
        err: IoError,
        path_fault: bool,
    ) {
        if self.mirror && !is_copy {
            if path_fault && self.health.fail(path, || err.to_string()) {
                log::warn!(
                    "path {path} failed, serving it from its mirror copy from now on: {err}"
                );
            }
            self.stats[path].failovers.fetch_add(1, Ordering::Relaxed);
            return self.enqueue_copy(slot, piece);
        }
        if self.failure[slot].is_none() {
            self.failure[slot] = Some(err);
        }
        self.piece_done(slot);
    }

    fn piece_done(&mut self, slot: usize) {
        self.outstanding[slot] -= 1;
        if self.outstanding[slot] == 0 {
            self.in_flight -= 1;
            let result = match self.failure[slot].take() {
                Some(e) => Err(e),
                None => Ok(()),
            };
            self.slots.report(slot, result, &mut self.ready);
        }
    }

    /// Takes in finished pieces of `path` from `self.scratch`; pieces whose emulated path
    /// is not done yet are held.
    fn take_finished(&mut self, path: usize) {
        let mut done = std::mem::take(&mut self.scratch);
        let now = Instant::now();
        for d in done.drain(..) {
            if self.started[path][d.slot].abandoned {
                self.abandoned_on_device[path] -= 1;
            }
            if self.health.stall_injected[path].load(Ordering::Relaxed) {
                self.stuck.push((path, d));
            } else if self.emulation[path].is_some() && self.release_at[path][d.slot] > now {
                self.held.push((path, d));
            } else {
                self.finish_piece(path, d);
            }
        }
        self.scratch = done;
        self.pump(path)
    }

    /// Finishes held pieces whose time has come.
    fn release_held(&mut self) {
        let now = Instant::now();
        let mut i = 0;
        while i < self.held.len() {
            let (path, slot) = (self.held[i].0, self.held[i].1.slot);
            if self.release_at[path][slot] <= now {
                let (path, d) = self.held.swap_remove(i);
                self.finish_piece(path, d);
                self.pump(path);
            } else {
                i += 1;
            }
        }
    }

    fn finish_piece(&mut self, path: usize, d: ReadDone) {
        let slot = (d.tag >> 32) as usize;
        let sent = &mut self.started[path][d.slot];
        sent.active = false;
        let Sent {
            at: sent,
            piece,
            is_copy,
            abandoned,
            ..
        } = *sent;
        self.stats[path].finished(sent.elapsed().as_secs_f64() * 1e6);
        let engine = self.paths[path]
            .as_mut()
            .expect("a path that served a read");
        if abandoned {
            // Its logical read went on without it; the device has let go of the slot.
            engine.release(d.slot);
            self.pump(path);
            if self.health.stalled[path].fetch_sub(1, Ordering::Relaxed) == 1 {
                log::warn!(
                    "path {path} ({}) answered again after {:.1} s",
                    self.names[path],
                    sent.elapsed().as_secs_f64()
                );
            }
            return;
        }
        let outcome = match d.result {
            Ok(()) => {
                let src = &engine.buffer(d.slot)[..piece.len];
                let logical = self.offsets[slot] + piece.at as u64;
                match first_bad(self.check, src, logical) {
                    None => {
                        self.slots.bufs[slot].as_mut_slice()[piece.at..piece.at + piece.len]
                            .copy_from_slice(src);
                        Ok(())
                    }
                    Some(i) => Err((
                        IoError::Corrupt {
                            path: self.names[path].clone(),
                            offset: piece.physical + (i * SECTOR) as u64,
                        },
                        false,
                    )),
                }
            }
            Err(e) => Err((e, true)),
        };
        engine.release(d.slot);
        match outcome {
            Ok(()) => self.piece_done(slot),
            Err((e, path_fault)) => {
                // A primary piece is retried at its copy, which `enqueue_copy` finds from
                // the primary's place; a copy that fails ends the logical read.
                let at = if is_copy {
                    piece
                } else {
                    Piece { path, ..piece }
                };
                self.piece_failed(path, slot, at, is_copy, e, path_fault)
            }
        }
    }

    /// Lands the pieces held by an injected stall once it is cleared.
    fn release_stuck(&mut self) {
        let mut i = 0;
        while i < self.stuck.len() {
            let path = self.stuck[i].0;
            if self.health.stall_injected[path].load(Ordering::Relaxed) {
                i += 1;
                continue;
            }
            let (path, d) = self.stuck.swap_remove(i);
            self.finish_piece(path, d);
            self.pump(path);
        }
    }

    /// Gives up on every piece older than the deadline, queued or on the device: a
    /// mirrored volume reads it from its copy (and serves the path from its copies until
    /// the device answers what it was given), otherwise its logical read fails.
    fn expire_overdue(&mut self) {
        let Some(deadline) = self.deadline else {
            return;
        };
        let now = Instant::now();
        if now < self.next_check {
            return;
        }
        for path in 0..self.paths.len() {
            for inner in 0..self.started[path].len() {
                let sent = self.started[path][inner];
                if !sent.active || sent.abandoned || now.duration_since(sent.at) < deadline {
                    continue;
                }
                self.started[path][inner].abandoned = true;
                let landed = self
                    .held
                    .iter()
                    .chain(&self.stuck)
                    .any(|(p, d)| *p == path && d.slot == inner);
                if !landed {
                    self.abandoned_on_device[path] += 1;
                }
                self.stats[path].timeouts.fetch_add(1, Ordering::Relaxed);
                if self.health.stalled[path].fetch_add(1, Ordering::Relaxed) == 0 {
                    log::warn!(
                        "path {path} ({}) has not answered a read in {:.1} s; {}",
                        self.names[path],
                        deadline.as_secs_f64(),
                        if self.mirror {
                            "serving it from its mirror copy until it does"
                        } else {
                            "its reads fail until it answers"
                        }
                    );
                }
                let err = IoError::TimedOut {
                    path: self.names[path].clone(),
                    after: deadline,
                };
                self.piece_failed(path, sent.logical, sent.piece, sent.is_copy, err, false);
            }
            // Queued pieces past the deadline fail (or go to their copy), and on a mirrored
            // volume so do the primaries queued on a path that has stalled since.
            let reroute = self.mirror && self.health.is_stalled(path);
            for (slot, piece, is_copy, queued) in std::mem::take(&mut self.waiting[path]) {
                let waited = now.duration_since(queued);
                if waited < deadline && (!reroute || is_copy) {
                    self.waiting[path].push_back((slot, piece, is_copy, queued));
                    continue;
                }
                let err = IoError::TimedOut {
                    path: self.names[path].clone(),
                    after: waited,
                };
                self.piece_failed(path, slot, piece, is_copy, err, false);
            }
        }
        self.plan_next_check(deadline, now);
    }

    /// Rescans for the earliest deadline of the pieces left (queued or on a device); with
    /// none, nothing can pass its deadline sooner than a full deadline from now.
    fn plan_next_check(&mut self, deadline: Duration, now: Instant) {
        let sent = self
            .started
            .iter()
            .flatten()
            .filter(|s| s.active && !s.abandoned)
            .map(|s| s.at);
        let queued = self.waiting.iter().flatten().map(|w| w.3);
        self.next_check = sent.chain(queued).min().unwrap_or(now) + deadline;
    }

    /// How long until a piece may pass the deadline (zero if one may have).
    fn next_overdue(&self) -> Option<Duration> {
        self.deadline?;
        Some(self.next_check.saturating_duration_since(Instant::now()))
    }

    /// Reads on `path`'s device that have not been given up on.
    fn live_on_device(&self, path: usize) -> usize {
        self.path_in_flight(path)
            .saturating_sub(self.abandoned_on_device[path])
    }

    /// Polls every path that is there, landing what finished.
    fn poll_paths(&mut self) -> Result<()> {
        for p in 0..self.paths.len() {
            if let Some(engine) = self.paths[p].as_mut() {
                engine.poll(&mut self.scratch)?;
                self.take_finished(p);
            }
        }
        Ok(())
    }
}

impl ReadEngine for VolumeEngine {
    fn kind(&self) -> EngineKind {
        self.paths
            .iter()
            .flatten()
            .map(|e| e.kind())
            .next()
            .unwrap_or(EngineKind::Pread)
    }
    fn depth(&self) -> usize {
        self.slots.bufs.len()
    }
    fn slot_bytes(&self) -> usize {
        self.slots.bufs[0].len()
    }
    /// Reads not yet handed to the caller: on a device, queued, or finished and waiting
    /// to be collected (so an engine with any of them is not taken for idle).
    fn in_flight(&self) -> usize {
        self.in_flight + self.ready.len()
    }
    fn free_slots(&self) -> usize {
        self.slots.free.len()
    }

    fn submit(&mut self, offset: u64, len: usize, tag: u64) -> Result<usize> {
        if offset
            .checked_add(len as u64)
            .is_none_or(|end| end > self.logical_len)
        {
            // Past the end is the caller's error, not the path's: it must not fail a path.
            return Err(IoError::Usage(format!(
                "volume: read of {len} bytes at offset {offset} is past its end ({} bytes)",
                self.logical_len
            )));
        }
        let slot = self.slots.take(offset, len, tag, &"volume")?;
        self.offsets[slot] = offset;
        self.outstanding[slot] = self.map.piece_count(offset, len);
        self.in_flight += 1;
        self.max_in_flight = self.max_in_flight.max(self.in_flight);
        let map = self.map;
        for piece in map.iter_pieces(offset, len) {
            self.enqueue(slot, piece);
        }
        Ok(slot)
    }

    fn complete(&mut self, min: usize, out: &mut Vec<ReadDone>) -> Result<()> {
        let want = min.min(self.in_flight + self.ready.len());
        loop {
            // Send what is queued and take what has finished, on every path, without waiting.
            self.poll_paths()?;
            self.release_held();
            self.release_stuck();
            self.expire_overdue();
            if self.ready.len() >= want {
                // Pieces pumped while landing are sent now, not at the next call.
                self.poll_paths()?;
                out.append(&mut self.ready);
                return Ok(());
            }
            let overdue_in = self.next_overdue();
            let emulated = self
                .held
                .iter()
                .map(|(p, d)| self.release_at[*p][d.slot])
                .min()
                .map(|next| next.saturating_duration_since(Instant::now()));
            if emulated.is_some() || !self.stuck.is_empty() {
                // An emulated completion or a deadline is due; sleep towards it in short
                // steps so real completions on other paths are not left waiting.
                let wait = [emulated, overdue_in]
                    .into_iter()
                    .flatten()
                    .min()
                    .unwrap_or(Duration::MAX)
                    .min(Duration::from_micros(200));
                std::thread::sleep(wait);
                continue;
            }
            // Wait on the path with most reads that count; the others' completions are
            // taken on the next pass.
            let busiest = (0..self.paths.len())
                .max_by_key(|&p| (self.live_on_device(p), self.path_in_flight(p)))
                .unwrap_or(0);
            if self.path_in_flight(busiest) == 0 {
                // Nothing is on any device and nothing is held, yet reads are missing: by
                // the piece invariant this cannot happen; fail loudly rather than spin.
                return Err(IoError::Usage(format!(
                    "volume: {} reads outstanding with none on any path",
                    want - self.ready.len()
                )));
            }
            let short = want - self.ready.len();
            let wait_for = if self.paths.len() == 1 { short } else { 1 };
            let engine = self.paths[busiest].as_mut().expect("busiest path is there");
            match overdue_in {
                // A little past the deadline, so the piece is overdue when looked at.
                Some(left) => engine.complete_within(
                    wait_for,
                    left + Duration::from_millis(1),
                    &mut self.scratch,
                )?,
                None => engine.complete(wait_for, &mut self.scratch)?,
            }
            self.take_finished(busiest);
        }
    }

    fn poll(&mut self, out: &mut Vec<ReadDone>) -> Result<()> {
        self.poll_paths()?;
        self.release_held();
        self.release_stuck();
        self.expire_overdue();
        out.append(&mut self.ready);
        Ok(())
    }

    fn buffer(&self, slot: usize) -> &[u8] {
        self.slots.buffer(slot)
    }
    fn release(&mut self, slot: usize) {
        self.slots.release(slot)
    }
    fn stats(&self) -> EngineStats {
        EngineStats {
            reads: self.slots.stats.reads,
            bytes: self.slots.stats.bytes,
            max_in_flight: self.max_in_flight,
        }
    }
}

impl Drop for VolumeEngine {
    /// Reads given up on that never landed leave with this engine (its path engines leak
    /// their buffers if the device still holds them): the path is tried again.
    fn drop(&mut self) {
        for (path, sent) in self.started.iter().enumerate() {
            let n = sent.iter().filter(|s| s.active && s.abandoned).count() as u64;
            if n > 0 {
                self.health.stalled[path].fetch_sub(n, Ordering::Relaxed);
            }
        }
    }
}
