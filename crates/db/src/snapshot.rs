//! Snapshots: a collection (or every collection) packed into one tar file with its SHA-256,
//! restorable on another database.
//!
//! ```text
//! <db>/snapshots/<collection>/<name>.snapshot    a collection's snapshots
//! <db>/snapshots/<collection>/shard/<name>.snapshot  its shard's (Qdrant's shard snapshots:
//!                                                same format, kept apart)
//! <db>/snapshots/<name>.snapshot                 full snapshots
//! <name>.snapshot.checksum                       beside each: its SHA-256, hex
//!
//! collection snapshot (tar):                     full snapshot (tar):
//!   diskvec-snapshot.json  what it is              diskvec-snapshot.json
//!   collection/manifest.dvc                        aliases.json
//!   collection/segments/<id>/...                   collections/<name>.snapshot ...
//!   collection/wal/...
//! ```
//! A snapshot is written under a temporary name and renamed when whole, so a listed
//! snapshot is always complete. Restoring unpacks into a hidden directory (which an open
//! removes, should the process die) and renames it into place: the collection appears whole
//! or not at all.

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::file_error;
use crate::manifest::{Manifest, MANIFEST_FILE};
use crate::{Collection, Database, DbError, Result};

const EXTENSION: &str = "snapshot";
const HEADER_FILE: &str = "diskvec-snapshot.json";
const FORMAT: u32 = 1;

/// One snapshot file, as listed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SnapshotInfo {
    pub name: String,
    /// UTC, `YYYY-MM-DDTHH:MM:SS`.
    pub creation_time: Option<String>,
    pub size: u64,
    /// SHA-256 of the file, hex.
    pub checksum: Option<String>,
}

#[derive(Serialize, Deserialize)]
struct Header {
    format: u32,
    kind: String,
    #[serde(default)]
    collection: Option<String>,
    #[serde(default)]
    last_op: Option<u64>,
}

/// Which shelf of snapshots a call means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SnapshotsOf<'a> {
    /// Full snapshots: every collection.
    Database,
    /// A collection's snapshots.
    Collection(&'a str),
    /// The snapshots of a collection's shard (Qdrant's shard snapshots API; a local
    /// collection is one shard), kept apart from the collection's own.
    Shard(&'a str),
}

/// A writer that hashes what passes through it.
struct Hashing<W> {
    inner: W,
    hash: Sha256,
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hash.update(&buf[..n]);
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// SHA-256 of a file, hex.
pub fn file_checksum(path: &Path) -> Result<String> {
    let mut f = File::open(path).map_err(file_error(path))?;
    let mut hash = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).map_err(file_error(path))?;
        if n == 0 {
            return Ok(hex(&hash.finalize()));
        }
        hash.update(&buf[..n]);
    }
}

/// `YYYY-MM-DD-HH-MM-SS` (for names) and `YYYY-MM-DDTHH:MM:SS` of a UTC time.
fn utc(secs: u64) -> (String, String) {
    let t = crate::UtcTime::from_unix(secs);
    let iso = t.iso();
    (iso.replace(['T', ':'], "-"), iso)
}

/// A snapshot name a caller gave: a plain file name of ours, never a path.
fn check_snapshot_name(name: &str) -> Result<()> {
    let plain = !name.is_empty()
        && !name.starts_with('.')
        && !name.contains(['/', '\\', '\0'])
        && name.ends_with(&format!(".{EXTENSION}"));
    if plain {
        Ok(())
    } else {
        Err(DbError::NotFound(format!("Snapshot {name} not found")))
    }
}

impl Database {
    /// Where snapshots live: `<db>/snapshots`.
    pub fn snapshots_dir(&self) -> PathBuf {
        self.dir().join("snapshots")
    }

    fn snapshot_dir_of(&self, of: SnapshotsOf) -> Result<PathBuf> {
        Ok(match of {
            SnapshotsOf::Collection(name) => {
                let c = self.collection(name)?;
                self.snapshots_dir().join(c.name())
            }
            SnapshotsOf::Shard(name) => {
                let c = self.collection(name)?;
                self.snapshots_dir().join(c.name()).join("shard")
            }
            SnapshotsOf::Database => self.snapshots_dir(),
        })
    }

