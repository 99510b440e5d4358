//! The one file-system interface every durable write of diskvec goes through: the
//! database's WAL, manifests, deleted bitmaps and points files, and the index's meta.dvm,
//! node stripes (and their mirrors), navigation and compact-code files, intent records and
//! build checkpoints. What this path assumes of the file system and the device is written
//! in docs/format.md, "Durability assumptions".
//!
//! Everything that must survive a crash goes through [`Storage`], so that a test can swap the
//! real file system ([`FsStorage`]) for `CrashStorage` (feature `crash-model`), which keeps
//! only what a power loss would keep and can refuse every operation after a chosen one. The
//! interface is the handful of calls a log and an atomically replaced file need, with the
//! durability points explicit: file data is durable after [`StorageFile::sync_data`], a
//! directory entry (a created, renamed or removed name) only after [`Storage::sync_dir`] on
//! its directory. Scratch files that no crash needs (a build's spill files, its lock) are
//! written outside it.

#[cfg(any(test, feature = "crash-model"))]
mod crash;
mod fs;
mod staged;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

#[cfg(any(test, feature = "crash-model"))]
pub use crash::CrashStorage;
pub use fs::FsStorage;
pub use staged::{write_atomic_with, StagedFile, StorageWriter};

/// A file system, as far as diskvec needs one. Paths are used as given.
pub trait Storage: Send + Sync + std::fmt::Debug {
    /// Creates `dir` and its missing parents. The new entries are not durable until their
    /// parents are synced (see [`create_dir_all_durable`]).
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// The names of the entries in `dir`, sorted.
    fn list(&self, dir: &Path) -> io::Result<Vec<String>>;
    fn exists(&self, path: &Path) -> bool;
    /// The whole content of a file.
    fn read(&self, path: &Path) -> io::Result<Vec<u8>>;
    /// Opens a file for appending at its end, creating it if missing. A created file's name is
    /// durable only after [`Storage::sync_dir`] on its directory.
    fn open_append(&self, path: &Path) -> io::Result<Box<dyn StorageFile>>;
    /// Creates `path` empty (emptying it if it exists) for a file written front to back, as
    /// large as an index's node stripes: what it has written leaves the page cache as it
    /// goes (a memory cgroup charges dirty pages to the writer). Its name is durable only
    /// after [`Storage::sync_dir`] on its directory.
    fn create(&self, path: &Path) -> io::Result<Box<dyn StorageFile>>;
    /// Cuts (or zero-extends) a file to `len` bytes; the new length and all of the file's data
    /// are durable when this returns.
    fn truncate(&self, path: &Path, len: u64) -> io::Result<()>;
    /// Renames `from` over `to` (replacing it); durable after `sync_dir` of both parents.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    fn remove_dir_all(&self, path: &Path) -> io::Result<()>;
    /// Makes the entries created, renamed or removed in `dir` durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
}

/// A file open for appending.
pub trait StorageFile: Send {
    /// Writes all of `data` at the handle's append position (the file's length at open,
    /// advanced by each append; positional writes do not move it); not durable until
    /// [`Self::sync_data`].
    fn append(&mut self, data: &[u8]) -> io::Result<()>;
    /// Writes `data` at `offset` (a header's checksum patched in last, a mirror copy placed
    /// past the file's own stripes), extending the file with zeros if it is shorter; not
    /// durable until [`Self::sync_data`].
    fn write_at(&mut self, offset: u64, data: &[u8]) -> io::Result<()>;
    /// Makes every byte appended so far, through any handle of this file, durable
    /// (fdatasync).
    fn sync_data(&mut self) -> io::Result<()>;
    /// The handle's append position: the file's length at open plus what it appended.
    fn len(&self) -> u64;
    /// Drops the file's synced pages from the page cache: it will not be read again soon
    /// (a complete log file). Advice only.
    fn forget_cached(&self) {}
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Replaces the content of `path` with `data` so that after a crash at any point the path
/// holds either the complete old content or the complete new content (or, if it did not
/// exist, nothing or the new content).
///
/// The data goes to a temporary file next to `path` ([`temp_name`]), is made durable,
/// renamed over `path`, and the directory is synced so that the rename itself survives. A
/// crash can leave such a temporary file behind; it is never renamed over anything later,
/// so it is garbage that a caller may delete when it opens the directory.
pub fn write_atomic(storage: &dyn Storage, path: &Path, data: &[u8]) -> io::Result<()> {
    write_atomic_with(storage, path, |file| file.append(data))
}

/// The temporary name a file is staged under before it replaces `path`:
/// `.<name>.<pid>.<n>.tmp`, unique within the process so concurrent calls never share one.
pub(crate) fn temp_name(path: &Path) -> io::Result<PathBuf> {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let name = path.file_name().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{}: not a file path", path.display()),
        )
    })?;
    Ok(parent_dir(path).join(format!(
        ".{}.{}.{}.tmp",
        name.to_string_lossy(),
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    )))
}

/// Removes `dir` and what it holds, if it is there, and makes the removal durable (syncs its
/// parent), so that a crash cannot bring it back.
pub fn remove_dir_all_durable(storage: &dyn Storage, dir: &Path) -> io::Result<()> {
    if !storage.exists(dir) {
        return Ok(());
    }
    storage.remove_dir_all(dir)?;
    storage.sync_dir(&parent_dir(dir))
}

/// Creates `dir` and its missing parents and makes each created entry durable (syncing the
/// parent of every directory it created), so that a directory that exists after this returns
/// still exists after a crash.
pub fn create_dir_all_durable(storage: &dyn Storage, dir: &Path) -> io::Result<()> {
    let mut missing: Vec<PathBuf> = Vec::new();
    let mut cur = Some(dir);
    while let Some(p) = cur {
        if p.as_os_str().is_empty() || storage.exists(p) {
            break;
        }
        missing.push(p.to_path_buf());
        cur = p.parent();
    }
    if missing.is_empty() {
        return Ok(());
    }
    storage.create_dir_all(dir)?;
    // Top down: a directory's entry is only worth syncing once its parent's entry is durable.
    for created in missing.iter().rev() {
        storage.sync_dir(&parent_dir(created))?;
    }
    Ok(())
}

/// The directory holding `path` (`.` for a bare name, `/` for the root).
pub fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        Some(_) => PathBuf::from("."),
        None => path.to_path_buf(),
    }
}
