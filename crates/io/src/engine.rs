use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::{DataFile, IoError, PreadEngine, Result, UringEngine};

/// Which engine serves reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EngineKind {
    Uring,
    Pread,
}

impl std::fmt::Display for EngineKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            EngineKind::Uring => "io_uring",
            EngineKind::Pread => "pread",
        })
    }
}

/// What the caller asks for: a specific engine, or the best that works here.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum EngineChoice {
    #[default]
    Auto,
    Uring,
    Pread,
}

impl std::str::FromStr for EngineChoice {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "auto" => Ok(Self::Auto),
            "uring" | "io_uring" => Ok(Self::Uring),
            "pread" => Ok(Self::Pread),
            _ => Err(format!(
                "unknown I/O engine {s:?}: expected auto, uring or pread"
            )),
        }
    }
}

/// One finished read.
#[derive(Debug)]
pub struct ReadDone {
    pub slot: usize,
    pub tag: u64,
    pub result: Result<()>,
}

/// Counters of one engine.
#[derive(Clone, Copy, Debug, Default)]
pub struct EngineStats {
    pub reads: u64,
    pub bytes: u64,
    /// Most reads that were in flight at once.
    pub max_in_flight: usize,
}

/// An engine that keeps several sector reads in flight. It owns its buffers ("slots"):
/// `submit` takes a free slot, the read lands in it, and the caller `release`s it after
/// looking at `buffer(slot)`.
pub trait ReadEngine: Send {
    fn kind(&self) -> EngineKind;
    /// Number of slots, i.e. the most reads that can be in flight.
    fn depth(&self) -> usize;
    fn slot_bytes(&self) -> usize;
    fn in_flight(&self) -> usize;
    fn free_slots(&self) -> usize;
    /// Queues a read of `len` bytes at `offset` (both sector multiples, `len <= slot_bytes`).
    /// Returns the slot the data will land in. Fails when no slot is free.
    fn submit(&mut self, offset: u64, len: usize, tag: u64) -> Result<usize>;
    /// Sends queued reads to the device and waits until at least `min` reads have finished
    /// (fewer if fewer are in flight); appends every finished read to `out`.
    fn complete(&mut self, min: usize, out: &mut Vec<ReadDone>) -> Result<()>;
    /// Sends queued reads and collects finished ones without waiting; costs no system call
    /// when nothing is queued.
    fn poll(&mut self, out: &mut Vec<ReadDone>) -> Result<()> {
        self.complete(0, out)
    }
    /// `complete`, but returns once `timeout` has passed even if fewer than `min` reads
    /// finished: a device that stopped answering must not hold the caller forever. An
    /// engine that cannot bound its wait (pread blocks in each read) waits as `complete`.
    fn complete_within(
        &mut self,
        min: usize,
        timeout: std::time::Duration,
        out: &mut Vec<ReadDone>,
    ) -> Result<()> {
        let _ = timeout;
        self.complete(min, out)
    }
    fn buffer(&self, slot: usize) -> &[u8];
    fn release(&mut self, slot: usize);
    fn stats(&self) -> EngineStats;
}

static URING_FALLBACK_SAID: AtomicBool = AtomicBool::new(false);

/// Whether this process may set up an io_uring (kernels and sandboxes can forbid it).
pub fn uring_available() -> bool {
    io_uring::IoUring::new(8).is_ok()
}

