use std::path::Path;

use diskvec_vector::ProductQuantizer;

use super::header::{check_version, checksum_message, Reader};
use super::meta_writer::{MetaParts, MetaWriter};
use super::Header;
use crate::error::{corrupt, file_error};
use crate::Result;
use diskvec_io::SECTOR;

pub const META_MAGIC: &[u8; 8] = b"DISKVECM";
pub(crate) const META_HEADER: usize = 56;

/// The DRAM-resident part of an index: PQ codebook, one PQ code per node and the
/// external id of each node (nodes are numbered by their place on disk).
#[derive(Debug)]
pub struct Meta {
    /// The PQ codebook. Decoding always fills it; an index whose walk is steered by the
    /// 4-bit codes drops it at open (nothing reads it then), and such a `Meta` is never
    /// encoded again (only builds write `meta.dvm`).
    pub pq: Option<ProductQuantizer>,
    pub codes: Vec<u8>,
    pub ids: Vec<i64>,
    /// Nodes a search may start from besides the medoid, spread over the data.
    pub entries: Vec<u32>,
    /// The files holding `nodes.dvn`'s stripes, one per path; relative ones are relative
    /// to the index directory.
    pub paths: Vec<String>,
    /// The nodes header as the build wrote it, but with `meta_crc` 0 (the CRC of this
    /// very file cannot be inside it): a copy that lets a mirrored index open when the
    /// first path's file, which holds the header sector, is lost.
    pub geometry: Header,
    /// Read from the file; checked against the nodes header by `check`.
    pub build_id: u64,
    pub crc: u32,
}

pub(crate) fn encode_paths(paths: &[String]) -> Vec<u8> {
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
    // Every path costs at least its 4-byte length, which bounds a lying count.
    let mut out = Vec::with_capacity(count.min(bytes.len() / 4));
    for _ in 0..count {
        let len = word(at)?;
        let s = std::str::from_utf8(bytes.get(at + 4..(at + 4).checked_add(len)?)?).ok()?;
        out.push(s.to_string());
        at += 4 + len;
    }
    (at == bytes.len()).then_some(out)
}

/// Offset of the CRC field; the CRC covers every other byte of the file, header included,
/// so no field is read before the checksum has vouched for it.
pub(crate) const CRC_AT: usize = 12;

fn file_crc(bytes: &[u8]) -> u32 {
    parts_crc(bytes, &[])
}

/// The CRC of a file from its parts, in file order (the CRC field itself left out).
pub(crate) fn parts_crc(head: &[u8], rest: &[&[u8]]) -> u32 {
    let mut h = head_crc(head);
    for part in rest {
        h.update(part);
    }
    h.finalize()
}

/// A CRC over the start of a file, its CRC field left out; the rest follows it.
pub(crate) fn head_crc(head: &[u8]) -> crc32fast::Hasher {
    let mut h = crc32fast::Hasher::new();
    h.update(&head[..CRC_AT]);
    h.update(&head[CRC_AT + 4..]);
    h
}

/// Where the codebook ends (and the codes begin), as the header says: `None` when that does
/// not fit a `usize`. `header` is at least `META_HEADER` bytes.
pub(crate) fn codebook_end(header: &[u8]) -> Option<usize> {
    let pq_len = Reader {
        buf: header,
        at: 32,
    }
    .u64();
    usize::try_from(pq_len).ok()?.checked_add(META_HEADER)
}

/// Where the codes lie in a meta file of `len` bytes whose first bytes are `start` (at least
/// the header and the codebook): `None` when the header's sizes do not fit the file.
pub(crate) fn codes_span(start: &[u8], len: usize) -> Option<std::ops::Range<usize>> {
    let count = Reader {
        buf: start.get(..META_HEADER)?,
        at: 24,
    }
    .u64();
    let count = usize::try_from(count).ok()?;
    let codes_at = codebook_end(start)?;
    let pq = ProductQuantizer::from_bytes(start.get(META_HEADER..codes_at)?)?;
    let codes_end = count.checked_mul(pq.code_bytes())?.checked_add(codes_at)?;
    (codes_end <= len).then_some(codes_at..codes_end)
}

