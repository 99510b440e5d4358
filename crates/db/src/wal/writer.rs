//! The appending side: the file being written, op numbering, and starting new files.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::reader::LogFile;
use super::record::{self, Encoded, FILE_HEADER_LEN};
use super::{io_err, Faults, WalError};
use crate::storage::{Storage, StorageFile};

/// A second handle on the file being written, used only to fdatasync it: a group-commit
/// leader syncs through it without holding the writer's lock, so appenders keep writing
/// while the sync is under way (fdatasync covers the file, whichever handle wrote).
pub(super) type SyncHandle = Arc<Mutex<Box<dyn StorageFile>>>;

/// Everything the writer's mutex guards. Ops are assigned and written under it, so the order
/// of records in the files is op order.
pub(super) struct Writer {
    storage: Arc<dyn Storage>,
    dir: PathBuf,
    file: Box<dyn StorageFile>,
    sync_handle: SyncHandle,
    /// All files of the log, oldest first; the last is the one being written.
    log_files: Vec<LogFile>,
    next_op: u64,
    segment_bytes: u64,
    faults: Faults,
}

impl Writer {
    /// Continues the log after recovery: appends to the last file, or creates the first one.
    pub fn new(
        storage: Arc<dyn Storage>,
        dir: &Path,
        mut log_files: Vec<LogFile>,
        next_op: u64,
        segment_bytes: u64,
        faults: Faults,
        syncs: &AtomicU64,
    ) -> Result<Self, WalError> {
        let (file, sync_handle) = match log_files.last() {
            Some(last) => {
                let file = storage
                    .open_append(&last.path)
                    .map_err(io_err("open", &last.path))?;
                let sync = storage
                    .open_append(&last.path)
                    .map_err(io_err("open", &last.path))?;
                (file, Arc::new(Mutex::new(sync)))
            }
            None => {
                let (seg, file, sync) = create_file(&*storage, dir, next_op, true, syncs)?;
                log_files.push(seg);
                (file, sync)
            }
        };
        Ok(Writer {
            storage,
            dir: dir.to_path_buf(),
            file,
            sync_handle,
            log_files,
            next_op,
            segment_bytes,
            faults,
        })
    }

    /// Writes a record (not yet durable) and returns its op, and, if a new file was started
    /// first, the op through which the log is now durable (rotation syncs the old file).
    pub fn write(
        &mut self,
        rec: &mut Encoded,
        syncs: &AtomicU64,
    ) -> Result<(u64, Option<u64>), WalError> {
        let mut durable = None;
        // Rotating before the write rather than after it starts a file only when a record
        // needs one, and never leaves an empty file behind an append.
        if self.file.len() >= self.segment_bytes && self.file.len() > FILE_HEADER_LEN as u64 {
            durable = Some(self.rotate(syncs)?);
        }
        let op = self.next_op;
        rec.seal(op);
        self.file
            .append(&rec.buf)
            .map_err(io_err("write", self.current_path()))?;
        self.next_op += 1;
        Ok((op, durable))
    }

    /// Ends the current file and starts the next, returning the op through which the log is
    /// durable.
    fn rotate(&mut self, syncs: &AtomicU64) -> Result<u64, WalError> {
        // The old file must be whole on disk before the new one can exist: otherwise a crash
        // could keep records of the new file while losing the old file's tail, a hole in the
        // middle of the log that recovery must refuse.
        if !self.faults.skip_rotation_file_sync {
            let path = self.current_path().to_path_buf();
            self.file.sync_data().map_err(io_err("fdatasync", &path))?;
            syncs.fetch_add(1, Ordering::Relaxed);
        }
        // A complete file is read again only by a recovery, from the disk.
        self.file.forget_cached();
        let durable = self.next_op - 1;
        let sync_dir = !self.faults.skip_rotation_dir_sync;
        let (seg, file, sync_handle) =
            create_file(&*self.storage, &self.dir, self.next_op, sync_dir, syncs)?;
        if let Some(old) = self.log_files.last_mut() {
            old.bytes = self.file.len();
        }
        self.log_files.push(seg);
        self.file = file;
        self.sync_handle = sync_handle;
        Ok(durable)
    }

    /// The last op written, and the handle that makes it durable.
    pub fn sync_target(&self) -> (u64, SyncHandle, PathBuf) {
        (
            self.next_op - 1,
            Arc::clone(&self.sync_handle),
            self.current_path().to_path_buf(),
        )
    }

    pub fn last_op(&self) -> u64 {
        self.next_op - 1
    }

    pub fn current_path(&self) -> &Path {
        &self
            .log_files
            .last()
            .expect("the writer always has a file")
            .path
    }

    /// Every file of the log, oldest first, with up-to-date lengths.
    pub fn log_files(&self) -> Vec<LogFile> {
        let mut segs = self.log_files.clone();
        if let Some(cur) = segs.last_mut() {
            cur.bytes = self.file.len();
        }
        segs
    }

    /// Forgets the oldest file (after the caller removed it).
    pub fn drop_oldest(&mut self, path: &Path) {
        if self.log_files.len() > 1 && self.log_files[0].path == path {
            self.log_files.remove(0);
        }
    }
}

/// Creates the file whose first record will be `first_op`, with its header durable and (when
/// `sync_dir`) its name durable: an fdatasync of a file's records does not make a new name
/// durable, so without the directory sync a crash could lose a file whose appends were all
/// acknowledged.
fn create_file(
    storage: &dyn Storage,
    dir: &Path,
    first_op: u64,
    sync_dir: bool,
    syncs: &AtomicU64,
) -> Result<(LogFile, Box<dyn StorageFile>, SyncHandle), WalError> {
    let path = dir.join(record::file_name(first_op));
    let mut file = storage
        .open_append(&path)
        .map_err(io_err("create", &path))?;
    if !file.is_empty() {
        // Recovery removes a file whose creation was interrupted, so a non-empty file here
        // was written by something else: appending after its bytes would corrupt both.
        return Err(WalError::Corrupt {
            file: path,
            offset: 0,
            what: "a new log file would be created here, but the name already holds data".into(),
        });
    }
    file.append(&record::file_header())
        .map_err(io_err("write", &path))?;
    file.sync_data().map_err(io_err("fdatasync", &path))?;
    syncs.fetch_add(1, Ordering::Relaxed);
    if sync_dir {
        storage.sync_dir(dir).map_err(io_err("sync", dir))?;
    }
    let sync = storage.open_append(&path).map_err(io_err("open", &path))?;
    Ok((
        LogFile {
            first_op,
            path,
            bytes: FILE_HEADER_LEN as u64,
        },
        file,
        Arc::new(Mutex::new(sync)),
    ))
}
