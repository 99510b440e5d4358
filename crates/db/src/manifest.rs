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
/// Version 3 is version 2 with a space whose `datatype` is not float32: written only then,
/// so that a build reading version 2 at most (which would take such vectors unrounded and
/// could not open their segments) refuses the collection instead. Version 2 lists the
/// collection's vector spaces (`config.dense`, `config.sparse`); version 1 had one dense
/// space as `config.dim` and `config.metric`, read as the unnamed space.
pub const MANIFEST_VERSION: u32 = 3;
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
    /// The options an index was created with (Qdrant's `field_schema` object), by field;
    /// kept and shown, absent for one created by its kind's name alone.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub payload_index_params: std::collections::BTreeMap<String, serde_json::Value>,
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
            payload_index_params: Default::default(),
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
        let narrow = self
            .config
            .dense
            .iter()
            .chain(&self.config.multi)
            .any(|s| s.datatype != diskvec_vector::ElementType::Float32);
        let version: u32 = if narrow { 3 } else { 2 };
        out.extend_from_slice(&version.to_le_bytes());
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
        if !(1..=MANIFEST_VERSION).contains(&version) {
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
        let mut body: serde_json::Value = serde_json::from_slice(&bytes[HEADER..])
            .map_err(|e| corrupt(format!("manifest body: {e}")))?;
        if version == 1 {
            one_space_as_dense_list(&mut body).map_err(corrupt)?;
        }
        let manifest: Manifest =
            serde_json::from_value(body).map_err(|e| corrupt(format!("manifest body: {e}")))?;
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

/// Rewrites a version-1 body's `config.dim` and `config.metric` as the one unnamed dense
/// space of version 2.
fn one_space_as_dense_list(body: &mut serde_json::Value) -> std::result::Result<(), String> {
    let config = body
        .get_mut("config")
        .and_then(|c| c.as_object_mut())
        .ok_or("manifest body has no config")?;
    let dim = config.remove("dim").ok_or("version-1 config has no dim")?;
    let metric = config
        .remove("metric")
        .ok_or("version-1 config has no metric")?;
    config.insert(
        "dense".into(),
        serde_json::json!([{"name": "", "dim": dim, "metric": metric}]),
    );
    Ok(())
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

    /// A manifest written before named spaces (version 1: `dim` and `metric` in the config)
    /// opens as one unnamed dense space.
    #[test]
    fn version_one_manifests_read_as_one_unnamed_space() {
        let m = Manifest::new(CollectionConfig::new(8, Metric::Cosine));
        let mut body = serde_json::to_value(&m).unwrap();
        let config = body["config"].as_object_mut().unwrap();
        config.remove("dense");
        config.remove("sparse");
        config.insert("dim".into(), 8.into());
        config.insert("metric".into(), "cosine".into());
        let body = serde_json::to_vec(&body).unwrap();
        let mut bytes = Vec::new();
        bytes.extend_from_slice(MAGIC);
        bytes.extend_from_slice(&[0; 4]);
        bytes.extend_from_slice(&1u32.to_le_bytes());
        bytes.extend_from_slice(&(body.len() as u64).to_le_bytes());
        bytes.extend_from_slice(&body);
        let crc = crc32c::crc32c(&bytes[12..]);
        bytes[8..12].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(Manifest::decode(&bytes, Path::new("m")).unwrap(), m);
        // Version 4 is refused by name.
        bytes[12..16].copy_from_slice(&4u32.to_le_bytes());
        let crc = crc32c::crc32c(&bytes[12..]);
        bytes[8..12].copy_from_slice(&crc.to_le_bytes());
        let err = Manifest::decode(&bytes, Path::new("m")).unwrap_err();
        assert!(err.to_string().contains("version 4"), "{err}");
    }

    /// A manifest stays version 2 while every space is float32 (builds that read version 2
    /// keep opening it) and becomes version 3 with a float16 or uint8 space.
    #[test]
    fn a_narrow_datatype_makes_version_3() {
        let mut config = CollectionConfig::new(4, diskvec_vector::Metric::L2);
        let version = |c: &CollectionConfig| {
            let bytes = Manifest::new(c.clone()).encode();
            let back = Manifest::decode(&bytes, Path::new("m")).unwrap();
            assert_eq!(back.config, *c);
            u32::from_le_bytes(bytes[12..16].try_into().unwrap())
        };
        assert_eq!(version(&config), 2);
        config.dense[0].datatype = diskvec_vector::ElementType::Float16;
        assert_eq!(version(&config), 3);
    }
}
