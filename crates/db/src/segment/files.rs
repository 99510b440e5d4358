//! A sealed segment's own files besides its DiskANN index (drawn in docs/format.md):
//!
//! `points.dvp`: the external id, version and payload of every offset, written once at
//! sealing.
//! ```text
//! 0        8        12       16       24
//! +--------+--------+--------+--------+------------------------------------------+
//! | magic  | crc32c | version| count  | count x (kind u8, id u128 LE)            |
//! |DVPOINTS| of 12..| u32 LE | u64 LE | count x version u64 LE                   |
//! |        |        |        |        | (count+1) x payload end offset u64 LE    |
//! |        |        |        |        | payloads: JSON objects, back to back     |
//! +--------+--------+--------+--------+------------------------------------------+
//! ```
//! `deleted.<generation>.dvd`: the deleted offsets as of a manifest generation.
//! ```text
//! 0        8        12       16
//! +--------+--------+--------+--------------------------------+
//! | magic  | crc32c | version| roaring bitmap, portable format |
//! |DVDELETE| of 12..| u32 LE |                                |
//! +--------+--------+--------+--------------------------------+
//! ```

use super::ids::IdColumn;
use super::payloads::{PayloadColumn, PayloadPlacement};
use std::fs::File;
use std::io::{Read, Write};
use std::path::Path;

use diskvec_io::storage::{write_atomic, write_atomic_with, Storage, StorageWriter};

use roaring::RoaringBitmap;

use crate::error::file_error;
use crate::{DbError, Payload, PointId, Result};

pub const POINTS_FILE: &str = "points.dvp";
const POINTS_MAGIC: &[u8; 8] = b"DVPOINTS";
const DELETED_MAGIC: &[u8; 8] = b"DVDELETE";
const VERSION: u32 = 1;

fn corrupt(path: &Path, message: impl Into<String>) -> DbError {
    DbError::Corrupt {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

fn frame(magic: &[u8; 8], body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + body.len());
    out.extend_from_slice(magic);
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(body);
    let crc = crc32c::crc32c(&out[12..]);
    out[8..12].copy_from_slice(&crc.to_le_bytes());
    out
}

fn unframe<'a>(magic: &[u8; 8], bytes: &'a [u8], path: &Path) -> Result<&'a [u8]> {
    if bytes.len() < 16 || &bytes[..8] != magic {
        return Err(corrupt(path, "bad magic or too short"));
    }
    let stored = u32::from_le_bytes(bytes[8..12].try_into().unwrap());
    if crc32c::crc32c(&bytes[12..]) != stored {
        return Err(corrupt(path, "checksum mismatch"));
    }
    check_frame_version(&bytes[12..16], path)?;
    Ok(&bytes[16..])
}

/// Refuses a frame whose version field (`field`, 4 bytes) this build does not read.
fn check_frame_version(field: &[u8], path: &Path) -> Result<()> {
    let version = u32::from_le_bytes(field.try_into().unwrap());
    if version != VERSION {
        return Err(corrupt(
            path,
            format!("version {version} is not supported (this build reads {VERSION})"),
        ));
    }
    Ok(())
}

/// Writes `points.dvp` a buffer at a time, atomically and durably (`write_atomic_with`),
/// holding beside the points only their payloads' JSON back to back: a merge of 1M points
/// once built the file three times over in DRAM at its memory peak.
pub(crate) fn write_points(
    storage: &dyn Storage,
    path: &Path,
    ids: &[PointId],
    versions: &[u64],
    payloads: &PayloadJson,
) -> Result<()> {
    let PayloadJson { text: jsons, ends } = payloads;
    write_atomic_with(storage, path, |file| {
        let mut out = CrcWriter {
            inner: std::io::BufWriter::with_capacity(1 << 20, StorageWriter(&mut *file)),
            crc: 0,
        };
        out.inner.write_all(POINTS_MAGIC)?;
        out.inner.write_all(&[0; 4])?;
        out.write_all(&VERSION.to_le_bytes())?;
        out.write_all(&(ids.len() as u64).to_le_bytes())?;
        for id in ids {
            let (kind, raw) = match *id {
                PointId::Num(n) => (0u8, n as u128),
                PointId::Uuid(u) => (1u8, u.get()),
            };
            out.write_all(&[kind])?;
            out.write_all(&raw.to_le_bytes())?;
        }
        for v in versions {
            out.write_all(&v.to_le_bytes())?;
        }
        for e in ends {
            out.write_all(&e.to_le_bytes())?;
        }
        out.write_all(jsons)?;
        let crc = out.crc;
        out.inner.flush()?;
        drop(out);
        file.write_at(8, &crc.to_le_bytes())
    })
    .map_err(file_error(path))
}

