//! A sealed segment's payloads by offset, held one of three ways:
//! - none at all when no point of the segment has one (a collection without payloads);
//! - parsed in DRAM, empty ones as 8 bytes (not the 24 of an empty JSON object);
//! - on SSD (`on_disk_payload`): where each payload's JSON lies in `points.dvp` and its
//!   CRC-32C, 12 bytes a point; a payload is read and parsed when asked for.
//!
//! A payload on SSD that cannot be read or does not match its checksum is damage: the read
//! answers an error. Reads that can only answer yes or no (a filter inside a graph search)
//! take it as an empty payload and count it; the request takes a mark of the count before
//! and checks it after (`PayloadColumn::check_since`), so the damage becomes that request's
//! error, and only the requests that met it fail.

use std::borrow::Cow;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex};

use crate::error::file_error;
use crate::{DbError, Payload, Result};

static EMPTY: LazyLock<Payload> = LazyLock::new(Payload::new);

/// The only JSON object of two bytes: `{}`.
const EMPTY_JSON_BYTES: u64 = 2;

/// Where a sealed segment keeps its payloads (`CollectionConfig::on_disk_payload`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PayloadPlacement {
    Dram,
    Disk,
}

#[derive(Debug)]
pub(crate) enum PayloadColumn {
    /// This many points, none with a payload.
    Empty(usize),
    Dram(Vec<Option<Box<Payload>>>),
    Disk(DiskPayloads),
}

/// Payloads left in `points.dvp`, read by offset.
#[derive(Debug)]
pub(crate) struct DiskPayloads {
    file: File,
    path: PathBuf,
    /// Byte position where each payload's JSON starts, and one past the last one's end.
    starts: Vec<u64>,
    /// CRC-32C of each payload's JSON, taken while the whole file was checked at open.
    crcs: Vec<u32>,
    /// Damaged reads taken as empty payloads so far, and what the last one met.
    damaged_reads: AtomicU64,
    last_damage: Mutex<String>,
}

impl Default for PayloadColumn {
    fn default() -> Self {
        PayloadColumn::Empty(0)
    }
}

impl DiskPayloads {
    fn read(&self, offset: usize) -> Result<Payload> {
        let (start, end) = (self.starts[offset], self.starts[offset + 1]);
        if end - start == EMPTY_JSON_BYTES {
            return Ok(Payload::new());
        }
        let corrupt = |message: String| DbError::Corrupt {
            path: self.path.clone(),
            message,
        };
        let mut json = vec![0u8; (end - start) as usize];
        self.file
            .read_exact_at(&mut json, start)
            .map_err(file_error(&self.path))?;
        if crc32c::crc32c(&json) != self.crcs[offset] {
            return Err(corrupt(format!(
                "the payload of offset {offset} does not match its checksum"
            )));
        }
        serde_json::from_slice(&json)
            .map_err(|e| corrupt(format!("the payload of offset {offset}: {e}")))
    }
}

impl PayloadColumn {
    #[cfg(test)]
    fn from_payloads(payloads: Vec<Payload>) -> Self {
        let mut column = Self::default();
        for p in payloads {
            column.push(p);
        }
        column.shrink_to_fit();
        column
    }

    /// Payloads on SSD in the file at `path` (open as `file`): each one's start and the
    /// last one's end, and each one's checksum; `None` when every one is empty.
    pub fn on_disk(file: File, path: &Path, starts: Vec<u64>, crcs: Vec<u32>) -> Self {
        if starts.windows(2).all(|w| w[1] - w[0] == EMPTY_JSON_BYTES) {
            return PayloadColumn::Empty(crcs.len());
        }
        PayloadColumn::Disk(DiskPayloads {
            file,
            path: path.to_path_buf(),
            starts,
            crcs,
            damaged_reads: AtomicU64::new(0),
            last_damage: Mutex::new(String::new()),
        })
    }

    /// Adds a payload held in DRAM (a column on SSD takes none).
    pub fn push(&mut self, p: Payload) {
        match self {
            PayloadColumn::Empty(n) if p.is_empty() => *n += 1,
            PayloadColumn::Empty(n) => {
                let mut v: Vec<Option<Box<Payload>>> = Vec::with_capacity(*n + 1);
                v.resize_with(*n, || None);
                v.push(Some(Box::new(p)));
                *self = PayloadColumn::Dram(v);
            }
            PayloadColumn::Dram(v) => v.push((!p.is_empty()).then(|| Box::new(p))),
            PayloadColumn::Disk(_) => unreachable!("payloads on SSD are written at sealing"),
        }
    }

    pub fn shrink_to_fit(&mut self) {
        if let PayloadColumn::Dram(v) = self {
            v.shrink_to_fit();
        }
    }

    pub fn len(&self) -> usize {
        match self {
            PayloadColumn::Empty(n) => *n,
            PayloadColumn::Dram(v) => v.len(),
            PayloadColumn::Disk(d) => d.crcs.len(),
        }
    }

