//! How a build replaces an index atomically (drawn in docs/format.md, "Commit").
//!
//! Every build is a new generation: its node files get names of their own
//! (`nodes.<generation>.dvn`, or `<index>.<generation>.<i>.dvn` on each storage path),
//! written and synced beside the files of the index in place, which stays searchable.
//! `meta.dvm` names the node files of its generation, so the one switch is writing a new
//! `meta.dvm` (temp file, fsync, rename over the old, fsync the directory). A crash before
//! that rename leaves the old index whole; after it, the new one. The files no `meta.dvm`
//! names (the previous generation, leftovers of an interrupted build) are removed after
//! the switch, and before a build starts.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use super::meta::Meta;
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

/// Builds that abort at a named step, to test that a crash there loses nothing: the
/// process aborts (as kill -9 would stop it) when `DISKVEC_FAILPOINT` names the step.
pub(crate) fn failpoint(step: &str) {
    if std::env::var("DISKVEC_FAILPOINT").is_ok_and(|v| v == step) {
        eprintln!("failpoint {step}: aborting");
        std::process::abort();
    }
}

/// Syncs a directory, so the names created or renamed in it survive a crash.
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(file_error(dir))
}

/// The commit: writes `meta_bytes` as the index's `meta.dvm` in one atomic switch.
pub(crate) fn write_meta(out: &Path, meta_bytes: &[u8]) -> Result<()> {
    let meta_tmp = out.join(format!("{META_FILE}.tmp"));
    {
        let mut f = File::create(&meta_tmp).map_err(file_error(&meta_tmp))?;
        f.write_all(meta_bytes).map_err(file_error(&meta_tmp))?;
        f.sync_all().map_err(file_error(&meta_tmp))?;
    }
    failpoint("build:meta-written");
    let meta_path = out.join(META_FILE);
    std::fs::rename(&meta_tmp, &meta_path).map_err(file_error(&meta_path))?;
    sync_dir(out)
}

/// The node files `meta.dvm` in `out` names, resolved; empty when there is none or it
/// cannot be read (then nothing is known to be in use, and nothing is removed for it).
fn files_in_use(out: &Path) -> Option<Vec<PathBuf>> {
    let meta = Meta::read(&out.join(META_FILE)).ok()?;
    Some(meta.paths.iter().map(|p| out.join(p)).collect())
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// Node files of this index in `out` and `paths` that the current `meta.dvm` does not
/// name: earlier generations and leftovers of interrupted builds. Nothing is listed when
/// `meta.dvm` cannot be read, since then nothing is known to be unused. `also` are files
/// of the previous generation to include wherever they live.
pub(crate) fn stale_files(out: &Path, paths: &[PathBuf], also: &[PathBuf]) -> Vec<PathBuf> {
    let Some(in_use) = files_in_use(out) else {
        return Vec::new();
    };
    let name = index_name(out);
    let mut candidates: Vec<PathBuf> = also.to_vec();
    let mut scan = |dir: &Path, ours: &dyn Fn(&str) -> bool| {
        if let Ok(entries) = std::fs::read_dir(dir) {
            for e in entries.flatten() {
                let file_name = e.file_name().to_string_lossy().into_owned();
                if ours(&file_name) {
                    candidates.push(e.path());
                }
            }
        }
    };
    scan(out, &|f: &str| {
        f == NODES_FILE
            || f == format!("{META_FILE}.tmp")
            || (f.starts_with("nodes.") && (f.ends_with(".dvn") || f.ends_with(".tmp")))
    });
    let prefix = format!("{name}.");
    for dir in paths {
        scan(dir, &|f: &str| {
            f.starts_with(&prefix) && (f.ends_with(".dvn") || f.ends_with(".tmp"))
        });
    }
    candidates.sort();
    candidates.dedup();
    candidates
        .into_iter()
        .filter(|c| c.exists() && !in_use.iter().any(|u| same_file(u, c)))
        .collect()
}

/// Removes `files`, logging what could not be removed (a leftover wastes space, nothing more).
pub(crate) fn remove_files(files: &[PathBuf]) {
    for f in files {
        match std::fs::remove_file(f) {
            Ok(()) => log::info!("removed {}, which no index generation uses", f.display()),
            Err(e) => log::warn!("could not remove unused {}: {e}", f.display()),
        }
    }
}

/// The node files the index in `out` uses now (to remove after the next commit).
pub(crate) fn current_files(out: &Path) -> Vec<PathBuf> {
    files_in_use(out).unwrap_or_default()
}