/// Payloads as `points.dvp` stores them: JSON text back to back, and where each ends.
/// A build from sealed segments keeps its points' payloads this way: a parsed map is an
/// allocation per key and value, several times its text (a 10M import in 4 GiB was
/// OOM-killed as a merge of 2M points gathered them: RSS up 1 GB in 4 s).
#[derive(Clone, Debug)]
pub(crate) struct PayloadJson {
    pub text: Vec<u8>,
    /// `ends[i + 1]` is where payload `i` ends; `ends[0]` is 0.
    pub ends: Vec<u64>,
}

impl Default for PayloadJson {
    fn default() -> Self {
        Self {
            text: Vec::new(),
            ends: vec![0],
        }
    }
}

impl PayloadJson {
    pub fn from_payloads(payloads: &[Payload]) -> Self {
        let mut json = Self::default();
        json.ends.reserve(payloads.len());
        for p in payloads {
            json.push(p);
        }
        json
    }

    pub fn push(&mut self, payload: &Payload) {
        serde_json::to_writer(&mut self.text, payload).expect("a JSON map serializes into memory");
        self.ends.push(self.text.len() as u64);
    }
}

/// Passes bytes on, keeping the CRC-32C of what passed (the frame's checksum covers every
/// byte after its own field).
struct CrcWriter<W> {
    inner: W,
    crc: u32,
}

impl<W: Write> CrcWriter<W> {
    fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.crc = crc32c::crc32c_append(self.crc, bytes);
        self.inner.write_all(bytes)
    }
}

/// What `points.dvp` holds: ids, versions and payloads by offset.
pub(crate) struct PointsFile {
    pub ids: IdColumn,
    pub versions: Vec<u64>,
    pub payloads: PayloadColumn,
}

/// Reads `points.dvp` a buffer at a time (the file is not held beside what it decodes to:
/// at 1M points that was 34 MB more at the memory peak of an open), showing `visit` each
/// payload by offset as it goes; the payloads are kept where `placement` says. Damage is
/// named by the checksum, whatever the decoding found first.
pub(crate) fn read_points(
    path: &Path,
    placement: PayloadPlacement,
    visit: &mut dyn FnMut(u32, &Payload),
) -> Result<PointsFile> {
    let file = File::open(path).map_err(file_error(path))?;
    let len = file.metadata().map_err(file_error(path))?.len();
    let kept = match placement {
        PayloadPlacement::Dram => None,
        PayloadPlacement::Disk => Some(file.try_clone().map_err(file_error(path))?),
    };
    let mut reader = std::io::BufReader::with_capacity(1 << 16, file);
    let mut head = [0u8; 16];
    if len < 16 || reader.read_exact(&mut head).is_err() || &head[..8] != POINTS_MAGIC {
        return Err(corrupt(path, "bad magic or too short"));
    }
    let stored = u32::from_le_bytes(head[8..12].try_into().unwrap());
    let mut body = CrcReader {
        inner: reader,
        crc: crc32c::crc32c(&head[12..16]),
    };
    let decoded = decode_points(&mut body, len - 16, path, kept, visit);
    if decoded.is_err() {
        std::io::copy(&mut body, &mut std::io::sink()).map_err(file_error(path))?;
    }
    // Ids and versions are in memory now; payloads kept on SSD are read again on demand, a
    // page at a time, instead of the whole file staying charged to the process.
    diskvec_io::forget_cached(body.inner.get_ref());
    if body.crc != stored {
        return Err(corrupt(path, "checksum mismatch"));
    }
    check_frame_version(&head[12..16], path)?;
    decoded
}

/// The body of `points.dvp` (after its 16-byte frame), `body_len` bytes; its payloads are
/// left in the file when it is given as `kept` (its payload bytes start at
/// `16 + 16 + 33 x count`).
fn decode_points(
    r: &mut impl Read,
    body_len: u64,
    path: &Path,
    kept: Option<File>,
    visit: &mut dyn FnMut(u32, &Payload),
) -> Result<PointsFile> {
    let short = || corrupt(path, "shorter than its point count says");
    let mut word = [0u8; 8];
    let mut read_u64 = |r: &mut dyn Read| -> Result<u64> {
        r.read_exact(&mut word).map_err(|_| short())?;
        Ok(u64::from_le_bytes(word))
    };
    let count = read_u64(r)?;
    let count = usize::try_from(count)
        .ok()
        .filter(|&c| c as u64 <= body_len / 33)
        .ok_or_else(short)?;
    let mut ids = IdColumn::with_capacity(count);
    let mut record = [0u8; 17];
    for i in 0..count {
        r.read_exact(&mut record).map_err(|_| short())?;
        let raw = u128::from_le_bytes(record[1..].try_into().unwrap());
        ids.push(match record[0] {
            0 if raw <= u64::MAX as u128 => PointId::Num(raw as u64),
            1 => PointId::Uuid(raw.into()),
            _ => {
                let at = 8 + i * 17;
                return Err(corrupt(path, format!("bad point id kind at byte {at}")));
            }
        });
    }
    let versions = (0..count)
        .map(|_| read_u64(r))
        .collect::<Result<Vec<u64>>>()?;
    let ends = (0..=count)
        .map(|_| read_u64(r))
        .collect::<Result<Vec<u64>>>()?;
    let data_len = body_len
        .checked_sub(16 + 33 * count as u64)
        .ok_or_else(short)?;
    if ends[count] != data_len || ends.windows(2).any(|w| w[0] > w[1]) {
        return Err(corrupt(
            path,
            "payload offsets do not match the payload bytes",
        ));
    }
    let mut payloads = PayloadColumn::default();
    let mut crcs = Vec::with_capacity(if kept.is_some() { count } else { 0 });
    let mut json = Vec::new();
    for (i, w) in ends.windows(2).enumerate() {
        json.resize((w[1] - w[0]) as usize, 0);
        r.read_exact(&mut json).map_err(|_| short())?;
        let payload: Payload = serde_json::from_slice(&json)
            .map_err(|e| corrupt(path, format!("payload of offset {i}: {e}")))?;
        visit(i as u32, &payload);
        match kept {
            Some(_) => crcs.push(crc32c::crc32c(&json)),
            None => payloads.push(payload),
        }
    }
    payloads.shrink_to_fit();
    if let Some(file) = kept {
        let base = 32 + 33 * count as u64;
        let starts = ends.iter().map(|e| base + e).collect();
        payloads = PayloadColumn::on_disk(file, path, starts, crcs);
    }
    Ok(PointsFile {
        ids,
        versions,
        payloads,
    })
}

