//! The write-ahead log: every write of a collection is appended here, numbered and
//! checksummed, before it changes anything in memory, so that after a crash the collection
//! is rebuilt by replaying the log from the last op its durable state holds.
//!
//! Records are opaque bodies; the log numbers them with contiguous ops starting at 1. They
//! live in files `wal-<first op, 20 digits>.log` in one directory, a new file started when
//! the current one passes [`WalOptions::segment_bytes`], so that old files can be deleted
//! whole ([`Wal::truncate_below`]) once the caller's durable state covers them. The byte
//! layout is drawn in `docs/format.md`.
//!
//! Durability order, which the crash tests check at every storage operation:
//! 1. a new file's header is fdatasync'ed and its directory synced before any record goes
//!    into it (an fdatasync of records does not make a new file name durable);
//! 2. a file is fdatasync'ed completely before the next one is created, so the log on disk
//!    is always a prefix of what was written, never a prefix with a hole;
//! 3. an append returns (in [`SyncMode::Always`]) only after an fdatasync that began after
//!    its record was written.

mod reader;
mod record;
mod sync;
#[cfg(test)]
mod tests;
mod writer;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::storage::{create_dir_all_durable, Storage};
use record::Encoded;
pub use record::RecordBuf;
use sync::{lock, SyncState};
use writer::Writer;

/// Why the log could not be opened or written.
#[derive(Debug, thiserror::Error)]
pub enum WalError {
    /// A storage call failed.
    #[error("{action} {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A log file holds bytes that are not a valid log there (and not a torn tail a crash
    /// could have left): the file, the byte offset and what is wrong.
    #[error("{}: at byte {offset}: {what}", file.display())]
    Corrupt {
        file: PathBuf,
        offset: u64,
        what: String,
    },
    /// An append over [`WalOptions::max_record_bytes`]; nothing was written.
    #[error("record of {len} bytes is over max_record_bytes ({max}); nothing was written")]
    RecordTooLarge { len: usize, max: u32 },
    /// A request the log cannot satisfy as asked: replay from ops it no longer or never held,
    /// bad options, waiting for an op not yet appended.
    #[error("{0}")]
    Invalid(String),
    /// The caller's `apply` refused a record during replay.
    #[error("replaying op {op}: {message}")]
    Apply { op: u64, message: String },
    /// An earlier write or fdatasync failed, so the log takes no more writes (see [`Wal`]).
    #[error(
        "the log takes no more writes since a write or fdatasync failed ({0}); \
         reopen it to recover what is durable"
    )]
    Poisoned(String),
}

pub(crate) fn io_err<'a>(
    action: &'static str,
    path: &'a Path,
) -> impl FnOnce(io::Error) -> WalError + 'a {
    move |source| WalError::Io {
        action,
        path: path.to_path_buf(),
        source,
    }
}

/// What [`Wal::open`] hands each replayed record to: its op and body. An `Err` aborts the
/// open with [`WalError::Apply`].
pub type ReplayFn<'a> = dyn FnMut(u64, &[u8]) -> Result<(), String> + 'a;

/// When an append is durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncMode {
    /// [`Wal::append`] returns only after its record is durable. Concurrent appends share
    /// fdatasyncs (group commit), so throughput grows with the number of writers.
    Always,
    /// A background thread syncs at this interval; [`Wal::append`] returns once the record
    /// is written (a crash can lose up to an interval of acknowledged appends).
    /// [`Wal::flush`], [`Wal::close`] and dropping the log still make everything durable.
    Interval(Duration),
}

/// How the log is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WalOptions {
    /// A new file is started when the current one reaches this size. Default 16 MiB:
    /// recovery reads the last file and one other whole, and at 64 MiB that was a fifth
    /// of the memory peak of opening a 1M x 768 collection in a 10%-of-raw budget.
    pub segment_bytes: u64,
    pub sync: SyncMode,
    /// The largest record body accepted, on append and on replay. Default 64 MiB.
    pub max_record_bytes: u32,
}

impl Default for WalOptions {
    fn default() -> Self {
        WalOptions {
            segment_bytes: 16 << 20,
            sync: SyncMode::Always,
            max_record_bytes: 64 << 20,
        }
    }
}

