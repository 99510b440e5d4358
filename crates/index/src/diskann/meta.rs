use std::path::Path;

use diskvec_vector::ProductQuantizer;

use super::header::{Reader, Writer};
use super::Header;
use crate::error::{corrupt, file_error};
use crate::{IndexError, Result};

pub const META_MAGIC: &[u8; 8] = b"DISKVECM";
const META_HEADER: usize = 48;

/// The DRAM-resident part of an index: PQ codebook, one PQ code per node and the
/// external id of each node (nodes are numbered by their place on disk).
pub struct Meta {
    pub pq: ProductQuantizer,
    pub codes: Vec<u8>,
    pub ids: Vec<i64>,
    /// Nodes a search may start from besides the medoid, spread over the data.
    pub entries: Vec<u32>,
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
        out.extend_from_slice(&body);
        (out, crc)
    }

    /// Reads `meta.dvm` and checks it against the nodes header.
    pub fn read(path: &Path, header: &Header) -> Result<Self> {
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
        let (crc, build_id, count, pq_len, entries) = (
            r.u32(),
            r.u64(),
            r.u64() as usize,
            r.u64() as usize,
            r.u64() as usize,
        );
        if build_id != header.build_id || count as u64 != header.count {
            return Err(corrupt(path, "belongs to a different build than nodes.dvn"));
        }
        let body = &bytes[META_HEADER..];
        let m = header.pq_bytes as usize;
        if body.len() != pq_len + count * m + count * 8 + entries * 4 {
            return Err(corrupt(
                path,
                format!(
                    "size {} does not match its header (truncated?)",
                    bytes.len()
                ),
            ));
        }
        if crc32fast::hash(body) != crc || crc != header.meta_crc {
            return Err(corrupt(path, "checksum mismatch"));
        }
        let pq = ProductQuantizer::from_bytes(&body[..pq_len])
            .filter(|pq| pq.dim == header.dim as usize && pq.code_bytes() == m)
            .ok_or_else(|| corrupt(path, "PQ codebook does not match the index"))?;
        let codes = body[pq_len..pq_len + count * m].to_vec();
        let ids_at = pq_len + count * m;
        let entries_at = ids_at + count * 8;
        let ids = body[ids_at..entries_at]
            .chunks_exact(8)
            .map(|b| i64::from_le_bytes(b.try_into().unwrap()))
            .collect();
        let entries: Vec<u32> = body[entries_at..]
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        if entries.iter().any(|&e| e as usize >= count) {
            return Err(corrupt(path, "an entry node is out of range"));
        }
        Ok(Self {
            pq,
            codes,
            ids,
            entries,
        })
    }

    pub fn dram_bytes(&self) -> usize {
        self.pq.to_bytes().len() + self.codes.len() + self.ids.len() * 8 + self.entries.len() * 4
    }
}
