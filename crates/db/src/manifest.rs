//! A collection's manifest: its settings, payload indexes and sealed segments, and the log
//! position they cover. Replacing it (write a temp file, fsync, rename, fsync the
//! directory) is the one atomic switch of every change to the set of segments.
//!
//! ```text
//! 0        8        12       16       24
//! +--------+--------+--------+--------+----------------------+
//! | magic  | crc32c | version| length | body: JSON, `length` |
//! |DVMANIFS| of 12..| u32 LE | u64 LE | bytes                |
//! +--------+--------+--------+--------+----------------------+
//! ```
//! The checksum covers everything after itself, so a damaged version field is reported as
//! damage, not as an unknown version.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::config::CollectionConfig;
use crate::storage::{write_atomic, Storage};
use crate::{DbError, Result};

pub const MANIFEST_FILE: &str = "manifest.dvc";
const MAGIC: &[u8; 8] = b"DVMANIFS";
pub const MANIFEST_VERSION: u32 = 1;
const HEADER: usize = 24;

/// One sealed segment as the manifest lists it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SegmentEntry {
    pub id: u64,
    pub points: u32,
    /// The file of its deleted bitmap, if any point of it was ever deleted.
    pub deleted_file: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub config: CollectionConfig,
    /// (field, index kind name) of every payload index.
    pub payload_indexes: Vec<(String, String)>,
    pub segments: Vec<SegmentEntry>,
    /// Every operation up to here is in the sealed segments (and their deleted bitmaps);
    /// recovery replays the log from the next one.
    pub checkpoint_op: u64,
    pub next_segment_id: u64,
    /// Bumped at every write; names the files (deleted bitmaps) written with it.
    pub generation: u64,
}

impl Manifest {
    pub fn new(config: CollectionConfig) -> Self {
        Self {
            config,
            payload_indexes: Vec::new(),
            segments: Vec::new(),
            checkpoint_op: 0,
            next_segment_id: 1,
            generation: 0,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let body = serde_json::to_vec_pretty(self).expect("a manifest serializes");
        let mut out = Vec::with_capacity(HEADER + body.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&[0; 4]);
        out.extend_from_slice(&MANIFEST_VERSION.to_le_bytes());
        out.extend_from_slice(&(body.len() as u64).to_le_bytes());
        out.extend_from_slice(&body);
        let crc = crc32c::crc32c(&out[12..]);
        out[8..12].copy_from_slice(&crc.to_le_bytes());
        out
    }

    pub fn decode(bytes: &[u8], path: &Path) -> Result<Self> {
        let corrupt = |message: String| DbError::Corrupt {
            path: path.to_path_buf(),
            message,
        };
        if bytes.len() < HEADER || &bytes[..8] != MAGIC {
            return Err(corrupt(
                "not a diskvec manifest (bad magic or too short)".into(),
            ));
        }
        let stored = u32::from_le_bytes(bytes[8..12].try_into().unwrap());
        if crc32c::crc32c(&bytes[12..]) != stored {
            return Err(corrupt("manifest checksum mismatch".into()));
        }
        let version = u32::from_le_bytes(bytes[12..16].try_into().unwrap());
        if version != MANIFEST_VERSION {
            return Err(corrupt(format!(
                "manifest version {version} is not supported (this build reads {MANIFEST_VERSION})"
            )));
        }
        let len = u64::from_le_bytes(bytes[16..24].try_into().unwrap());
        if len != (bytes.len() - HEADER) as u64 {
            return Err(corrupt(format!(
                "manifest body is {} bytes, its header says {len}",
                bytes.len() - HEADER
            )));
        }
        let manifest: Manifest = serde_json::from_slice(&bytes[HEADER..])
            .map_err(|e| corrupt(format!("manifest body: {e}")))?;
        manifest
            .config
            .check()
            .map_err(|e| corrupt(e.to_string()))?;
        Ok(manifest)
    }

    pub fn read(storage: &dyn Storage, dir: &Path) -> Result<Self> {
        let path = dir.join(MANIFEST_FILE);
        let bytes = storage
            .read(&path)
            .map_err(crate::error::file_error(&path))?;
        Self::decode(&bytes, &path)
    }

    /// Replaces the manifest in `dir` atomically and durably.
    pub fn write(&self, storage: &dyn Storage, dir: &Path) -> Result<()> {
        let path = dir.join(MANIFEST_FILE);
        write_atomic(storage, &path, &self.encode()).map_err(crate::error::file_error(&path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use diskvec_vector::Metric;

    #[test]
    fn manifests_round_trip_and_every_damaged_byte_is_caught() {
        let mut m = Manifest::new(CollectionConfig::new(8, Metric::L2));
        m.segments.push(SegmentEntry {
            id: 3,
            points: 10,
            deleted_file: Some("deleted.0000000000000002.dvd".into()),
        });
        m.checkpoint_op = 41;
        let bytes = m.encode();
        let p = Path::new("manifest.dvc");
        assert_eq!(Manifest::decode(&bytes, p).unwrap(), m);
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x10;
            assert!(Manifest::decode(&bad, p).is_err(), "byte {i}");
        }
        let err = Manifest::decode(&bytes[..bytes.len() - 1], p).unwrap_err();
        assert!(err.to_string().contains("manifest.dvc"), "{err}");
    }
}