/// What [`Wal::open`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovered {
    /// The last op in the log (the next append gets `last_op + 1`).
    pub last_op: u64,
    /// How many records were passed to `apply`.
    pub replayed: u64,
    /// The torn tail cut from the last file, if a crash left one.
    pub torn_tail: Option<TornTail>,
    /// How many log files were found (after removing one whose creation a crash interrupted).
    pub files: usize,
}

/// An incomplete or unchecksummed end of the last file, left by a crash during an append that
/// therefore never returned; open cuts it off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornTail {
    pub file: PathBuf,
    /// Where the first bad record started; the file's new length.
    pub offset: u64,
    pub bytes_cut: u64,
}

/// Counters of an open log.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WalStats {
    /// The size of all log files.
    pub bytes: u64,
    pub files: usize,
    /// Records appended since open.
    pub appends: u64,
    /// fdatasync calls since open (group commit makes this smaller than `appends`).
    pub syncs: u64,
    /// The first op of the oldest file (greater than `last_op` when the log holds no record).
    pub first_op: u64,
    pub last_op: u64,
    pub durable_op: u64,
}

/// Deliberate mistakes in the durability order, so tests can show that the crash checks
/// notice them.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Faults {
    pub skip_rotation_dir_sync: bool,
    pub skip_rotation_file_sync: bool,
    pub skip_data_sync: bool,
}

/// What the log's threads share.
struct Shared {
    storage: Arc<dyn Storage>,
    dir: PathBuf,
    options: WalOptions,
    faults: Faults,
    /// Lock order: `writer` before `group`, never the other way.
    writer: Mutex<Writer>,
    group: Mutex<SyncState>,
    group_cv: Condvar,
    /// Set by the first failed write or fdatasync; never cleared.
    poison: OnceLock<String>,
    appends: AtomicU64,
    syncs: AtomicU64,
    /// Serializes [`Wal::truncate_below`], so files are always removed oldest first.
    truncating: Mutex<()>,
    stop: Mutex<bool>,
    stop_cv: Condvar,
}

impl Shared {
    fn check_poison(&self) -> Result<(), WalError> {
        match self.poison.get() {
            Some(why) => Err(WalError::Poisoned(why.clone())),
            None => Ok(()),
        }
    }

    fn poison(&self, e: &WalError) {
        if self.poison.set(e.to_string()).is_ok() {
            log::error!(
                "{}: write-ahead log stops taking writes: {e}",
                self.dir.display()
            );
        }
    }

    fn append_nowait(&self, record: RecordBuf) -> Result<u64, WalError> {
        let max = self.options.max_record_bytes;
        let len = record.body().len();
        if len > max as usize {
            return Err(WalError::RecordTooLarge { len, max });
        }
        let mut rec = Encoded::from_record(record);
        let mut w = lock(&self.writer);
        self.check_poison()?;
        match w.write(&mut rec, &self.syncs) {
            Ok((op, durable)) => {
                self.appends.fetch_add(1, Ordering::Relaxed);
                if let Some(d) = durable {
                    self.mark_durable(d);
                }
                Ok(op)
            }
            Err(e) => {
                // The write may have reached the file in part: no later record may follow it.
                self.poison(&e);
                Err(e)
            }
        }
    }

    fn last_op(&self) -> u64 {
        lock(&self.writer).last_op()
    }

    fn flush(&self) -> Result<(), WalError> {
        self.wait_durable(self.last_op())
    }
}

/// An open write-ahead log. `Send + Sync`: share it between threads behind an `Arc`; every
/// method takes `&self`.
///
/// **Failures poison the log.** After a write or fdatasync fails, every later append,
/// [`Wal::wait_durable`] and [`Wal::flush`] returns an error ([`WalError::Poisoned`]), even if
/// the storage recovers: a failed fdatasync may have dropped the dirty pages it was asked to
/// write, and a later fdatasync that succeeds says nothing about them, so the log cannot know
/// what is on disk (the "fsyncgate" lesson). Reopening the log finds out by reading it back.
pub struct Wal {
    shared: Arc<Shared>,
    syncer: Option<JoinHandle<()>>,
    closed: bool,
}

