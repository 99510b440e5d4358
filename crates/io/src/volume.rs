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
    PathEmulation, PathStats, ReadDone, ReadEngine, Result,
};

/// A logical file striped over several storage paths (files on separate devices or
/// NVMe-oF namespaces). One path is a plain file.
pub struct Volume {
    pub files: Vec<Arc<DataFile>>,
    pub map: StripeMap,
    pub stats: Vec<Arc<PathStats>>,
    emulation: Vec<Option<Arc<EmulatedPath>>>,
    /// Each path's file also holds a copy of the previous path's stripes.
    pub mirror: bool,
    logical_len: u64,
    health: Arc<Health>,
}

/// Which paths have failed, shared by every engine of a volume, and injected faults.
struct Health {
    failed: Vec<AtomicBool>,
    /// A path fails once it has served this many reads (fault injection; u64::MAX: never).
    fail_after: Vec<AtomicU64>,
}

/// Where the mirror copy of the bytes at `physical` on `path` lives: on the next path,
/// after that path's own stripes.
fn mirror_target(map: &StripeMap, logical_len: u64, path: usize, physical: u64) -> (usize, u64) {
    let q = (path + 1) % map.paths;
    (q, map.path_len(q, logical_len) + physical)
}

impl Volume {
    /// Opens the path files of a volume whose logical size is `logical_len`, checking that
    /// each file has exactly the bytes the stripe map puts on it.
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
        let mut files = Vec::with_capacity(paths.len());
        for (i, p) in paths.iter().enumerate() {
            let f = open_for_reading(p, direct)?;
            let mirrored = if mirror {
                map.path_len((i + paths.len() - 1) % paths.len(), logical_len)
            } else {
                0
            };
            let want = map.path_len(i, logical_len) + mirrored;
            if f.len != want {
                return Err(IoError::Usage(format!(
                    "{}: size is {} bytes, the index expects {want} on this path (truncated or from another build?)",
                    p.display(),
                    f.len
                )));
            }
            files.push(Arc::new(f));
        }
        Ok(Self {
            stats: paths
                .iter()
                .map(|_| Arc::new(PathStats::default()))
                .collect(),
            emulation: paths.iter().map(|_| None).collect(),
            mirror,
            logical_len,
            health: Arc::new(Health {
                failed: paths.iter().map(|_| AtomicBool::new(false)).collect(),
                fail_after: paths.iter().map(|_| AtomicU64::new(u64::MAX)).collect(),
            }),
            files,
            map,
        })
    }

    /// Fault injection: `path` fails every read after serving `reads` more.
    pub fn inject_fault(&self, path: usize, reads: u64) {
        let served = self.stats[path].reads.load(Ordering::Relaxed);
        self.health.fail_after[path].store(served + reads, Ordering::Relaxed);
    }

    /// Paths that have failed since the volume was opened.
    pub fn failed_paths(&self) -> Vec<usize> {
        (0..self.files.len())
            .filter(|&p| self.health.failed[p].load(Ordering::Relaxed))
            .collect()
    }

    /// Emulates slower paths (added latency, IOPS and bandwidth caps) on top of the real
    /// ones: one spec for every path, or one per path. Engines made afterwards use it.
    pub fn set_emulation(&mut self, specs: &[PathEmulation]) -> Result<()> {
        self.emulation = match specs.len() {
            0 => self.files.iter().map(|_| None).collect(),
            1 => self
                .files
                .iter()
                .map(|_| Some(Arc::new(EmulatedPath::new(specs[0]))))
                .collect(),
            n if n == self.files.len() => specs
                .iter()
                .map(|s| Some(Arc::new(EmulatedPath::new(*s))))
                .collect(),
            n => {
                return Err(IoError::Usage(format!(
                    "{n} path emulations given for {} paths: give one for all, or one per path",
                    self.files.len()
                )))
            }
        };
        Ok(())
    }

    /// True when every path bypasses the page cache.
    pub fn direct(&self) -> bool {
        self.files.iter().all(|f| f.direct)
    }

    /// Reads a logical range synchronously (for open-time loading, not the query path).
    pub fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        for piece in self.map.pieces(offset, buf.len()) {
            let file = &self.files[piece.path];
            file.file
                .read_exact_at(&mut buf[piece.at..piece.at + piece.len], piece.physical)
                .map_err(|source| IoError::Os {
                    path: file.path.display().to_string(),
                    source,
                })?;
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
            .map(|f| open_engine(f.clone(), choice, path_depth, slot_bytes))
            .collect::<Result<Vec<_>>>()?;
        Ok(VolumeEngine {
            map: self.map,
            mirror: self.mirror,
            logical_len: self.logical_len,
            health: self.health.clone(),
            names: self
                .files
                .iter()
                .map(|f| f.path.display().to_string())
                .collect(),
            stats: self.stats.clone(),
            emulation: self.emulation.clone(),
            release_at: paths
                .iter()
                .map(|e| vec![Instant::now(); e.depth()])
                .collect(),
            held: Vec::new(),
            started: paths
                .iter()
                .map(|e| {
                    let unused = Piece {
                        path: 0,
                        physical: 0,
                        at: 0,
                        len: 0,
                    };
                    vec![(Instant::now(), unused, false); e.depth()]
                })
                .collect(),
            waiting: paths.iter().map(|_| VecDeque::new()).collect(),
            paths,
            slots: Slots::new(depth, slot_bytes),
            outstanding: vec![0; depth],
            failure: (0..depth).map(|_| None).collect(),
            in_flight: 0,
            max_in_flight: 0,
            ready: Vec::new(),
            scratch: Vec::new(),
        })
    }
}

