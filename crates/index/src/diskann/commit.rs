//! How a build replaces an index atomically (drawn in docs/format.md, "Commit").
//!
//! Every build is a new generation: its node files get names of their own
//! (`nodes.<generation>.dvn`, or `<index>.<generation>.<i>.dvn` on each storage path),
//! written and synced beside the files of the index in place, which stays searchable.
//! `meta.dvm` names the node files of its generation, so the one switch is writing a new
//! `meta.dvm` (temp file, fsync, rename over the old, fsync the directory). A crash before
//! that rename leaves the old index whole; after it, the new one. Before it creates any
//! node file, a build writes an intent record (`pending.<generation>`) listing them, so the
//! leftovers of a crashed build are known by that list, never guessed from file names
//! (path directories may be shared with other indexes). After the switch the previous
//! generation's files are removed; a build lock keeps two builds out of one directory.
//! Every one of these steps goes through the durable-write path (`diskvec_io::storage`).

use std::fs::File;
use std::path::{Path, PathBuf};

use diskvec_io::storage::{write_atomic, Storage};

use super::meta::Meta;
use super::meta_writer::staged_path;
use super::{META_FILE, NODES_FILE};
use crate::error::file_error;
use crate::{IndexError, Result};

/// The generation part of file names: the build id in hex.
fn generation(build_id: u64) -> String {
    format!("{build_id:016x}")
}

/// The name the index is known by on storage paths: its directory's name.
fn index_name(out: &Path) -> String {
    out.canonicalize()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "index".to_string())
}

/// Where the nodes of generation `build_id` go: the files to write, and how meta.dvm
/// names them. No paths given keeps them in the index directory; otherwise each path gets
/// `<index name>.<generation>.<i>.dvn`, named in meta.dvm by absolute path.
pub(crate) fn placement(
    out: &Path,
    paths: &[PathBuf],
    build_id: u64,
) -> Result<(Vec<PathBuf>, Vec<String>)> {
    let generation = generation(build_id);
    if paths.is_empty() {
        let name = format!("nodes.{generation}.dvn");
        return Ok((vec![out.join(&name)], vec![name]));
    }
    let name = index_name(out);
    let mut targets = Vec::with_capacity(paths.len());
    for (i, dir) in paths.iter().enumerate() {
        let dir = dir.canonicalize().map_err(file_error(dir))?;
        if !dir.is_dir() {
            return Err(IndexError::InvalidArgument(format!(
                "{}: not a directory",
                dir.display()
            )));
        }
        let target = dir.join(format!("{name}.{generation}.{i}.dvn"));
        if targets
            .iter()
            .any(|t: &PathBuf| t.parent() == target.parent())
        {
            return Err(IndexError::InvalidArgument(format!(
                "{} is given twice in the paths",
                dir.display()
            )));
        }
        targets.push(target);
    }
    let stored = targets.iter().map(|t| t.display().to_string()).collect();
    Ok((targets, stored))
}

/// Builds abort at named steps to test that a crash there loses nothing.
pub(crate) use diskvec_io::failpoint;

/// A fresh generation number: the clock in nanoseconds mixed with the process id, so two
/// builds never share one.
pub(crate) fn new_build_id() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
        ^ ((std::process::id() as u64) << 32)
}

/// Bytes free to an unprivileged writer on the file system holding `dir`.
pub(crate) fn free_bytes(dir: &Path) -> std::io::Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let mut stat = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `c` is a NUL-terminated path alive for the call, and `stat` points at memory
    // large enough for a statvfs, which the call fills in when it returns 0.
    let rc = unsafe { libc::statvfs(c.as_ptr(), stat.as_mut_ptr()) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: statvfs returned 0, so it filled in the whole struct.
    let stat = unsafe { stat.assume_init() };
    #[allow(clippy::unnecessary_cast)] // the field types differ between targets
    Ok(stat.f_bavail as u64 * stat.f_frsize as u64)
}

/// Syncs a directory, so the names created or renamed in it survive a crash.
pub(crate) fn sync_dir(storage: &dyn Storage, dir: &Path) -> Result<()> {
    storage.sync_dir(dir).map_err(file_error(dir))
}

/// The commit: `meta.dvm.tmp`, streamed and synced by the build (`meta_writer::stage_meta`),
/// becomes the index's `meta.dvm` in one atomic switch.
fn switch_meta(storage: &dyn Storage, out: &Path) -> Result<()> {
    failpoint("build:meta-written");
    let meta_path = out.join(META_FILE);
    let staged = staged_path(out);
    storage
        .rename(&staged, &meta_path)
        .map_err(file_error(&meta_path))?;
    sync_dir(storage, out)
}