/// Opens an engine over `file` with `depth` slots of `slot_bytes` each.
/// `Auto` prefers io_uring and falls back to pread, logging the reason once per process.
pub fn open_engine(
    file: Arc<DataFile>,
    choice: EngineChoice,
    depth: usize,
    slot_bytes: usize,
) -> Result<Box<dyn ReadEngine>> {
    if depth == 0 || slot_bytes == 0 || !slot_bytes.is_multiple_of(crate::SECTOR) {
        return Err(IoError::Usage(format!(
            "engine needs depth > 0 and slot size a multiple of {} (got depth {depth}, slot {slot_bytes})",
            crate::SECTOR
        )));
    }
    match choice {
        EngineChoice::Pread => Ok(Box::new(PreadEngine::new(file, depth, slot_bytes))),
        EngineChoice::Uring => Ok(Box::new(UringEngine::new(file, depth, slot_bytes)?)),
        EngineChoice::Auto => match UringEngine::new(file.clone(), depth, slot_bytes) {
            Ok(e) => Ok(Box::new(e)),
            Err(err) => {
                if !URING_FALLBACK_SAID.swap(true, Ordering::Relaxed) {
                    log::warn!("io_uring is unavailable ({err}); using the pread engine");
                }
                Ok(Box::new(PreadEngine::new(file, depth, slot_bytes)))
            }
        },
    }
}

/// Slot bookkeeping shared by both engines.
pub(crate) struct Slots {
    pub bufs: Vec<crate::AlignedBuf>,
    pub free: Vec<usize>,
    pub tags: Vec<u64>,
    /// Per slot: its read has been reported finished (so the device no longer writes it)
    /// and it is not yet released. Only such a slot may be looked at or released.
    pub finished: Vec<bool>,
    pub stats: EngineStats,
}

impl Slots {
    pub fn new(depth: usize, slot_bytes: usize) -> Self {
        Self {
            bufs: (0..depth)
                .map(|_| crate::AlignedBuf::new(slot_bytes))
                .collect(),
            free: (0..depth).rev().collect(),
            tags: vec![0; depth],
            finished: vec![false; depth],
            stats: EngineStats::default(),
        }
    }

    /// Takes a free slot for a read of `len` bytes at `offset`, checking the arguments.
    /// `path` names the file in errors; it is only formatted when there is one.
    pub fn take(
        &mut self,
        offset: u64,
        len: usize,
        tag: u64,
        path: &dyn std::fmt::Display,
    ) -> Result<usize> {
        let slot_bytes = self.bufs[0].len();
        if len == 0
            || len > slot_bytes
            || !len.is_multiple_of(crate::SECTOR)
            || !offset.is_multiple_of(crate::SECTOR as u64)
        {
            return Err(IoError::Usage(format!(
                "{path}: read of {len} bytes at offset {offset} is not sector-aligned or exceeds the {slot_bytes}-byte slot"
            )));
        }
        let slot = self.free.pop().ok_or_else(|| {
            IoError::Usage(format!(
                "{path}: all {} read slots are busy",
                self.bufs.len()
            ))
        })?;
        self.tags[slot] = tag;
        self.stats.reads += 1;
        self.stats.bytes += len as u64;
        Ok(slot)
    }

    /// Frees a slot taken for a read that was never sent to the device.
    pub fn unsent(&mut self, slot: usize) {
        self.finished[slot] = false;
        self.free.push(slot);
    }

    /// Marks `slot`'s read finished and reports it, with its tag, in `out`: every engine
    /// hands its reads back this one way.
    pub fn report(&mut self, slot: usize, result: Result<()>, out: &mut Vec<ReadDone>) {
        self.finished[slot] = true;
        out.push(ReadDone {
            slot,
            tag: self.tags[slot],
            result,
        });
    }

    /// The bytes of a slot whose read was reported finished. Looking at a slot whose read
    /// may still be landing would race the device, so it is refused loudly (a caller bug).
    pub fn buffer(&self, slot: usize) -> &[u8] {
        assert!(
            self.finished[slot],
            "slot {slot} looked at before its read was reported finished"
        );
        self.bufs[slot].as_slice()
    }

    /// Frees a slot whose read was reported finished. Releasing one still in flight would
    /// let the next read reuse a buffer the device may still write; it is ignored.
    pub fn release(&mut self, slot: usize) {
        if !self.finished.get(slot).copied().unwrap_or(false) {
            debug_assert!(
                false,
                "slot {slot} released before its read was reported finished"
            );
            log::error!("slot {slot} released while its read was not reported finished; ignored");
            return;
        }
        self.finished[slot] = false;
        self.free.push(slot);
    }
}
