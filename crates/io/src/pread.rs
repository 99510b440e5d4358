use std::os::unix::fs::FileExt;
use std::sync::Arc;

use crate::engine::Slots;
use crate::{DataFile, EngineKind, EngineStats, IoError, ReadDone, ReadEngine, Result};

/// The fallback engine: each queued read is a blocking `pread` when `complete` is called.
/// It has the same interface as io_uring, with one read at a time on the device.
pub struct PreadEngine {
    file: Arc<DataFile>,
    slots: Slots,
    queued: Vec<(usize, u64, usize)>,
}

impl PreadEngine {
    pub fn new(file: Arc<DataFile>, depth: usize, slot_bytes: usize) -> Self {
        Self {
            file,
            slots: Slots::new(depth, slot_bytes),
            queued: Vec::new(),
        }
    }
}

pub(crate) fn read_fully(file: &DataFile, buf: &mut [u8], offset: u64) -> Result<()> {
    let mut done = 0;
    while done < buf.len() {
        match file.file.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => {
                return Err(IoError::UnexpectedEof {
                    path: file.path.display().to_string(),
                    offset: offset + done as u64,
                })
            }
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(source) => {
                return Err(IoError::Os {
                    path: file.path.display().to_string(),
                    source,
                })
            }
        }
    }
    Ok(())
}

impl ReadEngine for PreadEngine {
    fn kind(&self) -> EngineKind {
        EngineKind::Pread
    }
    fn depth(&self) -> usize {
        self.slots.bufs.len()
    }
    fn slot_bytes(&self) -> usize {
        self.slots.bufs[0].len()
    }
    fn in_flight(&self) -> usize {
        self.queued.len()
    }
    fn free_slots(&self) -> usize {
        self.slots.free.len()
    }

    fn submit(&mut self, offset: u64, len: usize, tag: u64) -> Result<usize> {
        let slot = self
            .slots
            .take(offset, len, tag, &self.file.path.display())?;
        self.queued.push((slot, offset, len));
        let now = self.queued.len();
        self.slots.stats.max_in_flight = self.slots.stats.max_in_flight.max(now);
        Ok(slot)
    }

    fn complete(&mut self, _min: usize, out: &mut Vec<ReadDone>) -> Result<()> {
        for (slot, offset, len) in self.queued.drain(..) {
            let buf = &mut self.slots.bufs[slot].as_mut_slice()[..len];
            let result = read_fully(&self.file, buf, offset);
            self.slots.report(slot, result, out);
        }
        Ok(())
    }

    fn buffer(&self, slot: usize) -> &[u8] {
        self.slots.buffer(slot)
    }
    fn release(&mut self, slot: usize) {
        self.slots.release(slot)
    }
    fn stats(&self) -> EngineStats {
        self.slots.stats
    }
}
