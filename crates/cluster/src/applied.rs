//! How far a node's replica has applied its shard's log: a small append-only file per
//! replica, `<db>/cluster/<replica>.applied`, made durable after every message applied.
//!
//! A replica applies message n (its writes durable in the collection's own WAL), then
//! records n here. A crash between the two applies n a second time after restart, which
//! leaves the same state: every message is one operation (the router splits batches), and
//! each operation applied twice in a row equals applying it once. A crash can never apply
//! n + 1 before n is recorded. Format (docs/format.md, "Applied mark"):
//!
//! ```text
//! header, 24 bytes: "DVAPPLY1" | version u32 = 1 | collection uid u64 | CRC-32C of the 20 before
//! then 16 bytes per message applied: sequence u64 | CRC-32C of (uid, sequence) u32 | 0 u32
//! ```
//!
//! The last record whose checksum holds is the mark; a torn record at the end is ignored.

use std::path::{Path, PathBuf};

use diskvec_db::storage::{self, Storage, StorageFile};

use crate::ClusterError;

const MAGIC: &[u8; 8] = b"DVAPPLY1";
const VERSION: u32 = 1;
const HEADER: usize = 24;
const RECORD: usize = 16;
/// Past this size the file is rewritten with its last record only.
const ROTATE_AT: u64 = 64 * 1024;

pub struct AppliedMark {
    storage: &'static dyn Storage,
    path: PathBuf,
    file: Box<dyn StorageFile>,
    uid: u64,
    seq: u64,
}

fn io_error(path: &Path) -> impl Fn(std::io::Error) -> ClusterError + '_ {
    move |e| ClusterError::Io(format!("{}: {e}", path.display()))
}

fn header(uid: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&uid.to_le_bytes());
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

fn record(uid: u64, seq: u64) -> [u8; RECORD] {
    let mut out = [0u8; RECORD];
    out[..8].copy_from_slice(&seq.to_le_bytes());
    let crc = crc32c::crc32c_append(crc32c::crc32c(&uid.to_le_bytes()), &seq.to_le_bytes());
    out[8..12].copy_from_slice(&crc.to_le_bytes());
    out
}

/// A whole mark file at `seq`: its header, and its one record unless at 0.
fn file_bytes(uid: u64, seq: u64) -> Vec<u8> {
    let mut bytes = header(uid);
    if seq > 0 {
        bytes.extend_from_slice(&record(uid, seq));
    }
    bytes
}

/// (uid, last sequence applied, bytes up to the end of the last valid record) from a mark
/// file's bytes.
fn parse(bytes: &[u8], path: &Path) -> Result<(u64, u64, usize), ClusterError> {
    let corrupt = |why: &str| ClusterError::Corrupt(format!("{}: {why}", path.display()));
    if bytes.len() < HEADER || &bytes[..8] != MAGIC {
        return Err(corrupt("not an applied mark (bad magic or short header)"));
    }
    let version = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
    if version != VERSION {
        return Err(corrupt(&format!(
            "format version {version}, this build reads {VERSION}"
        )));
    }
    let crc = u32::from_le_bytes(bytes[20..24].try_into().expect("4 bytes"));
    if crc32c::crc32c(&bytes[..20]) != crc {
        return Err(corrupt("header checksum mismatch"));
    }
    let uid = u64::from_le_bytes(bytes[12..20].try_into().expect("8 bytes"));
    let mut seq = 0;
    let mut end = HEADER;
    for chunk in bytes[HEADER..].chunks_exact(RECORD) {
        let s = u64::from_le_bytes(chunk[..8].try_into().expect("8 bytes"));
        if chunk != record(uid, s) || s < seq {
            break;
        }
        seq = s;
        end += RECORD;
    }
    Ok((uid, seq, end))
}

pub fn mark_path(dir: &Path, replica: &str) -> PathBuf {
    dir.join(format!("{replica}.applied"))
}

impl AppliedMark {
    /// The mark of `replica` in `dir`: (collection uid, last sequence applied), or `None`
    /// when there is none.
    pub fn read(dir: &Path, replica: &str) -> Result<Option<(u64, u64)>, ClusterError> {
        let path = mark_path(dir, replica);
        let fs: &dyn Storage = &storage::FsStorage;
        if !fs.exists(&path) {
            return Ok(None);
        }
        let bytes = fs.read(&path).map_err(io_error(&path))?;
        parse(&bytes, &path).map(|(uid, seq, _)| Some((uid, seq)))
    }

    /// Starts a mark at sequence 0 for a replica of the collection incarnation `uid`,
    /// replacing any mark the name had.
    pub fn create(dir: &Path, replica: &str, uid: u64) -> Result<Self, ClusterError> {
        Self::create_at(dir, replica, uid, 0)
    }

    /// Starts a mark at sequence `seq` (a replica restored from a snapshot taken there), in
    /// one atomic write.
    pub fn create_at(dir: &Path, replica: &str, uid: u64, seq: u64) -> Result<Self, ClusterError> {
        let fs: &'static dyn Storage = &storage::FsStorage;
        storage::create_dir_all_durable(fs, dir).map_err(io_error(dir))?;
        let path = mark_path(dir, replica);
        storage::write_atomic(fs, &path, &file_bytes(uid, seq)).map_err(io_error(&path))?;
        Self::open(dir, replica)
    }