    /// Snapshots a collection (`Collection::copy_consistent`): consistent at one operation,
    /// and restorable elsewhere with `restore_collection`.
    pub fn create_snapshot(&self, collection: &str) -> Result<SnapshotInfo> {
        self.create_snapshot_then(collection, || {})
    }

    /// [`Database::create_snapshot`], calling `copied` once the collection's consistent copy
    /// is made (before it is packed): the collection may change from then on.
    pub fn create_snapshot_then(
        &self,
        collection: &str,
        copied: impl FnOnce(),
    ) -> Result<SnapshotInfo> {
        self.snapshot_onto(SnapshotsOf::Collection(collection), collection, copied)
    }

    /// A snapshot of a collection kept among its shard's snapshots ([`SnapshotsOf::Shard`]).
    pub fn create_shard_snapshot(&self, collection: &str) -> Result<SnapshotInfo> {
        self.snapshot_onto(SnapshotsOf::Shard(collection), collection, || {})
    }

    fn snapshot_onto(
        &self,
        shelf: SnapshotsOf,
        collection: &str,
        copied: impl FnOnce(),
    ) -> Result<SnapshotInfo> {
        let c = self.collection(collection)?;
        let dir = self.snapshot_dir_of(shelf)?;
        // Each snapshot its own staging: several of one collection may be taken at once.
        let staging = self
            .snapshots_dir()
            .join(format!(".staging-{}", crate::storage::unique_suffix()));
        let copied_now = c.copy_consistent(&staging.join("collection"));
        copied();
        let copied = copied_now;
        let packed = copied.and_then(|(last_op, _)| {
            let header = Header {
                format: FORMAT,
                kind: "collection".into(),
                collection: Some(c.name().to_string()),
                last_op: Some(last_op),
            };
            write_archive(self.storage(), &dir, c.name(), &header, &|b| {
                b.append_dir_all("collection", staging.join("collection"))
            })
        });
        let _ = fs::remove_dir_all(&staging);
        packed
    }

    /// Snapshots every collection, with the aliases.
    pub fn create_full_snapshot(&self) -> Result<SnapshotInfo> {
        let staging = self
            .snapshots_dir()
            .join(format!(".staging-{}", crate::storage::unique_suffix()));
        fs::create_dir_all(&staging).map_err(file_error(&staging))?;
        let built = (|| {
            let mut parts = Vec::new();
            for name in self.collection_names() {
                let info = self.create_snapshot(&name)?;
                let from = self.snapshots_dir().join(&name).join(&info.name);
                let to = staging.join(format!("{name}.{EXTENSION}"));
                fs::rename(&from, &to).map_err(file_error(&from))?;
                let _ = fs::remove_file(from.with_extension("snapshot.checksum"));
                parts.push(to);
            }
            let aliases = serde_json::to_vec(&self.aliases()).unwrap_or_default();
            let header = Header {
                format: FORMAT,
                kind: "full".into(),
                collection: None,
                last_op: None,
            };
            write_archive(
                self.storage(),
                &self.snapshots_dir(),
                "full-snapshot",
                &header,
                &|b| {
                    let mut h = tar::Header::new_gnu();
                    h.set_size(aliases.len() as u64);
                    h.set_mode(0o644);
                    h.set_cksum();
                    b.append_data(&mut h, "aliases.json", aliases.as_slice())?;
                    for p in &parts {
                        let name = p.file_name().unwrap_or_default().to_string_lossy();
                        b.append_path_with_name(p, format!("collections/{name}"))?;
                    }
                    Ok(())
                },
            )
        })();
        let _ = fs::remove_dir_all(&staging);
        built
    }

    /// The snapshots on a shelf, oldest first.
    pub fn list_snapshots(&self, of: SnapshotsOf) -> Result<Vec<SnapshotInfo>> {
        let dir = self.snapshot_dir_of(of)?;
        let mut out = Vec::new();
        let Ok(entries) = fs::read_dir(&dir) else {
            return Ok(out);
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if check_snapshot_name(&name).is_err() {
                continue;
            }
            let Ok(meta) = e.metadata() else { continue };
            if !meta.is_file() {
                continue;
            }
            let created = creation_time(&meta);
            let checksum = fs::read_to_string(dir.join(format!("{name}.checksum")))
                .ok()
                .map(|s| s.trim().to_string());
            out.push(SnapshotInfo {
                name,
                creation_time: created,
                size: meta.len(),
                checksum,
            });
        }
        out.sort_by(|a, b| (&a.creation_time, &a.name).cmp(&(&b.creation_time, &b.name)));
        Ok(out)
    }