/// Steps 2-5 of a build once its files are written: syncs the directories of `written`
/// (node and navigation files), switches `meta.dvm` to the new generation (staged beside it),
/// and removes the previous generation's files and the intent record.
pub(crate) fn commit(
    storage: &dyn Storage,
    out: &Path,
    written: &[PathBuf],
    previous: &[PathBuf],
    intent: &Path,
) -> Result<()> {
    let mut dirs: Vec<&Path> = written.iter().filter_map(|t| t.parent()).collect();
    dirs.sort_unstable();
    dirs.dedup();
    for dir in dirs {
        sync_dir(storage, dir)?;
    }
    failpoint("build:nodes-written");
    switch_meta(storage, out)?;
    failpoint("build:committed");
    remove_previous(storage, out, previous, intent);
    Ok(())
}

/// The files of the generation `meta.dvm` in `out` names (node files, resolved, and the
/// navigation and compact code files, which may be absent in an index built before they
/// existed); `None` when
/// there is none or it cannot be read. The PQ codes are checksummed as they stream by, not
/// kept: a build reads this at its start and end, and at 10M x 768 the codes alone are 1.8
/// GiB, as much as a 2 GiB build's whole budget (it was killed for them).
fn files_in_use(out: &Path) -> Option<Vec<PathBuf>> {
    let meta = Meta::read_without_codes(&out.join(META_FILE)).ok()?;
    let mut files: Vec<PathBuf> = meta.paths.iter().map(|p| out.join(p)).collect();
    files.push(super::nav::nav_path(out, meta.build_id));
    files.push(super::compact::compact_path(out, meta.build_id));
    Some(files)
}

/// The node files the index in `out` uses now (to remove after the next commit).
pub(crate) fn current_files(out: &Path) -> Vec<PathBuf> {
    let mut files = files_in_use(out).unwrap_or_default();
    // An index of layout version 2 kept its single node file under this fixed name in its
    // own directory; its meta.dvm is no longer readable, so name the file here.
    let old = out.join(NODES_FILE);
    if old.exists() {
        files.push(old);
    }
    files
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// Holds the index directory for one build: a second build into the same directory is
/// refused while this one runs (its cleanup could otherwise remove this build's files).
pub(crate) struct BuildLock {
    _file: File,
}

pub(crate) fn lock(out: &Path) -> Result<BuildLock> {
    let path = out.join(LOCK_FILE);
    let file = File::create(&path).map_err(file_error(&path))?;
    match file.try_lock() {
        Ok(()) => Ok(BuildLock { _file: file }),
        Err(std::fs::TryLockError::WouldBlock) => Err(IndexError::InvalidArgument(format!(
            "{}: another build is writing this index",
            out.display()
        ))),
        Err(std::fs::TryLockError::Error(e)) => Err(file_error(&path)(e)),
    }
}

const LOCK_FILE: &str = ".build.lock";
const PENDING_PREFIX: &str = "pending.";

/// Records, before any node file of generation `build_id` exists, which files the build
/// will create (`new`) and which the index uses now (`old`, to remove once the new
/// generation is committed), so a crash leaves a list of exactly what to remove: names
/// alone cannot tell a leftover from another index's file on a shared path directory.
pub(crate) fn record_intent(
    storage: &dyn Storage,
    out: &Path,
    build_id: u64,
    targets: &[PathBuf],
    previous: &[PathBuf],
) -> Result<PathBuf> {
    let path = out.join(format!("{PENDING_PREFIX}{}", generation(build_id)));
    let mut text = String::new();
    for (kind, files) in [("new", targets), ("old", previous)] {
        for f in files {
            text.push_str(&format!("{kind} {}\n", f.display()));
        }
    }
    // Whole or absent: a torn record could name half the files to remove.
    write_atomic(storage, &path, text.as_bytes()).map_err(file_error(&path))?;
    Ok(path)
}

/// Removes what interrupted builds left, by their intent records in `out`: a build that
/// crashed before its switch leaves its new files (and their temporary names); one that
/// crashed after it leaves the previous generation's. Then the record, and a meta.dvm.tmp
/// that was never renamed.
pub(crate) fn remove_interrupted(storage: &dyn Storage, out: &Path) {
    let in_use = files_in_use(out).unwrap_or_default();
    let used = |f: &Path| in_use.iter().any(|u| same_file(u, f));
    let Ok(entries) = std::fs::read_dir(out) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        // The staged meta.dvm, and an intent record's own temporary file.
        if e.path() == staged_path(out)
            || (name.starts_with(&format!(".{PENDING_PREFIX}")) && name.ends_with(".tmp"))
        {
            remove_files(storage, &[e.path()]);
            continue;
        }
        if !name.starts_with(PENDING_PREFIX) {
            continue;
        }
        let text = std::fs::read_to_string(e.path()).unwrap_or_default();
        let listed = |kind: &str| -> Vec<PathBuf> {
            text.lines()
                .filter_map(|l| l.strip_prefix(kind))
                .map(PathBuf::from)
                .collect()
        };
        let (new, old) = (listed("new "), listed("old "));
        let committed = new.iter().any(|f| used(f));
        let mut leftovers = Vec::new();
        for f in if committed { &old } else { &new } {
            if !used(f) {
                leftovers.push(f.with_extension("tmp"));
                leftovers.push(f.clone());
            }
        }
        leftovers.retain(|f| f.exists());
        remove_then_forget(storage, &leftovers, &e.path());
    }
}

