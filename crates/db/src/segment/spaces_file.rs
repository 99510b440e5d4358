//! `spaces.dvs`: which of a sealed segment's points have a vector in each dense space, and
//! their sparse vectors, written once at sealing (drawn in docs/format.md). A segment sealed
//! before named spaces has no such file: every point has a vector in dense space 0, the
//! only space there was.
//!
//! ```text
//! 0        8        12       16
//! +--------+--------+--------+----------------------------------------------------+
//! | magic  | crc32c | version| dense spaces u32 LE                                |
//! |DVSPACES| of 12..| u32 LE |   each: bytes u64 LE, roaring bitmap (portable) of |
//! |        |        |        |         the offsets with a vector in the space     |
//! |        |        |        | sparse spaces u32 LE                               |
//! |        |        |        |   each: points u64 LE, (points+1) x entry end u64, |
//! |        |        |        |         entries x index u32, entries x value f32,  |
//! |        |        |        |         bytes u64 LE, roaring bitmap of the offsets|
//! |        |        |        |         with a vector (an empty one included)      |
//! |        |        |        | multivector spaces u32 LE                          |
//! |        |        |        |   each: points u64 LE, (points+1) x number end u64,|
//! |        |        |        |         numbers x f32 (rows back to back), bytes   |
//! |        |        |        |         u64 LE, roaring bitmap of the offsets with |
//! |        |        |        |         one                                        |
//! +--------+--------+--------+----------------------------------------------------+
//! ```

use std::path::Path;

use diskvec_io::storage::{write_atomic, Storage};
use roaring::RoaringBitmap;

use crate::error::file_error;
use crate::vectors::SparseVector;
use crate::{DbError, Result};

pub const SPACES_FILE: &str = "spaces.dvs";
const MAGIC: &[u8; 8] = b"DVSPACES";
const VERSION: u32 = 1;

/// What `spaces.dvs` holds.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct SpacesFile {
    /// Per dense space, the offsets with a vector in it.
    pub dense_present: Vec<RoaringBitmap>,
    /// Per sparse space, each offset's vector.
    pub sparse: Vec<Vec<Option<SparseVector>>>,
    /// Per multivector space, each offset's rows.
    pub multi: Vec<Vec<Option<Vec<f32>>>>,
}

fn corrupt(path: &Path, message: impl Into<String>) -> DbError {
    DbError::Corrupt {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_bitmap(out: &mut Vec<u8>, bits: &RoaringBitmap) {
    put_u64(out, bits.serialized_size() as u64);
    bits.serialize_into(&mut *out)
        .expect("writing to a Vec cannot fail");
}

/// One column of optional entries: the point count, each point's entry end (`len` counts
/// an entry's units), the entries' data (`data` writes the present ones, in order), and
/// the bitmap of the points that have one.
fn put_column<T>(
    out: &mut Vec<u8>,
    column: &[Option<T>],
    len: impl Fn(&T) -> usize,
    data: impl FnOnce(&mut Vec<u8>, std::iter::Flatten<std::slice::Iter<'_, Option<T>>>),
) {
    put_u64(out, column.len() as u64);
    let mut end = 0u64;
    put_u64(out, 0);
    for v in column {
        end += v.as_ref().map_or(0, |v| len(v) as u64);
        put_u64(out, end);
    }
    data(out, column.iter().flatten());
    let present: RoaringBitmap = column
        .iter()
        .enumerate()
        .filter(|(_, v)| v.is_some())
        .map(|(o, _)| o as u32)
        .collect();
    put_bitmap(out, &present);
}

impl SpacesFile {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&[0; 4]);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&(self.dense_present.len() as u32).to_le_bytes());
        for bits in &self.dense_present {
            put_bitmap(&mut out, bits);
        }
        out.extend_from_slice(&(self.sparse.len() as u32).to_le_bytes());
        for column in &self.sparse {
            put_column(&mut out, column, SparseVector::len, |out, present| {
                for v in present.clone() {
                    v.indices
                        .iter()
                        .for_each(|i| out.extend_from_slice(&i.to_le_bytes()));
                }
                for v in present {
                    v.values
                        .iter()
                        .for_each(|x| out.extend_from_slice(&x.to_le_bytes()));
                }
            });
        }
        out.extend_from_slice(&(self.multi.len() as u32).to_le_bytes());
        for column in &self.multi {
            put_column(&mut out, column, Vec::len, |out, present| {
                for v in present {
                    v.iter()
                        .for_each(|x| out.extend_from_slice(&x.to_le_bytes()));
                }
            });
        }
        let crc = crc32c::crc32c(&out[12..]);
        out[8..12].copy_from_slice(&crc.to_le_bytes());
        out
    }

    pub fn decode(bytes: &[u8], path: &Path) -> Result<Self> {
        if bytes.len() < 16 || &bytes[..8] != MAGIC {
            return Err(corrupt(path, "bad magic or too short"));
        }
        let stored = u32::from_le_bytes(bytes[8..12].try_into().unwrap());
        if crc32c::crc32c(&bytes[12..]) != stored {
            return Err(corrupt(path, "checksum mismatch"));
        }
        let version = u32::from_le_bytes(bytes[12..16].try_into().unwrap());
        if version != VERSION {
            return Err(corrupt(
                path,
                format!("version {version} is not supported (this build reads {VERSION})"),
            ));
        }
        let mut r = Cursor {
            bytes: &bytes[16..],
            path,
        };
        let mut file = SpacesFile::default();
        for _ in 0..r.u32()? {
            file.dense_present.push(r.bitmap()?);
        }
        for _ in 0..r.u32()? {
            let (ends, entries) = r.ends(path)?;
            let indices: Vec<u32> = r
                .take(4 * entries)?
                .chunks_exact(4)
                .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
                .collect();
            let values: Vec<f32> = r
                .take(4 * entries)?
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                .collect();
            let present = r.bitmap()?;
            let column = ends
                .windows(2)
                .enumerate()
                .map(|(o, w)| {
                    let span = w[0] as usize..w[1] as usize;
                    (present.contains(o as u32) || !span.is_empty()).then(|| SparseVector {
                        indices: indices[span.clone()].to_vec(),
                        values: values[span].to_vec(),
                    })
                })
                .collect();
            file.sparse.push(column);
        }
        for _ in 0..r.u32()? {
            let (ends, numbers) = r.ends(path)?;
            let values: Vec<f32> = r
                .take(4 * numbers)?
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                .collect();
            let present = r.bitmap()?;
            file.multi.push(
                ends.windows(2)
                    .enumerate()
                    .map(|(o, w)| {
                        let span = w[0] as usize..w[1] as usize;
                        (present.contains(o as u32) || !span.is_empty())
                            .then(|| values[span].to_vec())
                    })
                    .collect(),
            );
        }
        if !r.bytes.is_empty() {
            return Err(corrupt(
                path,
                format!("{} bytes after the spaces", r.bytes.len()),
            ));
        }
        Ok(file)
    }

    /// Reads `dir`'s spaces file; `None` when the segment has none (sealed before named
    /// spaces).
    pub fn read(dir: &Path) -> Result<Option<Self>> {
        let path = dir.join(SPACES_FILE);
        match std::fs::read(&path) {
            Ok(bytes) => Self::decode(&bytes, &path).map(Some),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(file_error(&path)(e)),
        }
    }

    /// Writes it into `dir`, atomically and durably.
    pub fn write(&self, storage: &dyn Storage, dir: &Path) -> Result<()> {
        let path = dir.join(SPACES_FILE);
        write_atomic(storage, &path, &self.encode()).map_err(file_error(&path))
    }
}