/// Reads from a striped volume: splits each logical read into per-path pieces, sends them
/// to that path's engine within its queue-depth cap, and reassembles them.
pub struct VolumeEngine {
    map: StripeMap,
    mirror: bool,
    logical_len: u64,
    health: Arc<Health>,
    names: Vec<String>,
    stats: Vec<Arc<PathStats>>,
    emulation: Vec<Option<Arc<EmulatedPath>>>,
    /// Per path, per inner slot: when an emulated path would have finished the piece.
    release_at: Vec<Vec<Instant>>,
    /// Pieces the device has finished but their emulated path has not: (path, read).
    /// They keep their path slot, so the queue-depth cap also bounds emulated queueing.
    held: Vec<(usize, ReadDone)>,
    paths: Vec<Box<dyn ReadEngine>>,
    /// Per path, per inner slot: when the piece there was sent, and the piece.
    started: Vec<Vec<(Instant, Piece, bool)>>,
    /// Per path: pieces (logical slot, piece, is a mirror copy) waiting for room on the path.
    waiting: Vec<VecDeque<(usize, Piece, bool)>>,
    slots: Slots,
    /// Per logical slot: pieces not yet landed.
    outstanding: Vec<usize>,
    failure: Vec<Option<IoError>>,
    in_flight: usize,
    max_in_flight: usize,
    ready: Vec<ReadDone>,
    scratch: Vec<ReadDone>,
}

impl VolumeEngine {
    /// Sends waiting pieces to `path` while it is under its cap.
    fn pump(&mut self, path: usize) -> Result<()> {
        while self.paths[path].free_slots() > 0 {
            let Some((slot, piece, is_copy)) = self.waiting[path].pop_front() else {
                break;
            };
            let served = self.stats[path].reads.load(Ordering::Relaxed);
            if served >= self.health.fail_after[path].load(Ordering::Relaxed) {
                let err = IoError::Usage(format!(
                    "{}: read failed (injected fault)",
                    self.names[path]
                ));
                self.piece_failed(path, slot, piece, is_copy, err)?;
                continue;
            }
            let inner = self.paths[path].submit(
                piece.physical,
                piece.len,
                (slot as u64) << 32 | piece.at as u64,
            )?;
            self.started[path][inner] = (Instant::now(), piece, is_copy);
            if let Some(em) = &self.emulation[path] {
                self.release_at[path][inner] = em.schedule(piece.len);
            }
            self.stats[path].started(piece.len);
        }
        Ok(())
    }

    /// Queues a piece on the path that should serve it: its own, or its mirror once the
    /// path has failed.
    fn enqueue(&mut self, slot: usize, piece: Piece) -> Result<()> {
        if self.mirror && self.health.failed[piece.path].load(Ordering::Relaxed) {
            return self.enqueue_copy(slot, piece);
        }
        if self.paths[piece.path].free_slots() == 0 {
            self.stats[piece.path]
                .waited
                .fetch_add(1, Ordering::Relaxed);
        }
        self.waiting[piece.path].push_back((slot, piece, false));
        self.pump(piece.path)
    }

    fn enqueue_copy(&mut self, slot: usize, piece: Piece) -> Result<()> {
        let (q, physical) = mirror_target(&self.map, self.logical_len, piece.path, piece.physical);
        self.waiting[q].push_back((
            slot,
            Piece {
                path: q,
                physical,
                ..piece
            },
            true,
        ));
        self.pump(q)
    }

    /// A piece failed on `path`: with a mirror, the path is marked failed and the piece
    /// goes to the copy; otherwise (or if the copy failed too) the logical read fails.
    fn piece_failed(
        &mut self,
        path: usize,
        slot: usize,
        piece: Piece,
        is_copy: bool,
        err: IoError,
    ) -> Result<()> {
        if self.mirror && !is_copy {
            self.health.failed[path].store(true, Ordering::Relaxed);
            self.stats[path].failovers.fetch_add(1, Ordering::Relaxed);
            return self.enqueue_copy(slot, piece);
        }
        if self.failure[slot].is_none() {
            self.failure[slot] = Some(err);
        }
        self.piece_done(slot);
        Ok(())
    }

    fn piece_done(&mut self, slot: usize) {
        self.outstanding[slot] -= 1;
        if self.outstanding[slot] == 0 {
            self.in_flight -= 1;
            let result = match self.failure[slot].take() {
                Some(e) => Err(e),
                None => Ok(()),
            };
            self.ready.push(ReadDone {
                slot,
                tag: self.slots.tags[slot],
                result,
            });
        }
    }