/// At open: removes what interrupted builds left (a budgeted build's scratch files are
/// several times the raw vectors), unless a build holds the directory now; a directory that
/// cannot be locked (read-only) is left as it is.
pub(crate) fn reclaim_if_idle(storage: &dyn Storage, out: &Path) {
    let pending = std::fs::read_dir(out).is_ok_and(|mut entries| {
        entries
            .any(|e| e.is_ok_and(|e| e.file_name().to_string_lossy().starts_with(PENDING_PREFIX)))
    });
    if !pending {
        return;
    }
    if let Ok(_lock) = lock(out) {
        remove_interrupted(storage, out);
    }
}

/// After the switch: removes the previous generation's files that the new meta.dvm does
/// not name, and this build's intent record.
pub(crate) fn remove_previous(
    storage: &dyn Storage,
    out: &Path,
    previous: &[PathBuf],
    intent: &Path,
) {
    let in_use = files_in_use(out).unwrap_or_default();
    let stale: Vec<PathBuf> = previous
        .iter()
        .filter(|p| p.exists() && !in_use.iter().any(|u| same_file(u, p)))
        .cloned()
        .collect();
    remove_then_forget(storage, &stale, intent);
}

/// Removes `files`, makes the removals durable, and only then removes `record`, the intent
/// record naming them: were the record's removal durable first (any later sync of its
/// directory does that), a crash could bring back files no record names, on path
/// directories other indexes share, where nothing would ever remove them. A file that
/// could not be removed keeps the record.
pub(crate) fn remove_then_forget(storage: &dyn Storage, files: &[PathBuf], record: &Path) {
    remove_files(storage, files);
    if files.iter().any(|f| f.exists()) {
        return;
    }
    let mut dirs: Vec<&Path> = files.iter().filter_map(|f| f.parent()).collect();
    dirs.sort_unstable();
    dirs.dedup();
    for dir in dirs {
        if let Err(e) = storage.sync_dir(dir) {
            log::warn!("could not sync {} after removals: {e}", dir.display());
            return;
        }
    }
    remove_files(storage, &[record.to_path_buf()]);
}

/// Removes `files`, logging what could not be removed (a leftover wastes space, nothing more).
/// The removals are not synced (`remove_then_forget` syncs those an intent record names).
pub(crate) fn remove_files(storage: &dyn Storage, files: &[PathBuf]) {
    for f in files {
        match storage.remove_file(f) {
            Ok(()) => log::info!("removed {}, which no index generation uses", f.display()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => log::warn!("could not remove unused {}: {e}", f.display()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_build_of_one_directory_is_refused_while_the_first_holds_it() {
        let dir = tempfile::tempdir().unwrap();
        let first = lock(dir.path()).unwrap();
        let err = lock(dir.path()).err().unwrap().to_string();
        assert!(err.contains("another build"), "{err}");
        drop(first);
        lock(dir.path()).unwrap();
    }

    #[test]
    fn interrupted_leftovers_are_known_by_their_record_not_by_their_names() {
        let dir = tempfile::tempdir().unwrap();
        let shared = dir.path().join("shared");
        std::fs::create_dir(&shared).unwrap();
        // Another index's file on a shared path directory, under a look-alike name.
        let foreign = shared.join("idx.00000000000000aa.0.dvn");
        std::fs::write(&foreign, b"theirs").unwrap();
        let ours = shared.join("idx.00000000000000bb.0.dvn");
        std::fs::write(&ours, b"half written").unwrap();
        std::fs::write(ours.with_extension("tmp"), b"temp").unwrap();
        let out = dir.path().join("idx");
        std::fs::create_dir(&out).unwrap();
        let fs = diskvec_io::storage::FsStorage;
        record_intent(&fs, &out, 0xbb, std::slice::from_ref(&ours), &[]).unwrap();
        remove_interrupted(&fs, &out);
        assert!(foreign.exists());
        assert!(!ours.exists() && !ours.with_extension("tmp").exists());
        assert!(std::fs::read_dir(&out).unwrap().next().is_none());
    }
}