impl std::fmt::Debug for Wal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wal")
            .field("dir", &self.shared.dir)
            .field("options", &self.shared.options)
            .field("stats", &self.stats())
            .finish()
    }
}

impl Wal {
    /// Opens the log in `dir` (creating the directory, durably, if needed) and replays every
    /// record with op >= `from` through `apply`, in op order; then positions for appending.
    ///
    /// `from` is the first op the caller's durable state does not hold (1 for none; 0 is
    /// taken as 1). It is an error if the log starts after `from` (ops the caller needs were
    /// truncated) or ends before `from - 1` (the caller holds ops the log never made durable).
    /// A log with no file yet starts numbering at `from`, so ops never go backwards.
    ///
    /// A torn tail in the last file (an append a crash interrupted) is cut off, logged, and
    /// reported in [`Recovered::torn_tail`]; a bad record anywhere else, or followed by a
    /// valid one, refuses the open naming the file and byte offset. An error from `apply`
    /// aborts the open ([`WalError::Apply`]). Replayed records are durable when this returns.
    pub fn open(
        storage: Arc<dyn Storage>,
        dir: &Path,
        options: WalOptions,
        from: u64,
        apply: &mut ReplayFn<'_>,
    ) -> Result<(Wal, Recovered), WalError> {
        Self::open_with(storage, dir, options, from, apply, Faults::default())
    }

    pub(crate) fn open_with(
        storage: Arc<dyn Storage>,
        dir: &Path,
        options: WalOptions,
        from: u64,
        apply: &mut ReplayFn<'_>,
        faults: Faults,
    ) -> Result<(Wal, Recovered), WalError> {
        if options.sync == SyncMode::Interval(Duration::ZERO) {
            return Err(WalError::Invalid(
                "SyncMode::Interval needs a non-zero interval (use SyncMode::Always)".into(),
            ));
        }
        create_dir_all_durable(&*storage, dir).map_err(io_err("create", dir))?;
        let rec = reader::recover(&*storage, dir, options.max_record_bytes, from, apply)?;
        let found_files = !rec.log_files.is_empty();
        let syncs = AtomicU64::new(0);
        let writer = Writer::new(
            Arc::clone(&storage),
            dir,
            rec.log_files,
            rec.next_op,
            options.segment_bytes,
            faults,
            &syncs,
        )?;
        if found_files {
            // What was read back may still be only in the page cache (the last process may
            // have died before its fdatasync); the caller is about to build on it.
            let (_, handle, path) = writer.sync_target();
            lock(&handle)
                .sync_data()
                .map_err(io_err("fdatasync", &path))?;
            syncs.fetch_add(1, Ordering::Relaxed);
        }
        let shared = Arc::new(Shared {
            storage,
            dir: dir.to_path_buf(),
            options,
            faults,
            writer: Mutex::new(writer),
            group: Mutex::new(SyncState {
                durable_op: rec.next_op - 1,
                syncing: false,
            }),
            group_cv: Condvar::new(),
            poison: OnceLock::new(),
            appends: AtomicU64::new(0),
            syncs,
            truncating: Mutex::new(()),
            stop: Mutex::new(false),
            stop_cv: Condvar::new(),
        });
        let syncer = match options.sync {
            SyncMode::Always => None,
            SyncMode::Interval(every) => {
                let s = Arc::clone(&shared);
                Some(
                    std::thread::Builder::new()
                        .name("wal-sync".into())
                        .spawn(move || sync::run_interval_syncer(s, every))
                        .map_err(io_err("start the sync thread for", dir))?,
                )
            }
        };
        let wal = Wal {
            shared,
            syncer,
            closed: false,
        };
        Ok((wal, rec.recovered))
    }

    /// Appends a record and returns its op; in [`SyncMode::Always`] it is durable when this
    /// returns. A body over [`WalOptions::max_record_bytes`] is refused with nothing written.
    pub fn append(&self, body: &[u8]) -> Result<u64, WalError> {
        let op = self.append_nowait(body)?;
        if self.shared.options.sync == SyncMode::Always {
            self.shared.wait_durable(op)?;
        }
        Ok(op)
    }