/// A reader that keeps the CRC-32C of what it has read.
struct CrcReader<R> {
    inner: R,
    crc: u32,
}

impl<R: Read> Read for CrcReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.crc = crc32c::crc32c_append(self.crc, &buf[..n]);
        Ok(n)
    }
}

pub(crate) fn write_deleted(
    storage: &dyn Storage,
    path: &Path,
    deleted: &RoaringBitmap,
) -> Result<()> {
    let mut body = Vec::with_capacity(deleted.serialized_size());
    deleted
        .serialize_into(&mut body)
        .expect("writing to a Vec cannot fail");
    write_atomic(storage, path, &frame(DELETED_MAGIC, &body)).map_err(file_error(path))
}

pub(crate) fn read_deleted(path: &Path) -> Result<RoaringBitmap> {
    let bytes = std::fs::read(path).map_err(file_error(path))?;
    let body = unframe(DELETED_MAGIC, &bytes, path)?;
    RoaringBitmap::deserialize_from(body).map_err(|e| corrupt(path, e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn points_and_deleted_files_round_trip_and_damage_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let ids = vec![
            PointId::Num(1),
            PointId::Uuid(u128::MAX.into()),
            PointId::Num(u64::MAX),
        ];
        let versions = vec![3, 9, 4];
        let payloads: Vec<Payload> = vec![
            json!({"a": 1}).as_object().unwrap().clone(),
            Payload::new(),
            json!({"s": "x", "l": [1, 2]}).as_object().unwrap().clone(),
        ];
        let p = dir.path().join(POINTS_FILE);
        write_points(
            &diskvec_io::storage::FsStorage,
            &p,
            &ids,
            &versions,
            &PayloadJson::from_payloads(&payloads),
        )
        .unwrap();
        // Staged under a temporary name, renamed: nothing else is left in the directory.
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [POINTS_FILE]);
        let got = read_points(&p, PayloadPlacement::Dram, &mut |_, _| {}).unwrap();
        assert_eq!(got.ids.len(), ids.len());
        assert!(ids.iter().enumerate().all(|(i, &id)| got.ids.get(i) == id));
        assert_eq!(got.versions, versions);
        let mut seen = Vec::new();
        let on_ssd = read_points(&p, PayloadPlacement::Disk, &mut |o, p| {
            seen.push((o, p.clone()))
        })
        .unwrap();
        for (i, payload) in payloads.iter().enumerate() {
            assert_eq!(*got.payloads.get(i).unwrap(), *payload);
            assert_eq!(*on_ssd.payloads.get(i).unwrap(), *payload);
            assert_eq!(seen[i], (i as u32, payload.clone()));
        }
        assert!(on_ssd.payloads.on_ssd() && !got.payloads.on_ssd());
        let bytes = std::fs::read(&p).unwrap();
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 1;
            std::fs::write(&p, &bad).unwrap();
            for placement in [PayloadPlacement::Dram, PayloadPlacement::Disk] {
                assert!(
                    read_points(&p, placement, &mut |_, _| {}).is_err(),
                    "byte {i}"
                );
            }
        }
        let d = dir.path().join("deleted.1.dvd");
        let bits: RoaringBitmap = [0u32, 5, 70_000].into_iter().collect();
        write_deleted(&diskvec_io::storage::FsStorage, &d, &bits).unwrap();
        assert_eq!(read_deleted(&d).unwrap(), bits);
        let mut bad = std::fs::read(&d).unwrap();
        bad[20] ^= 1;
        std::fs::write(&d, &bad).unwrap();
        assert!(read_deleted(&d)
            .unwrap_err()
            .to_string()
            .contains("checksum"));
    }
}