    /// Takes in finished pieces of `path` from `self.scratch`; pieces whose emulated path
    /// is not done yet are held.
    fn land(&mut self, path: usize) -> Result<()> {
        let mut done = std::mem::take(&mut self.scratch);
        let now = Instant::now();
        for d in done.drain(..) {
            if self.emulation[path].is_some() && self.release_at[path][d.slot] > now {
                self.held.push((path, d));
            } else {
                self.finish_piece(path, d)?;
            }
        }
        self.scratch = done;
        self.pump(path)
    }

    /// Finishes held pieces whose time has come.
    fn release_held(&mut self) -> Result<()> {
        let now = Instant::now();
        let mut i = 0;
        while i < self.held.len() {
            let (path, slot) = (self.held[i].0, self.held[i].1.slot);
            if self.release_at[path][slot] <= now {
                let (path, d) = self.held.swap_remove(i);
                self.finish_piece(path, d)?;
                self.pump(path)?;
            } else {
                i += 1;
            }
        }
        Ok(())
    }

    fn finish_piece(&mut self, path: usize, d: ReadDone) -> Result<()> {
        let slot = (d.tag >> 32) as usize;
        let (sent, piece, is_copy) = self.started[path][d.slot];
        self.stats[path].finished(sent.elapsed().as_secs_f64() * 1e6);
        let outcome = match d.result {
            Ok(()) => {
                let src = &self.paths[path].buffer(d.slot)[..piece.len];
                self.slots.bufs[slot].as_mut_slice()[piece.at..piece.at + piece.len]
                    .copy_from_slice(src);
                Ok(())
            }
            Err(e) => Err(e),
        };
        self.paths[path].release(d.slot);
        match outcome {
            Ok(()) => {
                self.piece_done(slot);
                Ok(())
            }
            Err(e) => {
                // A failed read on the mirror copy names the original primary piece for the retry.
                let original = if is_copy {
                    piece
                } else {
                    Piece { path, ..piece }
                };
                self.piece_failed(path, slot, original, is_copy, e)
            }
        }
    }
}

impl ReadEngine for VolumeEngine {
    fn kind(&self) -> EngineKind {
        self.paths[0].kind()
    }
    fn depth(&self) -> usize {
        self.slots.bufs.len()
    }
    fn slot_bytes(&self) -> usize {
        self.slots.bufs[0].len()
    }
    fn in_flight(&self) -> usize {
        self.in_flight
    }
    fn free_slots(&self) -> usize {
        self.slots.free.len()
    }

    fn submit(&mut self, offset: u64, len: usize, tag: u64) -> Result<usize> {
        let slot = self.slots.take(offset, len, tag, &"volume")?;
        self.outstanding[slot] = self.map.piece_count(offset, len);
        self.in_flight += 1;
        self.max_in_flight = self.max_in_flight.max(self.in_flight);
        let map = self.map;
        for piece in map.iter_pieces(offset, len) {
            self.enqueue(slot, piece)?;
        }
        Ok(slot)
    }

    fn complete(&mut self, min: usize, out: &mut Vec<ReadDone>) -> Result<()> {
        let want = min.min(self.in_flight + self.ready.len());
        loop {
            // Send what is queued and take what has finished, on every path, without waiting.
            for p in 0..self.paths.len() {
                self.paths[p].poll(&mut self.scratch)?;
                self.land(p)?;
            }
            self.release_held()?;
            if self.ready.len() >= want {
                // Pieces pumped while landing are sent now, not at the next call.
                for p in 0..self.paths.len() {
                    self.paths[p].poll(&mut self.scratch)?;
                    self.land(p)?;
                }
                out.append(&mut self.ready);
                return Ok(());
            }
            if let Some(next) = self
                .held
                .iter()
                .map(|(p, d)| self.release_at[*p][d.slot])
                .min()
            {
                // An emulated completion is due; sleep towards it in short steps so real
                // completions on other paths are not left waiting.
                let wait = next
                    .saturating_duration_since(Instant::now())
                    .min(Duration::from_micros(200));
                std::thread::sleep(wait);
                continue;
            }
            // Wait on the busiest path; the others' completions are taken on the next pass.
            let busiest = (0..self.paths.len())
                .max_by_key(|&p| self.paths[p].in_flight())
                .unwrap_or(0);
            let short = want - self.ready.len();
            let wait_for = if self.paths.len() == 1 { short } else { 1 };
            self.paths[busiest].complete(wait_for, &mut self.scratch)?;
            self.land(busiest)?;
        }
    }

    fn poll(&mut self, out: &mut Vec<ReadDone>) -> Result<()> {
        for p in 0..self.paths.len() {
            self.paths[p].poll(&mut self.scratch)?;
            self.land(p)?;
        }
        self.release_held()?;
        out.append(&mut self.ready);
        Ok(())
    }

    fn buffer(&self, slot: usize) -> &[u8] {
        self.slots.bufs[slot].as_slice()
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