    /// Appends without waiting for durability; call [`Wal::wait_durable`] with the op later.
    /// This lets a caller apply the op to memory under its own lock, release the lock and
    /// then wait, so that group commit can gather the writers queued behind that lock.
    pub fn append_nowait(&self, body: &[u8]) -> Result<u64, WalError> {
        self.append_record(RecordBuf::encode(|buf| {
            buf.extend_from_slice(body);
            Ok::<(), WalError>(())
        })?)
    }

    /// `append_nowait` of a body encoded in place: the bytes go to the file without being
    /// copied again.
    pub fn append_record(&self, record: RecordBuf) -> Result<u64, WalError> {
        self.shared.append_nowait(record)
    }

    /// Returns once `op` (and every op before it) is durable, syncing if needed.
    pub fn wait_durable(&self, op: u64) -> Result<(), WalError> {
        let last = self.shared.last_op();
        if op > last {
            return Err(WalError::Invalid(format!(
                "op {op} was never appended (the last op is {last})"
            )));
        }
        self.shared.wait_durable(op)
    }

    /// Makes everything appended so far durable.
    pub fn flush(&self) -> Result<(), WalError> {
        self.shared.flush()
    }

    /// The last op appended (durable or not).
    pub fn last_op(&self) -> u64 {
        self.shared.last_op()
    }

    /// Every op up to this one is durable.
    pub fn durable_op(&self) -> u64 {
        self.shared.durable_op()
    }

    /// Deletes the files all of whose records have ops below `op` (never the file being
    /// written), oldest first, each removal made durable before the next so that a crash
    /// leaves the log without a hole. The caller's durable state must hold every op below
    /// `op`; reopen with `from >= op` afterwards.
    pub fn truncate_below(&self, op: u64) -> Result<(), WalError> {
        let sh = &self.shared;
        let _one_at_a_time = lock(&sh.truncating);
        let victims: Vec<PathBuf> = {
            let segs = lock(&sh.writer).log_files();
            segs.windows(2)
                .take_while(|pair| pair[1].first_op <= op)
                .map(|pair| pair[0].path.clone())
                .collect()
        };
        for path in victims {
            sh.storage
                .remove_file(&path)
                .map_err(io_err("remove", &path))?;
            sh.storage
                .sync_dir(&sh.dir)
                .map_err(io_err("sync", &sh.dir))?;
            lock(&sh.writer).drop_oldest(&path);
        }
        Ok(())
    }

    /// Sizes and counters.
    pub fn stats(&self) -> WalStats {
        let sh = &self.shared;
        let (segs, last_op) = {
            let w = lock(&sh.writer);
            (w.log_files(), w.last_op())
        };
        WalStats {
            bytes: segs.iter().map(|s| s.bytes).sum(),
            files: segs.len(),
            appends: sh.appends.load(Ordering::Relaxed),
            syncs: sh.syncs.load(Ordering::Relaxed),
            first_op: segs.first().map_or(last_op + 1, |s| s.first_op),
            last_op,
            durable_op: sh.durable_op(),
        }
    }

    /// Stops the background syncer and makes everything appended durable; dropping the log
    /// does the same but can only log a failure.
    pub fn close(mut self) -> Result<(), WalError> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<(), WalError> {
        if std::mem::replace(&mut self.closed, true) {
            return Ok(());
        }
        if let Some(handle) = self.syncer.take() {
            *lock(&self.shared.stop) = true;
            self.shared.stop_cv.notify_all();
            // A panic in the syncer has nothing to hand back; the flush below reports.
            let _ = handle.join();
        }
        if self.shared.durable_op() >= self.shared.last_op() {
            return Ok(());
        }
        self.shared.flush()
    }
}

impl Drop for Wal {
    fn drop(&mut self) {
        if let Err(e) = self.shutdown() {
            log::error!(
                "{}: closing the write-ahead log: {e}",
                self.shared.dir.display()
            );
        }
    }
}