/// Why `codes_span` found no codes in a checked file: an unreadable codebook, or sizes
/// beyond the file.
fn span_error(bytes: &[u8], path: &Path) -> crate::IndexError {
    let codebook = codebook_end(bytes).and_then(|end| bytes.get(META_HEADER..end));
    match codebook {
        Some(c) if ProductQuantizer::from_bytes(c).is_none() => corrupt(
            path,
            format!("unreadable PQ codebook at offset {META_HEADER}"),
        ),
        _ => too_big(path, bytes.len()),
    }
}

fn too_big(path: &Path, len: usize) -> crate::IndexError {
    corrupt(
        path,
        format!("the sizes in its header do not add up to its {len} bytes (truncated?)"),
    )
}

impl Meta {
    /// Serializes to the bytes of `meta.dvm`; returns them and the file's CRC (the one
    /// `nodes.dvn`'s header repeats as `meta_crc`).
    pub fn encode(&self, build_id: u64) -> (Vec<u8>, u32) {
        let codebook = self
            .pq
            .as_ref()
            .map_or_else(Vec::new, ProductQuantizer::to_bytes);
        let parts = MetaParts {
            build_id,
            count: self.ids.len(),
            codebook: &codebook,
            code_bytes: self.pq.as_ref().map_or_else(
                || self.codes.len() / self.ids.len().max(1),
                ProductQuantizer::code_bytes,
            ),
            entries: &self.entries,
            paths: &self.paths,
        };
        let version = super::header::layout_version_for(self.geometry.element);
        let written = MetaWriter::start(Vec::new(), parts, version).and_then(|mut w| {
            w.codes(&self.codes)?;
            w.ids(&self.ids)?;
            w.finish(&self.geometry)
        });
        // Writing into a Vec fails only when codes and ids disagree with the count, which
        // decoding and every build rule out.
        let (mut out, crc, _) = written.expect("meta.dvm encodes into memory");
        out[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
        (out, crc)
    }

    /// Reads `meta.dvm` and checks its own consistency (see `decode`). The PQ codes, most of
    /// the file, are read straight into the buffer that keeps them (`meta_read.rs`), not
    /// into a copy of the whole file first: at 1M x 768 that copy was 100 MB more at the
    /// moment a merge switched its segment in.
    pub fn read(path: &Path) -> Result<Self> {
        Self::read_keeping(path, true)
    }

    /// `read`, but the PQ codes are only checksummed as they stream by, not kept (`codes`
    /// is empty): for an index that opens with its compact codes.
    pub(crate) fn read_without_codes(path: &Path) -> Result<Self> {
        Self::read_keeping(path, false)
    }

    fn read_keeping(path: &Path, keep_codes: bool) -> Result<Self> {
        match super::meta_read::read_streamed(path, keep_codes)? {
            Some(meta) => Ok(meta),
            // Damaged or not a meta file at all: decoding the whole names the problem.
            None => {
                let bytes = std::fs::read(path).map_err(file_error(path))?;
                Self::decode(&bytes, path)
            }
        }
    }

    /// Parses the bytes of `meta.dvm` read from `path`: magic, then the checksum, then the
    /// version, then sizes; nothing is allocated beyond what the bytes themselves hold.
    pub fn decode(bytes: &[u8], path: &Path) -> Result<Self> {
        if bytes.len() < 8 || &bytes[..8] != META_MAGIC {
            return Err(corrupt(path, "not a diskvec meta file (bad magic)"));
        }
        if bytes.len() < META_HEADER {
            return Err(corrupt(
                path,
                format!(
                    "file is {} bytes, shorter than its {META_HEADER}-byte header (truncated?)",
                    bytes.len()
                ),
            ));
        }
        let mut r = Reader { buf: bytes, at: 8 };
        let (version, crc) = (r.u32(), r.u32());
        if file_crc(bytes) != crc {
            // Version 2 checksummed the body only; an intact file of that version is old,
            // not damaged, and is refused as such.
            if version == 2 && crc32fast::hash(&bytes[META_HEADER..]) == crc {
                check_version(version, path)?;
            }
            return Err(corrupt(path, checksum_message("meta", version)));
        }
        check_version(version, path)?;
        let Some(span) = codes_span(bytes, bytes.len()) else {
            return Err(span_error(bytes, path));
        };
        let codes = diskvec_vector::to_huge_pages(&bytes[span.clone()]);
        Self::assemble(
            &bytes[..span.start],
            (codes, span.len()),
            &bytes[span.end..],
            path,
        )
    }

    /// A checked file (magic, checksum, version) from its three parts: everything before
    /// the codes, the codes (or none, when they were not kept) and their length, everything
    /// after them.
    pub(crate) fn assemble(
        head: &[u8],
        (codes, codes_len): (Vec<u8>, usize),
        tail: &[u8],
        path: &Path,
    ) -> Result<Self> {
        let total = head.len() + codes_len + tail.len();
        let too_big = || too_big(path, total);
        let mut r = Reader { buf: head, at: 12 };
        let crc = r.u32();
        let build_id = r.u64();
        let mut size = || usize::try_from(r.u64()).ok();
        let (count, pq_len, entries, placement) = (size(), size(), size(), size());
        let (Some(count), Some(_), Some(entries), Some(placement)) =
            (count, pq_len, entries, placement)
        else {
            return Err(too_big());
        };
        let pq = ProductQuantizer::from_bytes(&head[META_HEADER..]).ok_or_else(|| {
            corrupt(
                path,
                format!("unreadable PQ codebook at offset {META_HEADER}"),
            )
        })?;
        if Some(codes_len) != count.checked_mul(pq.code_bytes()) {
            return Err(too_big());
        }
        let end_of = |at: usize, n: usize, width: usize| {
            n.checked_mul(width).and_then(|b| b.checked_add(at))
        };
        let entries_at = end_of(0, count, 8).ok_or_else(too_big)?;
        let placement_at = end_of(entries_at, entries, 4).ok_or_else(too_big)?;
        let geometry_at = end_of(placement_at, placement, 1).ok_or_else(too_big)?;
        if end_of(geometry_at, 1, SECTOR) != Some(tail.len()) {
            return Err(too_big());
        }
        let geometry = Header::decode(&tail[geometry_at..], path)?;
        let ids = tail[..entries_at]
            .chunks_exact(8)
            .map(|b| i64::from_le_bytes(b.try_into().unwrap()))
            .collect();
        let entries: Vec<u32> = tail[entries_at..placement_at]
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        let tail_at = head.len() + codes_len;
        if let Some(i) = entries.iter().position(|&e| e as usize >= count) {
            return Err(corrupt(
                path,
                format!(
                    "entry node {} at offset {} is out of range ({count} nodes)",
                    entries[i],
                    tail_at + entries_at + 4 * i
                ),
            ));
        }
        let paths = decode_paths(&tail[placement_at..geometry_at])
            .filter(|p| !p.is_empty())
            .ok_or_else(|| {
                corrupt(
                    path,
                    format!(
                        "unreadable placement (list of path files) at offset {}",
                        tail_at + placement_at
                    ),
                )
            })?;
        Ok(Self {
            pq: Some(pq),
            codes,
            ids,
            entries,
            paths,
            geometry,
            build_id,
            crc,
        })
    }

    /// The nodes header this meta file was written with (from its copy).
    pub fn header(&self) -> Header {
        Header {
            meta_crc: self.crc,
            ..self.geometry.clone()
        }
    }

    /// Checks that this meta file and the nodes header come from the same build.
    pub fn check(&self, header: &Header, path: &Path) -> Result<()> {
        if self.build_id != header.build_id
            || self.ids.len() as u64 != header.count
            || self.crc != header.meta_crc
        {
            return Err(corrupt(path, "belongs to a different build than nodes.dvn"));
        }
        let codebook_fits = self.pq.as_ref().is_some_and(|pq| {
            pq.dim == header.dim as usize && pq.code_bytes() == header.pq_bytes as usize
        });
        if !codebook_fits {
            return Err(corrupt(path, "PQ codebook does not match the index"));
        }
        if self.header() != *header {
            return Err(corrupt(
                path,
                "its copy of the nodes header differs from the header in nodes.dvn",
            ));
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
        self.pq.as_ref().map_or(0, ProductQuantizer::dram_bytes)
            + self.codes.len()
            + self.ids.len() * 8
            + self.entries.len() * 4
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::IndexError;

    pub(crate) fn sample() -> Meta {
        let data: Vec<f32> = (0..4 * 300).map(|i| (i % 17) as f32 * 0.1).collect();
        let pq = ProductQuantizer::train(&data, 4, 2, true, 300, 1).unwrap();
        Meta {
            codes: pq.encode_all(&data[..4 * 3]),
            pq: Some(pq),
            ids: vec![10, 11, 12],
            entries: vec![0, 2],
            paths: vec!["nodes.dvn".into()],
            geometry: Header {
                metric: diskvec_vector::Metric::L2,
                dim: 4,
                max_degree: 8,
                count: 3,
                medoid: 1,
                build_list: 20,
                alpha: 1.2,
                pq_bytes: 2,
                build_id: 7,
                meta_crc: 0,
                stripe_bytes: 65536,
                path_count: 1,
                mirrored: false,
                element: diskvec_vector::ElementType::Float32,
            },
            build_id: 7,
            crc: 0,
        }
    }

    #[test]
    fn round_trips() {
        let m = sample();
        let (bytes, crc) = m.encode(7);
        let back = Meta::decode(&bytes, Path::new("meta.dvm")).unwrap();
        assert_eq!(back.crc, crc);
        assert_eq!(back.build_id, 7);
        assert_eq!(back.geometry, m.geometry);
        assert_eq!(back.header().meta_crc, crc);
        assert_eq!(
            (back.pq, back.codes, back.ids, back.entries, back.paths),
            (m.pq, m.codes, m.ids, m.entries, m.paths)
        );
    }

    /// Every header field is under the checksum: a flipped byte in the version field (or
    /// anywhere else) is reported as damage, never as an unsupported version.
    #[test]
    fn checksum_covers_the_header_and_comes_before_the_version() {
        let p = Path::new("meta.dvm");
        let (bytes, _) = sample().encode(7);
        let mut bad = bytes.clone();
        bad[10] ^= 0xff;
        let msg = Meta::decode(&bad, p).unwrap_err().to_string();
        assert!(msg.contains("meta.dvm"), "{msg}");
        assert!(msg.contains("checksum mismatch"), "{msg}");
        assert!(msg.contains("the version field reads 16711683"), "{msg}");
        assert!(!msg.contains("not supported"), "{msg}");
        for at in (8..bytes.len()).filter(|&at| !(CRC_AT..CRC_AT + 4).contains(&at)) {
            let mut bad = bytes.clone();
            bad[at] ^= 1;
            let msg = Meta::decode(&bad, p).unwrap_err().to_string();
            assert!(msg.contains("checksum mismatch"), "byte {at}: {msg}");
        }
    }

    #[test]
    fn versions_other_than_ours_are_refused_once_intact() {
        let p = Path::new("meta.dvm");
        let (mut bytes, _) = sample().encode(7);
        // An intact version-2 file: same layout, CRC over the body only.
        bytes[8..12].copy_from_slice(&2u32.to_le_bytes());
        let crc = crc32fast::hash(&bytes[META_HEADER..]);
        bytes[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
        let msg = Meta::decode(&bytes, p).unwrap_err().to_string();
        assert!(msg.contains("layout version 2"), "{msg}");
        assert!(msg.contains("rebuild the index"), "{msg}");
        // A newer version, intact.
        bytes[8..12].copy_from_slice(&9u32.to_le_bytes());
        let crc = file_crc(&bytes);
        bytes[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
        assert!(matches!(
            Meta::decode(&bytes, p),
            Err(IndexError::UnsupportedVersion { found: 9, .. })
        ));
    }

    #[test]
    fn lying_sizes_are_refused_without_allocating() {
        let p = Path::new("meta.dvm");
        let (bytes, _) = sample().encode(7);
        for field in [24, 32, 40, 48] {
            for value in [u64::MAX, u64::MAX / 8, 1 << 40, 0] {
                let mut bad = bytes.clone();
                bad[field..field + 8].copy_from_slice(&value.to_le_bytes());
                let crc = file_crc(&bad);
                bad[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
                let msg = Meta::decode(&bad, p).unwrap_err().to_string();
                assert!(msg.starts_with("meta.dvm: "), "{msg}");
            }
        }
        assert!(Meta::decode(&bytes[..30], p).is_err());
        assert!(Meta::decode(b"DISK", p).is_err());
    }

    /// What `read` makes of the file holding `bytes`: the same as `decode` makes of them.
    fn read_as_decode(bytes: &[u8], what: &str) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("meta.dvm");
        std::fs::write(&path, bytes).unwrap();
        // Without its codes, a file reads as decoding it and dropping them.
        let without = Meta::read_without_codes(&path).map(|mut m| {
            assert!(m.codes.is_empty(), "{what}: codes not kept");
            m.codes = Meta::decode(bytes, &path).map_or_else(|_| Vec::new(), |d| d.codes);
            m
        });
        for read in [Meta::read(&path), without] {
            match (read, Meta::decode(bytes, &path)) {
                (Ok(a), Ok(b)) => assert_eq!(
                    (a.pq, a.codes, a.ids, a.entries, a.paths, a.crc, a.build_id, a.geometry),
                    (b.pq, b.codes, b.ids, b.entries, b.paths, b.crc, b.build_id, b.geometry),
                    "{what}"
                ),
                (a, b) => assert_eq!(
                    a.map(|_| ()).map_err(|e| e.to_string()),
                    b.map(|_| ()).map_err(|e| e.to_string()),
                    "{what}"
                ),
            }
        }
    }

    /// `read` streams the codes into place instead of decoding a copy of the whole file; it
    /// answers every file, intact, damaged, truncated or lying about its sizes, as `decode`.
    #[test]
    fn reading_a_file_answers_as_decoding_it() {
        let (bytes, _) = sample().encode(7);
        read_as_decode(&bytes, "intact");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("meta.dvm");
        std::fs::write(&path, &bytes).unwrap();
        let streamed = crate::diskann::meta_read::read_streamed(&path, true).unwrap();
        assert!(
            streamed.is_some(),
            "an intact file is read without the fallback"
        );
        for at in (0..bytes.len()).step_by(7) {
            let mut bad = bytes.clone();
            bad[at] ^= 1;
            read_as_decode(&bad, &format!("byte {at} flipped"));
        }
        for len in [0, 7, 30, META_HEADER, META_HEADER + 100, bytes.len() - 1] {
            read_as_decode(&bytes[..len], &format!("truncated to {len}"));
        }
        for field in [24, 32, 40, 48] {
            for value in [u64::MAX, u64::MAX / 8, 1 << 40, 0, 1] {
                let mut bad = bytes.clone();
                bad[field..field + 8].copy_from_slice(&value.to_le_bytes());
                let crc = file_crc(&bad);
                bad[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
                read_as_decode(&bad, &format!("field {field} = {value}"));
            }
        }
    }
}