    /// The file of a listed snapshot (`NotFound` for any other name, paths included).
    pub fn snapshot_file(&self, of: SnapshotsOf, name: &str) -> Result<PathBuf> {
        check_snapshot_name(name)?;
        let path = self.snapshot_dir_of(of)?.join(name);
        if !path.is_file() {
            return Err(DbError::NotFound(format!("Snapshot {name} not found")));
        }
        Ok(path)
    }

    pub fn delete_snapshot(&self, of: SnapshotsOf, name: &str) -> Result<()> {
        let path = self.snapshot_file(of, name)?;
        fs::remove_file(&path).map_err(file_error(&path))?;
        let _ = fs::remove_file(path.with_extension("snapshot.checksum"));
        Ok(())
    }

    /// Restores the collection snapshot at `archive` as collection `name`, replacing one
    /// of that name (Qdrant's recovery). `checksum`, if given, must be the file's SHA-256.
    pub fn restore_collection(
        &self,
        name: &str,
        archive: &Path,
        checksum: Option<&str>,
    ) -> Result<Arc<Collection>> {
        crate::db::check_name(name)?;
        if let Some(want) = checksum {
            let got = file_checksum(archive)?;
            if !got.eq_ignore_ascii_case(want) {
                return Err(DbError::BadRequest(format!(
                    "Snapshot checksum mismatch: expected {want}, got {got}"
                )));
            }
        }
        self.put_in_place(name, "the snapshot's collection", |unpacked| {
            self.unpack_collection(archive, unpacked)
        })
    }

    /// Makes collection `name` (replacing one of that name) from the files `fill` puts in a
    /// hidden directory (which an open removes, should the process die): checked to keep
    /// every file inside, made durable, then renamed into place, so the collection appears
    /// whole or not at all. `what` names the source in a refusal.
    pub(crate) fn put_in_place(
        &self,
        name: &str,
        what: &str,
        fill: impl FnOnce(&Path) -> Result<()>,
    ) -> Result<Arc<Collection>> {
        crate::db::check_name(name)?;
        let root = self.dir().join("collections");
        // Its own directory: two restores at once never share one.
        let unpacked = root.join(format!(".restoring-{}", crate::storage::unique_suffix()));
        let result = fill(&unpacked).and_then(|()| {
            let manifest = Manifest::read(self.storage(), &unpacked)?;
            if !manifest.config.paths.is_empty() || manifest.config.wal_path.is_some() {
                return Err(DbError::InvalidInput(format!(
                    "{what} keeps files outside its directory"
                )));
            }
            sync_tree(&unpacked)?;
            self.adopt_collection(name, &unpacked)
        });
        if let Err(e) = crate::places::remove_tree(self.storage(), &unpacked) {
            log::warn!("removing {}: {e}", unpacked.display());
        }
        result
    }

    fn unpack_collection(&self, archive: &Path, into: &Path) -> Result<()> {
        let bad = |m: String| DbError::Corrupt {
            path: archive.to_path_buf(),
            message: m,
        };
        let file = File::open(archive).map_err(file_error(archive))?;
        let mut tar = tar::Archive::new(file);
        let mut has_header = false;
        fs::create_dir_all(into).map_err(file_error(into))?;
        for entry in tar
            .entries()
            .map_err(|e| bad(format!("not a snapshot archive: {e}")))?
        {
            let mut entry = entry.map_err(|e| bad(format!("damaged archive: {e}")))?;
            let path = entry
                .path()
                .map_err(|e| bad(format!("damaged archive: {e}")))?
                .into_owned();
            check_entry(&entry, &path).map_err(bad)?;
            if path == Path::new(HEADER_FILE) {
                let read = read_header(&mut entry).map_err(bad)?;
                // Said at once (the header is written first): another kind of snapshot is
                // named as such, not by the first entry a collection's would not have.
                check_collection_header(&read).map_err(bad)?;
                has_header = true;
                continue;
            }
            let Ok(inside) = path.strip_prefix("collection") else {
                return Err(bad(format!("unexpected entry {}", path.display())));
            };
            if inside.as_os_str().is_empty() {
                continue;
            }
            // `unpack_in` refuses entries that would land outside `into`.
            let placed = entry
                .unpack_in(into)
                .map_err(|e| bad(format!("{}: {e}", path.display())))?;
            if !placed {
                return Err(bad(format!("entry {} leaves the archive", path.display())));
            }
        }
        if !has_header {
            return Err(bad("no snapshot header: not a diskvec snapshot".into()));
        }
        // Entries were unpacked under `into/collection/`; the collection is that directory.
        let nested = into.join("collection");
        if !nested.join(MANIFEST_FILE).is_file() {
            return Err(bad("the snapshot has no manifest".into()));
        }
        for name in fs::read_dir(&nested)
            .map_err(file_error(&nested))?
            .flatten()
            .map(|e| e.file_name())
        {
            fs::rename(nested.join(&name), into.join(&name)).map_err(file_error(&nested))?;
        }
        fs::remove_dir(&nested).map_err(file_error(&nested))?;
        Ok(())
    }
}

