use std::mem::ManuallyDrop;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use io_uring::{opcode, squeue, types, IoUring};

use crate::engine::Slots;
use crate::{DataFile, EngineKind, EngineStats, IoError, ReadDone, ReadEngine, Result};

/// io_uring engine: one ring per engine (one engine per thread), reads into registered
/// buffers where the kernel allows it, any number of reads in flight up to the depth.
///
/// Soundness: the kernel writes into a slot's buffer from the moment its read is pushed
/// until its completion is taken off the ring. `in_flight` counts exactly those reads
/// (pushed, resubmitted after a short read, or not yet sent), and no buffer is freed while
/// it is non-zero: `Drop` waits for every outstanding completion first, and if the ring
/// can no longer be waited on, the buffers are leaked rather than freed. Errors and
/// unwinding leave the engine (and so its buffers) alive until that `Drop` runs.
///
/// A read the device never answers (a fabric path gone, the kernel holding its I/O while
/// the controller reconnects) keeps its slot: `complete_within` returns at its timeout so
/// the caller can give up on it, and `Drop` waits `DROP_PATIENCE` for it, then leaks.
pub struct UringEngine {
    file: Arc<DataFile>,
    /// Dropped by hand in `Drop`, before `slots`: the ring holds the buffers registered
    /// with the kernel, so it must go first whatever order the fields are declared in.
    ring: ManuallyDrop<IoUring>,
    slots: Slots,
    /// Per slot: (offset, len, bytes already read). A short read is resubmitted for the rest.
    pending: Vec<(u64, usize, usize)>,
    in_flight: usize,
    /// Entries pushed to the submission queue and not yet sent to the kernel.
    unsent: usize,
    fixed_buffers: bool,
    /// The kernel takes a timeout with its wait (IORING_FEAT_EXT_ARG, Linux 5.11).
    timed_waits: bool,
}

/// How long dropping an engine waits for reads still on the device before leaking their
/// buffers (a read given up on by a deadline may never come back).
const DROP_PATIENCE: Duration = Duration::from_secs(1);

impl UringEngine {
    pub fn new(file: Arc<DataFile>, depth: usize, slot_bytes: usize) -> Result<Self> {
        let os = |source| IoError::Os {
            path: file.path.display().to_string(),
            source,
        };
        let entries = depth.next_power_of_two().max(8) as u32;
        let ring = IoUring::new(entries).map_err(os)?;
        let mut slots = Slots::new(depth, slot_bytes);
        let iovecs: Vec<libc::iovec> = slots
            .bufs
            .iter_mut()
            .map(|b| libc::iovec {
                iov_base: b.as_mut_ptr().cast(),
                iov_len: b.len(),
            })
            .collect();
        // SAFETY: the buffers outlive the ring: nothing below can fail before `Self` owns
        // both, and `Drop` drops the ring before the slots.
        let fixed_buffers = unsafe { ring.submitter().register_buffers(&iovecs) }.is_ok();
        let timed_waits = ring.params().is_feature_ext_arg();
        Ok(Self {
            file,
            ring: ManuallyDrop::new(ring),
            slots,
            pending: vec![(0, 0, 0); depth],
            in_flight: 0,
            unsent: 0,
            fixed_buffers,
            timed_waits,
        })
    }

    fn push(&mut self, slot: usize) -> Result<()> {
        let (offset, len, done) = self.pending[slot];
        let fd = types::Fd(self.file.file.as_raw_fd());
        debug_assert!(done < len && len <= self.slots.bufs[slot].len());
        // SAFETY: `done < len <= buffer length` (a short read resubmits only the rest), so
        // the pointer stays inside the slot's allocation.
        let ptr = unsafe { self.slots.bufs[slot].as_mut_ptr().add(done) };
        let remaining = (len - done) as u32;
        let at = offset + done as u64;
        let entry: squeue::Entry = if self.fixed_buffers {
            opcode::ReadFixed::new(fd, ptr, remaining, slot as u16)
                .offset(at)
                .build()
        } else {
            opcode::Read::new(fd, ptr, remaining).offset(at).build()
        };
        let entry = entry.user_data(slot as u64);
        // SAFETY: the slot is taken (not on the free list) and counted in `in_flight`
        // until its completion is reaped, so its buffer is neither reused nor freed while
        // the kernel may write to it (see the type's soundness note).
        if unsafe { self.ring.submission().push(&entry) }.is_err() {
            // The submission queue is as deep as the slot count, so it is full only when
            // earlier entries were not yet sent: send them and try once more.
            let sent = self.ring.submit().map_err(|e| self.os(e))?;
            self.unsent = self.unsent.saturating_sub(sent);
            // SAFETY: as above.
            unsafe { self.ring.submission().push(&entry) }
                .map_err(|_| IoError::Usage("io_uring submission queue full".into()))?;
        }
        self.unsent += 1;
        Ok(())
    }