    /// The payload at `offset`: borrowed from DRAM, or read from SSD.
    pub fn get(&self, offset: usize) -> Result<Cow<'_, Payload>> {
        match self {
            PayloadColumn::Empty(_) => Ok(Cow::Borrowed(&EMPTY)),
            PayloadColumn::Dram(v) => Ok(Cow::Borrowed(v[offset].as_deref().unwrap_or(&EMPTY))),
            PayloadColumn::Disk(d) => d.read(offset).map(Cow::Owned),
        }
    }

    /// The payload at `offset`, or an empty one where it is damaged (counted: see
    /// `check_since`).
    pub fn get_or_empty(&self, offset: usize) -> Cow<'_, Payload> {
        match self.get(offset) {
            Ok(p) => p,
            Err(e) => {
                if let PayloadColumn::Disk(d) = self {
                    *d.last_damage.lock().unwrap_or_else(|e| e.into_inner()) = match e {
                        DbError::Corrupt { message, .. } => message,
                        other => format!("a payload could not be read: {other}"),
                    };
                    d.damaged_reads.fetch_add(1, Ordering::AcqRel);
                }
                Cow::Borrowed(&EMPTY)
            }
        }
    }

    /// The count of damaged reads `get_or_empty` took as empty, for `check_since`.
    pub fn damage_mark(&self) -> u64 {
        match self {
            PayloadColumn::Disk(d) => d.damaged_reads.load(Ordering::Acquire),
            _ => 0,
        }
    }

    /// An error if `get_or_empty` met damage since `mark` was taken (by this request, or
    /// one beside it: either way an answer may have been decided on an empty payload).
    pub fn check_since(&self, mark: u64) -> Result<()> {
        match self {
            PayloadColumn::Disk(d) if d.damaged_reads.load(Ordering::Acquire) > mark => {
                Err(DbError::Corrupt {
                    path: d.path.clone(),
                    message: d
                        .last_damage
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .clone(),
                })
            }
            _ => Ok(()),
        }
    }

    /// Whether the payloads are left on SSD.
    pub fn on_ssd(&self) -> bool {
        matches!(self, PayloadColumn::Disk(_))
    }

    /// DRAM it takes, roughly (a payload's keys and values at 48 bytes each).
    pub fn bytes(&self) -> usize {
        match self {
            PayloadColumn::Empty(_) => 0,
            PayloadColumn::Dram(v) => {
                v.len() * 8 + v.iter().flatten().map(|p| 64 + p.len() * 48).sum::<usize>()
            }
            PayloadColumn::Disk(d) => d.starts.len() * 8 + d.crcs.len() * 4,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn empty_payloads_take_no_object_and_the_others_keep_their_offsets() {
        let none = PayloadColumn::from_payloads(vec![Payload::new(); 3]);
        assert!(matches!(none, PayloadColumn::Empty(3)));
        assert_eq!((none.len(), none.bytes()), (3, 0));
        assert!(none.get(2).unwrap().is_empty());
        let p = json!({"a": 1}).as_object().unwrap().clone();
        let some = PayloadColumn::from_payloads(vec![Payload::new(), p.clone(), Payload::new()]);
        assert_eq!(some.len(), 3);
        let got: Vec<Payload> = (0..3).map(|i| some.get(i).unwrap().into_owned()).collect();
        assert_eq!(got, vec![Payload::new(), p, Payload::new()]);
    }

    #[test]
    fn payloads_on_ssd_are_read_by_offset_and_damage_is_an_error_remembered() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p");
        let jsons = [r#"{"a":1}"#, "{}", r#"{"s":"x"}"#];
        let mut bytes = b"head".to_vec();
        let mut starts = vec![bytes.len() as u64];
        for j in jsons {
            bytes.extend_from_slice(j.as_bytes());
            starts.push(bytes.len() as u64);
        }
        std::fs::write(&path, &bytes).unwrap();
        let crcs = jsons.iter().map(|j| crc32c::crc32c(j.as_bytes())).collect();
        let column = PayloadColumn::on_disk(File::open(&path).unwrap(), &path, starts, crcs);
        assert!(column.on_ssd());
        assert_eq!(
            column.get(0).unwrap().into_owned(),
            json!({"a": 1}).as_object().unwrap().clone()
        );
        assert!(column.get(1).unwrap().is_empty());
        assert_eq!(column.get(2).unwrap()["s"], "x");
        // A flipped byte inside the third payload: that read fails, the others do not.
        bytes[4 + 7 + 2 + 3] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        let err = column.get(2).unwrap_err().to_string();
        assert!(err.contains("checksum"), "{err}");
        let mark = column.damage_mark();
        assert!(
            column.check_since(mark).is_ok(),
            "a read answering its error is not counted"
        );
        assert_eq!(column.get_or_empty(0)["a"], 1);
        assert!(column.check_since(mark).is_ok());
        assert!(column.get_or_empty(2).is_empty());
        assert!(column
            .check_since(mark)
            .unwrap_err()
            .to_string()
            .contains("offset 2"));
        assert!(
            column.check_since(column.damage_mark()).is_ok(),
            "a later request"
        );
        // Every payload empty: nothing is kept.
        let empties =
            PayloadColumn::on_disk(File::open(&path).unwrap(), &path, vec![0, 2, 4], vec![0, 0]);
        assert!(matches!(empties, PayloadColumn::Empty(2)));
    }
}