/// Largest snapshot header read (it is a few dozen bytes).
const MAX_HEADER_BYTES: u64 = 64 << 10;
/// Largest manifest a snapshot may carry (a manifest of thousands of segments is well below).
const MAX_MANIFEST_BYTES: u64 = 64 << 20;

/// Refuses an archive entry a snapshot of ours never holds: anything but a plain file or a
/// directory (links could point a later write outside the database, devices and FIFOs hang
/// a reader), a sparse file (a few bytes declaring gigabytes), or a header or manifest
/// larger than any we write.
fn check_entry<R: Read>(entry: &tar::Entry<R>, path: &Path) -> std::result::Result<(), String> {
    use tar::EntryType;
    let kind = entry.header().entry_type();
    if !matches!(kind, EntryType::Regular | EntryType::Directory) {
        return Err(format!(
            "entry {} is a {kind:?}: a snapshot holds only plain files and directories",
            path.display()
        ));
    }
    let size = entry.size();
    let limit = if path == Path::new(HEADER_FILE) {
        MAX_HEADER_BYTES
    } else if path == Path::new("collection").join(MANIFEST_FILE) {
        MAX_MANIFEST_BYTES
    } else {
        u64::MAX
    };
    if size > limit {
        return Err(format!(
            "entry {} declares {size} bytes; at most {limit} are read",
            path.display()
        ));
    }
    Ok(())
}

/// A snapshot's header, read through its size cap.
fn read_header(entry: &mut impl Read) -> std::result::Result<Header, String> {
    let mut text = Vec::new();
    entry
        .take(MAX_HEADER_BYTES + 1)
        .read_to_end(&mut text)
        .map_err(|e| format!("damaged header: {e}"))?;
    if text.len() as u64 > MAX_HEADER_BYTES {
        return Err(format!("the header is over {MAX_HEADER_BYTES} bytes"));
    }
    serde_json::from_slice(&text).map_err(|e| format!("bad header: {e}"))
}

/// Removes what snapshots being taken when the process died left in `dir` and the shelves
/// under it (stagings, archives being packed). Called as a database opens, when no snapshot
/// of it can be under way (the database is held by one process).
pub(crate) fn sweep_unfinished(storage: &dyn crate::storage::Storage, dir: &Path, depth: u32) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Ok(kind) = e.file_type() else { continue };
        let path = e.path();
        if name.starts_with(".staging-") && kind.is_dir() {
            let _ = crate::places::remove_tree(storage, &path);
        } else if name.starts_with('.') && name.ends_with(".tmp") && kind.is_file() {
            let _ = fs::remove_file(&path);
        } else if kind.is_dir() && depth > 0 {
            sweep_unfinished(storage, &path, depth - 1);
        }
    }
}

/// Why a snapshot's header is not that of a collection snapshot this build restores.
fn check_collection_header(h: &Header) -> std::result::Result<(), String> {
    if h.format != FORMAT || h.kind != "collection" {
        return Err(format!(
            "a {} snapshot of format {}; this build restores collection snapshots of format \
             {FORMAT}",
            h.kind, h.format
        ));
    }
    Ok(())
}