    /// Takes every completion off the ring; resubmits short reads. Returns how many reads finished.
    fn reap(&mut self, out: &mut Vec<ReadDone>) -> Result<usize> {
        let finished: Vec<(usize, i32)> = self
            .ring
            .completion()
            .map(|c| (c.user_data() as usize, c.result()))
            .collect();
        let mut count = 0;
        for (slot, res) in finished {
            let (offset, len, done) = self.pending[slot];
            let result = if res < 0 {
                Err(self.os(std::io::Error::from_raw_os_error(-res)))
            } else if res == 0 {
                Err(IoError::UnexpectedEof {
                    path: self.file.path.display().to_string(),
                    offset: offset + done as u64,
                })
            } else if done + (res as usize) < len {
                self.pending[slot].2 = done + res as usize;
                match self.push(slot) {
                    Ok(()) => continue,
                    // The rest could not be queued: this read fails, the others finish.
                    Err(e) => Err(e),
                }
            } else {
                Ok(())
            };
            self.in_flight -= 1;
            count += 1;
            self.slots.report(slot, result, out);
        }
        Ok(count)
    }

    /// Sends what is queued and waits until `min` reads finished or `until` passed
    /// (without timed waits: until they finished). Returns how many finished.
    fn wait_until(
        &mut self,
        min: usize,
        until: Option<Instant>,
        out: &mut Vec<ReadDone>,
    ) -> Result<usize> {
        let mut finished = 0;
        loop {
            let wanted = min.saturating_sub(finished).min(self.in_flight);
            let waited = match until.filter(|_| self.timed_waits) {
                Some(until) => {
                    let left = until.saturating_duration_since(Instant::now());
                    let ts = types::Timespec::from(left);
                    let args = types::SubmitArgs::new().timespec(&ts);
                    self.ring.submitter().submit_with_args(wanted, &args)
                }
                None => self.ring.submit_and_wait(wanted),
            };
            match waited {
                Ok(sent) => self.unsent = self.unsent.saturating_sub(sent),
                // Timed out: what was queued went to the kernel before the wait began.
                Err(e) if e.raw_os_error() == Some(libc::ETIME) => {
                    self.unsent = self.ring.submission().len();
                }
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) => return Err(self.os(e)),
            }
            finished += self.reap(out)?;
            let timed_out = until.is_some_and(|u| self.timed_waits && Instant::now() >= u);
            if finished >= min.min(finished + self.in_flight) || timed_out {
                return Ok(finished);
            }
        }
    }

    /// Sends what is queued and waits until the kernel has finished every read it was
    /// given, for at most `DROP_PATIENCE` where waits can be timed. Returns false if reads
    /// are still in flight (or the ring could not be waited on).
    fn wait_for_kernel(&mut self) -> bool {
        let until = Instant::now() + DROP_PATIENCE;
        let mut discard = Vec::new();
        while self.in_flight > 0 {
            if self.timed_waits && Instant::now() >= until {
                return false;
            }
            discard.clear();
            if self
                .wait_until(self.in_flight, Some(until), &mut discard)
                .is_err()
            {
                return false;
            }
        }
        true
    }

    fn os(&self, source: std::io::Error) -> IoError {
        IoError::Os {
            path: self.file.path.display().to_string(),
            source,
        }
    }
}

impl Drop for UringEngine {
    fn drop(&mut self) {
        if !self.wait_for_kernel() {
            // The kernel may still write into the buffers: never free them.
            log::warn!(
                "{}: {} io_uring read(s) still on the device when the engine closed; \
                 leaking their buffers",
                self.file.path.display(),
                self.in_flight
            );
            std::mem::forget(std::mem::take(&mut self.slots.bufs));
        }
        // SAFETY: `drop` runs once and nothing uses the ring after this line; the slots'
        // buffers (dropped when this function returns) are still allocated while the ring
        // unregisters them.
        unsafe { ManuallyDrop::drop(&mut self.ring) };
    }
}

impl ReadEngine for UringEngine {
    fn kind(&self) -> EngineKind {
        EngineKind::Uring
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
        let slot = self
            .slots
            .take(offset, len, tag, &self.file.path.display())?;
        self.pending[slot] = (offset, len, 0);
        if let Err(e) = self.push(slot) {
            self.slots.unsent(slot);
            return Err(e);
        }
        self.in_flight += 1;
        self.slots.stats.max_in_flight = self.slots.stats.max_in_flight.max(self.in_flight);
        Ok(slot)
    }

    fn complete(&mut self, min: usize, out: &mut Vec<ReadDone>) -> Result<()> {
        self.wait_until(min, None, out).map(|_| ())
    }

    fn complete_within(
        &mut self,
        min: usize,
        timeout: Duration,
        out: &mut Vec<ReadDone>,
    ) -> Result<()> {
        self.wait_until(min, Some(Instant::now() + timeout), out)
            .map(|_| ())
    }

    fn poll(&mut self, out: &mut Vec<ReadDone>) -> Result<()> {
        if self.unsent > 0 {
            let sent = self.ring.submit().map_err(|e| self.os(e))?;
            self.unsent = self.unsent.saturating_sub(sent);
        }
        self.reap(out)?;
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
