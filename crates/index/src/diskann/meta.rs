use std::path::Path;

use diskvec_vector::ProductQuantizer;

use super::header::{Reader, Writer};
use super::Header;
use crate::error::{corrupt, file_error};
use crate::{IndexError, Result};

pub const META_MAGIC: &[u8; 8] = b"DISKVECM";
const META_HEADER: usize = 56;

/// The DRAM-resident part of an index: PQ codebook, one PQ code per node and the
/// external id of each node (nodes are numbered by their place on disk).
pub struct Meta {
    pub pq: ProductQuantizer,
    pub codes: Vec<u8>,
    pub ids: Vec<i64>,
    /// Nodes a search may start from besides the medoid, spread over the data.
    pub entries: Vec<u32>,
    /// The files holding `nodes.dvn`'s stripes, one per path; relative ones are relative
    /// to the index directory.
    pub paths: Vec<String>,
    /// Read from the file; checked against the nodes header by `check`.
    pub build_id: u64,
    pub crc: u32,
}

fn encode_paths(paths: &[String]) -> Vec<u8> {
    let mut out = (paths.len() as u32).to_le_bytes().to_vec();
    for p in paths {
        out.extend_from_slice(&(p.len() as u32).to_le_bytes());
        out.extend_from_slice(p.as_bytes());
    }
    out
}

fn decode_paths(bytes: &[u8]) -> Option<Vec<String>> {
    let word = |at: usize| -> Option<usize> {
        Some(u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?) as usize)
    };
    let count = word(0)?;
    let mut at = 4;
    let mut out = Vec::with_capacity(count.min(1024));
    for _ in 0..count {
        let len = word(at)?;
        let s = std::str::from_utf8(bytes.get(at + 4..at + 4 + len)?).ok()?;
        out.push(s.to_string());
        at += 4 + len;
    }
    (at == bytes.len()).then_some(out)
}

impl Meta {
    /// Serializes to the bytes of `meta.dvm`; returns them and the body CRC.
    pub fn encode(&self, build_id: u64) -> (Vec<u8>, u32) {
        let pq = self.pq.to_bytes();
        let mut body = Vec::with_capacity(pq.len() + self.codes.len() + self.ids.len() * 8);
        body.extend_from_slice(&pq);
        body.extend_from_slice(&self.codes);
        for id in &self.ids {
            body.extend_from_slice(&id.to_le_bytes());
        }
        for e in &self.entries {
            body.extend_from_slice(&e.to_le_bytes());
        }
        let placement = encode_paths(&self.paths);
        body.extend_from_slice(&placement);
        let crc = crc32fast::hash(&body);
        let mut out = vec![0u8; META_HEADER];
        let mut w = Writer {
            buf: &mut out,
            at: 0,
        };
        w.bytes(META_MAGIC);
        w.u32(super::LAYOUT_VERSION);
        w.u32(crc);
        w.u64(build_id);
        w.u64(self.ids.len() as u64);
        w.u64(pq.len() as u64);
        w.u64(self.entries.len() as u64);
        w.u64(placement.len() as u64);
        out.extend_from_slice(&body);
        (out, crc)
    }

    /// Reads `meta.dvm`, checking its own consistency (magic, version, size, CRC).
    pub fn read(path: &Path) -> Result<Self> {
        let bytes = std::fs::read(path).map_err(file_error(path))?;
        if bytes.len() < META_HEADER || &bytes[..8] != META_MAGIC {
            return Err(corrupt(
                path,
                "not a diskvec meta file (bad magic or truncated)",
            ));
        }
        let mut r = Reader { buf: &bytes, at: 8 };
        let version = r.u32();
        if version != super::LAYOUT_VERSION {
            return Err(IndexError::UnsupportedVersion {
                path: path.to_path_buf(),
                found: version,
                supported: super::LAYOUT_VERSION,
            });
        }
        let (crc, build_id, count) = (r.u32(), r.u64(), r.u64() as usize);
        let (pq_len, entries, placement) = (r.u64() as usize, r.u64() as usize, r.u64() as usize);
        let body = &bytes[META_HEADER..];
        if crc32fast::hash(body) != crc {
            return Err(corrupt(path, "checksum mismatch"));
        }
        let pq = ProductQuantizer::from_bytes(
            body.get(..pq_len)
                .ok_or_else(|| corrupt(path, "truncated"))?,
        )
        .ok_or_else(|| corrupt(path, "unreadable PQ codebook"))?;
        let m = pq.code_bytes();
        let codes_at = pq_len;
        let ids_at = codes_at + count * m;
        let entries_at = ids_at + count * 8;
        let placement_at = entries_at + entries * 4;
        if body.len() != placement_at + placement {
            return Err(corrupt(
                path,
                format!(
                    "size {} does not match its header (truncated?)",
                    bytes.len()
                ),
            ));
        }
        let ids = body[ids_at..entries_at]
            .chunks_exact(8)
            .map(|b| i64::from_le_bytes(b.try_into().unwrap()))
            .collect();
        let entries: Vec<u32> = body[entries_at..placement_at]
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        if entries.iter().any(|&e| e as usize >= count) {
            return Err(corrupt(path, "an entry node is out of range"));
        }
        let paths = decode_paths(&body[placement_at..])
            .filter(|p| !p.is_empty())
            .ok_or_else(|| corrupt(path, "unreadable placement (list of path files)"))?;
        Ok(Self {
            pq,
            codes: body[codes_at..ids_at].to_vec(),
            ids,
            entries,
            paths,
            build_id,
            crc,
        })
    }

    /// Checks that this meta file and the nodes header come from the same build.
    pub fn check(&self, header: &Header, path: &Path) -> Result<()> {
        if self.build_id != header.build_id
            || self.ids.len() as u64 != header.count
            || self.crc != header.meta_crc
        {
            return Err(corrupt(path, "belongs to a different build than nodes.dvn"));
        }
        if self.pq.dim != header.dim as usize || self.pq.code_bytes() != header.pq_bytes as usize {
            return Err(corrupt(path, "PQ codebook does not match the index"));
        }
        if self.paths.len() != header.path_count as usize {
            return Err(corrupt(
                path,
                "placement lists a different number of paths than the header",
            ));
        }
        Ok(())
    }

    pub fn dram_bytes(&self) -> usize {
        self.pq.dram_bytes() + self.codes.len() + self.ids.len() * 8 + self.entries.len() * 4
    }
}