/// Makes every file and directory under `dir` durable.
pub(crate) fn sync_tree(dir: &Path) -> Result<()> {
    for e in fs::read_dir(dir).map_err(file_error(dir))?.flatten() {
        let path = e.path();
        // The entry's own type (a link is not followed): only what an unpack made is here.
        let kind = e.file_type().map_err(file_error(&path))?;
        if kind.is_dir() {
            sync_tree(&path)?;
        } else if !kind.is_file() {
            return Err(DbError::InvalidInput(format!(
                "{} is neither a file nor a directory",
                path.display()
            )));
        } else {
            File::open(&path)
                .and_then(|f| f.sync_all())
                .map_err(file_error(&path))?;
        }
    }
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(file_error(dir))
}

/// Packs an archive into `dir/<prefix>-<time>.snapshot` (temporary name first), with its
/// checksum file; both durable before this returns.
fn write_archive(
    storage: &dyn crate::storage::Storage,
    dir: &Path,
    prefix: &str,
    header: &Header,
    fill: &dyn Fn(&mut tar::Builder<Hashing<File>>) -> io::Result<()>,
) -> Result<SnapshotInfo> {
    fs::create_dir_all(dir).map_err(file_error(dir))?;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (stamp, _) = utc(now);
    let temp = dir.join(format!(".pack-{}.tmp", crate::storage::unique_suffix()));
    let file = File::create(&temp).map_err(file_error(&temp))?;
    let mut builder = tar::Builder::new(Hashing {
        inner: file,
        hash: Sha256::new(),
    });
    builder.follow_symlinks(false);
    let packed = (|| {
        let head = serde_json::to_vec(header).unwrap_or_default();
        let mut h = tar::Header::new_gnu();
        h.set_size(head.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        builder.append_data(&mut h, HEADER_FILE, head.as_slice())?;
        fill(&mut builder)?;
        let mut done = builder.into_inner()?;
        done.flush()?;
        done.inner.sync_all()?;
        Ok::<_, io::Error>(hex(&done.hash.finalize()))
    })();
    let checksum = match packed {
        Ok(c) => c,
        Err(e) => {
            let _ = fs::remove_file(&temp);
            return Err(DbError::File {
                path: dir.join(format!("{prefix}-{stamp}.{EXTENSION}")),
                source: e,
            });
        }
    };
    // Names are picked and taken under one lock: two snapshots finished in the same second
    // get two names (`-1`, `-2`, ...), neither replacing the other.
    static NAMING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let naming = NAMING.lock().unwrap_or_else(|e| e.into_inner());
    let mut name = format!("{prefix}-{stamp}.{EXTENSION}");
    let mut n = 1;
    while dir.join(&name).exists() {
        name = format!("{prefix}-{stamp}-{n}.{EXTENSION}");
        n += 1;
    }
    let path = dir.join(&name);
    // Durable before the archive is renamed into place: a listed snapshot always has its
    // checksum beside it.
    let sum_path = dir.join(format!("{name}.checksum"));
    let placed = crate::storage::write_atomic(storage, &sum_path, checksum.as_bytes())
        .map_err(file_error(&sum_path))
        .and_then(|()| fs::rename(&temp, &path).map_err(file_error(&path)));
    drop(naming);
    if let Err(e) = placed {
        let _ = fs::remove_file(&temp);
        return Err(e);
    }
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(file_error(dir))?;
    let meta = fs::metadata(&path).map_err(file_error(&path))?;
    Ok(SnapshotInfo {
        name,
        // As a listing reports it (the file's time, after the packing): the time the name
        // was stamped with can be a second earlier.
        creation_time: creation_time(&meta),
        size: meta.len(),
        checksum: Some(checksum),
    })
}

/// A snapshot file's creation time as listed: its modification time, in UTC.
fn creation_time(meta: &fs::Metadata) -> Option<String> {
    meta.modified()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map(|d| utc(d.as_secs()).1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_carry_the_time_with_dashes() {
        assert_eq!(utc(1_795_737_599).0, "2026-11-26-23-59-59");
    }

    #[test]
    fn snapshot_names_are_plain_file_names() {
        assert!(check_snapshot_name("c-2026-11-27-10-00-00.snapshot").is_ok());
        for bad in [
            "/etc/passwd",
            "../../x.snapshot",
            ".hidden.snapshot",
            "x.tar",
            "",
        ] {
            assert!(check_snapshot_name(bad).is_err(), "{bad}");
        }
    }
}