    /// Opens an existing mark to go on recording.
    pub fn open(dir: &Path, replica: &str) -> Result<Self, ClusterError> {
        let fs: &'static dyn Storage = &storage::FsStorage;
        let path = mark_path(dir, replica);
        let bytes = fs.read(&path).map_err(io_error(&path))?;
        let (uid, seq, valid) = parse(&bytes, &path)?;
        if valid != bytes.len() {
            // A torn or unwritten record (zeros after a crash) ends the valid part: cut
            // there, or the records appended after it would never be read.
            fs.truncate(&path, valid as u64).map_err(io_error(&path))?;
        }
        let file = fs.open_append(&path).map_err(io_error(&path))?;
        let mut mark = Self {
            storage: fs,
            path,
            file,
            uid,
            seq,
        };
        if mark.file.len() >= ROTATE_AT {
            mark.rotate()?;
        }
        Ok(mark)
    }

    pub fn uid(&self) -> u64 {
        self.uid
    }

    pub fn sequence(&self) -> u64 {
        self.seq
    }

    /// Records that every message up to `seq` is applied; durable when this returns.
    pub fn record(&mut self, seq: u64) -> Result<(), ClusterError> {
        self.file
            .append(&record(self.uid, seq))
            .and_then(|()| self.file.sync_data())
            .map_err(io_error(&self.path))?;
        self.seq = seq;
        if self.file.len() >= ROTATE_AT {
            self.rotate()?;
        }
        Ok(())
    }

    /// Rewrites the file as its header and last record (atomically replaced).
    fn rotate(&mut self) -> Result<(), ClusterError> {
        storage::write_atomic(self.storage, &self.path, &file_bytes(self.uid, self.seq))
            .map_err(io_error(&self.path))?;
        self.file = self
            .storage
            .open_append(&self.path)
            .map_err(io_error(&self.path))?;
        Ok(())
    }

    /// Removes the mark of `replica` (durably), if any.
    pub fn remove(dir: &Path, replica: &str) -> Result<(), ClusterError> {
        let fs: &dyn Storage = &storage::FsStorage;
        let path = mark_path(dir, replica);
        if fs.exists(&path) {
            fs.remove_file(&path).map_err(io_error(&path))?;
            fs.sync_dir(dir).map_err(io_error(dir))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mark_survives_reopening_rotation_and_a_torn_record() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(AppliedMark::read(dir.path(), "docs@0").unwrap(), None);
        let mut mark = AppliedMark::create(dir.path(), "docs@0", 77).unwrap();
        for seq in 1..=5000 {
            mark.record(seq).unwrap();
        }
        drop(mark);
        let path = mark_path(dir.path(), "docs@0");
        assert!(
            std::fs::metadata(&path).unwrap().len() < ROTATE_AT,
            "rotated"
        );
        assert_eq!(
            AppliedMark::read(dir.path(), "docs@0").unwrap(),
            Some((77, 5000))
        );
        // A torn append (half a record) is ignored, then cut on open.
        let mut bytes = std::fs::read(&path).unwrap();
        bytes.extend_from_slice(&record(77, 5001)[..9]);
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(
            AppliedMark::read(dir.path(), "docs@0").unwrap(),
            Some((77, 5000))
        );
        let mut mark = AppliedMark::open(dir.path(), "docs@0").unwrap();
        mark.record(5001).unwrap();
        assert_eq!(
            AppliedMark::read(dir.path(), "docs@0").unwrap(),
            Some((77, 5001))
        );
        // A replica restored from a snapshot starts where the snapshot was taken.
        let restored = AppliedMark::create_at(dir.path(), "docs@1", 78, 420).unwrap();
        assert_eq!((restored.uid(), restored.sequence()), (78, 420));
        assert_eq!(
            AppliedMark::read(dir.path(), "docs@1").unwrap(),
            Some((78, 420))
        );
        // A record of another incarnation (or zeros) ends the valid part, and is cut on
        // open so that what is appended next counts.
        let mut bytes = std::fs::read(&path).unwrap();
        bytes.extend_from_slice(&record(78, 6000));
        bytes.extend_from_slice(&[0u8; RECORD]);
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(
            AppliedMark::read(dir.path(), "docs@0").unwrap().unwrap().1,
            5001
        );
        let mut mark = AppliedMark::open(dir.path(), "docs@0").unwrap();
        mark.record(5002).unwrap();
        drop(mark);
        assert_eq!(
            AppliedMark::read(dir.path(), "docs@0").unwrap().unwrap().1,
            5002
        );
        let mut bytes = std::fs::read(&path).unwrap();
        // A damaged header is an error naming the file, not a mark of 0.
        bytes[13] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        let err = AppliedMark::read(dir.path(), "docs@0")
            .unwrap_err()
            .to_string();
        assert!(err.contains("docs@0.applied"), "{err}");
        AppliedMark::remove(dir.path(), "docs@0").unwrap();
        assert_eq!(AppliedMark::read(dir.path(), "docs@0").unwrap(), None);
    }
}