struct Cursor<'a> {
    bytes: &'a [u8],
    path: &'a Path,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if n > self.bytes.len() {
            return Err(corrupt(self.path, "ends inside a field"));
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }
    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }
    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }
    /// A points count, its (count + 1) ascending entry ends from 0, and the entries they
    /// cover.
    fn ends(&mut self, path: &Path) -> Result<(Vec<u64>, usize)> {
        let points = usize::try_from(self.u64()?)
            .ok()
            .filter(|&p| p <= self.bytes.len() / 8)
            .ok_or_else(|| corrupt(path, "point count past the file's end"))?;
        let ends = (0..=points)
            .map(|_| self.u64())
            .collect::<Result<Vec<u64>>>()?;
        if ends[0] != 0 || ends.windows(2).any(|w| w[0] > w[1]) {
            return Err(corrupt(path, "entry offsets do not ascend"));
        }
        let entries = usize::try_from(ends[points])
            .ok()
            .filter(|&e| e <= self.bytes.len() / 4)
            .ok_or_else(|| corrupt(path, "entries past the file's end"))?;
        Ok((ends, entries))
    }

    fn bitmap(&mut self) -> Result<RoaringBitmap> {
        let len = usize::try_from(self.u64()?).unwrap_or(usize::MAX);
        let body = self.take(len)?;
        RoaringBitmap::deserialize_from(body).map_err(|e| corrupt(self.path, e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spaces_files_round_trip_and_every_damaged_byte_is_caught() {
        let file = SpacesFile {
            dense_present: vec![[0u32, 2].into_iter().collect(), RoaringBitmap::new()],
            sparse: vec![vec![
                Some(SparseVector {
                    indices: vec![1, 9],
                    values: vec![0.5, -2.0],
                }),
                None,
                Some(SparseVector::default()),
            ]],
            multi: vec![vec![None, Some(vec![1.0, 2.0, 3.0, 4.0]), None]],
        };
        let bytes = file.encode();
        let p = Path::new(SPACES_FILE);
        assert_eq!(SpacesFile::decode(&bytes, p).unwrap(), file);
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x04;
            assert!(SpacesFile::decode(&bad, p).is_err(), "byte {i}");
        }
        for cut in 0..bytes.len() {
            assert!(
                SpacesFile::decode(&bytes[..cut], p).is_err(),
                "cut at {cut}"
            );
        }
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(SpacesFile::read(dir.path()).unwrap(), None);
        file.write(&diskvec_io::storage::FsStorage, dir.path())
            .unwrap();
        assert_eq!(SpacesFile::read(dir.path()).unwrap(), Some(file));
    }
}
