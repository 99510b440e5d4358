//! A consistent copy of a collection's files, for a snapshot (`crate::snapshot` packs it).
//!
//! With writes held back and the manifest still, the copy takes the manifest, the sealed
//! segments it lists (immutable once listed: hard links, or copies across file systems) and
//! the write-ahead log (copied: it is appended in place). Opening the copy recovers exactly
//! the operations acknowledged before it, as opening after a crash would: the sealed
//! segments up to the manifest's checkpoint, the log after it.

use std::fs;
use std::path::Path;

use super::{lock, Collection};
use crate::error::file_error;
use crate::manifest::MANIFEST_FILE;
use crate::{DbError, Result};

impl Collection {
    /// Copies the collection's files into `into` (an empty directory on the same file
    /// system, so the segments are linked, not copied); returns the last operation the copy
    /// holds and the segments' bytes linked and copied. Writes wait meanwhile: for the links
    /// and the log's bytes, not the segments'.
    pub fn copy_consistent(&self, into: &Path) -> Result<(u64, LinkedBytes)> {
        let inner = &self.inner;
        let config = inner.config();
        if !config.paths.is_empty() {
            return Err(DbError::InvalidInput(format!(
                "collection {:?} keeps its segments on storage paths; snapshots cover \
                 collections kept in the database directory only",
                inner.name
            )));
        }
        if inner.home.is_none() {
            return Err(DbError::InvalidInput(
                "snapshots need the collection on the real file system".into(),
            ));
        }
        let _writes = lock(&inner.writer);
        let manifest = lock(&inner.manifest);
        inner.check_home()?;
        inner.wal.flush()?;
        let last_op = inner.wal.last_op();
        fs::create_dir_all(into).map_err(file_error(into))?;
        // The copy keeps its log beside it, wherever the original's lives.
        let mut copy = manifest.clone();
        copy.config.wal_path = None;
        let to = into.join(MANIFEST_FILE);
        fs::write(&to, copy.encode()).map_err(file_error(&to))?;
        let mut bytes = LinkedBytes::default();
        for entry in &manifest.segments {
            let name = format!("{:016x}", entry.id);
            let from = inner.dir.join("segments").join(&name);
            link_tree(&from, &into.join("segments").join(&name), &mut bytes)?;
        }
        let wal = super::open::wal_dir(&inner.dir, &config, &inner.name);
        let wal_into = into.join("wal");
        fs::create_dir_all(&wal_into).map_err(file_error(&wal_into))?;
        for name in list(&wal)? {
            copy_file(&wal.join(&name), &wal_into.join(&name))?;
        }
        Ok((last_op, bytes))
    }
}

fn list(dir: &Path) -> Result<Vec<String>> {
    let mut names = Vec::new();
    for e in fs::read_dir(dir).map_err(file_error(dir))? {
        let e = e.map_err(file_error(dir))?;
        names.push(e.file_name().to_string_lossy().into_owned());
    }
    names.sort();
    Ok(names)
}

fn copy_file(from: &Path, to: &Path) -> Result<()> {
    fs::copy(from, to).map_err(file_error(from))?;
    Ok(())
}

/// Bytes of files a tree copy linked (shared with the original) and copied.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkedBytes {
    pub linked: u64,
    pub copied: u64,
}

/// Links every file under `from` into the same place under `to` (copies where a link is
/// not possible: another file system), counting the bytes each way into `bytes`.
pub(crate) fn link_tree(from: &Path, to: &Path, bytes: &mut LinkedBytes) -> Result<()> {
    fs::create_dir_all(to).map_err(file_error(to))?;
    for name in list(from)? {
        let (src, dst) = (from.join(&name), to.join(&name));
        let meta = fs::symlink_metadata(&src).map_err(file_error(&src))?;
        if meta.file_type().is_symlink() {
            // A collection's files are never links: one here leads out of the tree.
            return Err(DbError::InvalidInput(format!(
                "{} is a symbolic link",
                src.display()
            )));
        }
        if meta.is_dir() {
            link_tree(&src, &dst, bytes)?;
        } else if fs::hard_link(&src, &dst).is_ok() {
            bytes.linked += meta.len();
        } else {
            copy_file(&src, &dst)?;
            bytes.copied += meta.len();
        }
    }
    Ok(())
}
