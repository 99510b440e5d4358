//! The compact code set (`compact.<generation>.dvq`, drawn in docs/format.md): a second PQ
//! codebook with a quarter of the code bytes, over the data's principal directions
//! (`ProductQuantizer::train_projected`), and every node's code in it, written by every build
//! beside its node files as part of the same generation.
//!
//! Searches walk the graph by PQ distances from DRAM, so the codes are most of what an index
//! holds there: 192 MB at 1M x 768. Where the memory a process has cannot hold them (a
//! memory cgroup of 5% of the raw vectors), the index opens with these instead
//! (`OpenOptions::compact_codes`): coarser estimates steer the walk, and the full vectors
//! read from the SSD still decide the answer. An index built before the file existed, or
//! whose file is damaged, opens with its full codes.

use std::io::Read;
use std::path::{Path, PathBuf};

use diskvec_vector::ProductQuantizer;

use super::summed_file::{header_crc, SummedWriter, CRC_AT};
use crate::error::{corrupt, file_error};
use crate::Result;

pub const COMPACT_MAGIC: &[u8; 8] = b"DISKVECQ";
pub const COMPACT_VERSION: u32 = 1;
const COMPACT_HEADER: usize = 48;

/// The full codes are this many times the compact ones.
pub const COMPACT_RATIO: usize = 4;

/// Code bytes of the compact set for full codes of `pq_bytes`: `None` below 8 bytes, where
/// the full codes are small already and a quarter of them would steer no walk.
pub fn compact_code_bytes(pq_bytes: usize) -> Option<usize> {
    (pq_bytes >= 2 * COMPACT_RATIO).then_some(pq_bytes / COMPACT_RATIO)
}

/// The file name of generation `build_id`'s compact codes.
pub fn compact_file_name(build_id: u64) -> String {
    format!("{COMPACT_PREFIX}{build_id:016x}{COMPACT_SUFFIX}")
}

const COMPACT_PREFIX: &str = "compact.";
const COMPACT_SUFFIX: &str = ".dvq";

/// Whether `dir` holds a compact code file of any generation: a look before opening (which
/// reads no codes); the index checks the file's generation when it opens with them.
pub fn has_compact_file(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries.flatten().any(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.starts_with(COMPACT_PREFIX) && name.ends_with(COMPACT_SUFFIX)
        })
    })
}

pub(crate) fn compact_path(dir: &Path, build_id: u64) -> PathBuf {
    dir.join(compact_file_name(build_id))
}

/// Starts generation `build_id`'s compact file for `count` codes of `pq`: the caller writes
/// the codes in node order, then `finish`es it.
pub(crate) fn create<'s>(
    storage: &'s dyn diskvec_io::storage::Storage,
    path: &Path,
    build_id: u64,
    count: usize,
    pq: &ProductQuantizer,
) -> Result<SummedWriter<'s>> {
    let codebook = pq.to_bytes();
    let mut h = [0u8; COMPACT_HEADER];
    h[..8].copy_from_slice(COMPACT_MAGIC);
    h[8..12].copy_from_slice(&COMPACT_VERSION.to_le_bytes());
    h[16..24].copy_from_slice(&build_id.to_le_bytes());
    h[24..32].copy_from_slice(&(count as u64).to_le_bytes());
    h[32..40].copy_from_slice(&(codebook.len() as u64).to_le_bytes());
    h[40..44].copy_from_slice(&(pq.code_bytes() as u32).to_le_bytes());
    let mut w = SummedWriter::start(storage, path, &h)?;
    w.write(&codebook)?;
    Ok(w)
}

/// The DRAM an index in `dir` saves by opening with its compact codes instead of the full
/// ones (fewer code bytes, less the compact codebook's projection), from the files' headers
/// alone; 0 when it has no compact file of its generation and version, or either header
/// cannot be read.
pub fn compact_saving(dir: &Path) -> u64 {
    let head = |path: &Path, len: usize| -> Option<Vec<u8>> {
        let mut buf = vec![0u8; len];
        std::fs::File::open(path).ok()?.read_exact(&mut buf).ok()?;
        Some(buf)
    };
    let word = |b: &[u8], at: usize, width: usize| -> u64 {
        b[at..at + width]
            .iter()
            .rev()
            .fold(0u64, |v, &byte| v << 8 | byte as u64)
    };
    let saving = || -> Option<u64> {
        // meta.dvm: build_id at 16, count at 24; the codebook after the 56-byte header
        // starts with its dimension and subspaces (the full code bytes).
        let meta = head(&dir.join(super::META_FILE), super::meta::META_HEADER + 8)?;
        let (build_id, count) = (word(&meta, 16, 8), word(&meta, 24, 8));
        let (full_codebook, full) = (
            word(&meta, 32, 8),
            word(&meta, super::meta::META_HEADER + 4, 4),
        );
        let compact = head(&compact_path(dir, build_id), COMPACT_HEADER)?;
        let ours = &compact[..8] == COMPACT_MAGIC
            && word(&compact, 8, 4) == COMPACT_VERSION as u64
            && word(&compact, 16, 8) == build_id
            && word(&compact, 24, 8) == count;
        let codes = count.saturating_mul(full.saturating_sub(word(&compact, 40, 4)));
        let projection = word(&compact, 32, 8).saturating_sub(full_codebook);
        ours.then(|| codes.saturating_sub(projection))
    };
    saving().unwrap_or(0)
}

/// A compact codebook and every node's code in it, by node id.
pub struct CompactCodes {
    pub pq: ProductQuantizer,
    pub codes: Vec<u8>,
}

/// Reads generation `build_id`'s compact file for an index of `count` nodes of `dim`
/// dimensions (see `decode_from`).
pub(crate) fn read(path: &Path, build_id: u64, count: usize, dim: usize) -> Result<CompactCodes> {
    let file = std::fs::File::open(path).map_err(file_error(path))?;
    let len = file.metadata().map_err(file_error(path))?.len();
    let codes = decode_from(&file, len, path, build_id, count, dim);
    // Held in memory now; the cached copy would be charged twice.
    diskvec_io::forget_cached(&file);
    codes
}

impl CompactCodes {
    /// Parses a compact code file held in memory, read from `path` (see `decode_from`).
    pub fn decode(
        bytes: &[u8],
        path: &Path,
        build_id: u64,
        count: usize,
        dim: usize,
    ) -> Result<Self> {
        decode_from(bytes, bytes.len() as u64, path, build_id, count, dim)
    }
}

/// Parses a compact code file of `len` bytes from `src`: magic and version, then the
/// section sizes checked against `len` before anything is allocated from them, then the
/// sections (checksummed as they stream by), then whether they belong to this index.
fn decode_from(
    mut src: impl Read,
    len: u64,
    path: &Path,
    build_id: u64,
    count: usize,
    dim: usize,
) -> Result<CompactCodes> {
    let mut h = [0u8; COMPACT_HEADER];
    if len < COMPACT_HEADER as u64 {
        return Err(corrupt(path, "shorter than its header (truncated?)"));
    }
    src.read_exact(&mut h).map_err(file_error(path))?;
    if &h[..8] != COMPACT_MAGIC {
        return Err(corrupt(path, "not a diskvec compact code file (bad magic)"));
    }
    let word32 = |at: usize| u32::from_le_bytes(h[at..at + 4].try_into().expect("4 bytes"));
    let word64 = |at: usize| u64::from_le_bytes(h[at..at + 8].try_into().expect("8 bytes"));
    let version = word32(8);
    if version != COMPACT_VERSION {
        return Err(corrupt(
            path,
            format!(
                "compact code format version {version}; this build reads {COMPACT_VERSION} \
                 (damaged, or written by a newer diskvec)"
            ),
        ));
    }
    let (n, codebook_len, code_bytes) = (word64(24), word64(32), word32(40));
    let sections = [codebook_len as u128, n as u128 * code_bytes as u128];
    if COMPACT_HEADER as u128 + sections.iter().sum::<u128>() != len as u128 {
        return Err(corrupt(
            path,
            "section sizes do not add up to the file's length (damaged or truncated)",
        ));
    }
    let mut crc = header_crc(&h);
    // Both sizes are bounded by `len`, checked above.
    let mut codebook = vec![0u8; sections[0] as usize];
    src.read_exact(&mut codebook).map_err(file_error(path))?;
    crc.update(&codebook);
    // Codes are read at random by every walk step: huge pages spare the TLB misses.
    let mut codes = diskvec_vector::filled_with_huge_pages(0u8, sections[1] as usize);
    src.read_exact(&mut codes).map_err(file_error(path))?;
    crc.update(&codes);
    if crc.finalize() != word32(CRC_AT) {
        return Err(corrupt(path, "checksum mismatch (damaged or truncated)"));
    }
    if word64(16) != build_id {
        return Err(corrupt(path, "belongs to another build of the index"));
    }
    if n != count as u64 {
        return Err(corrupt(path, format!("holds {n} codes, the index {count}")));
    }
    let pq = ProductQuantizer::from_bytes(&codebook)
        .filter(|pq| pq.dim == dim && pq.code_bytes() == code_bytes as usize)
        .ok_or_else(|| corrupt(path, "codebook does not fit the index's dimension"))?;
    Ok(CompactCodes { pq, codes })
}

#[cfg(test)]
mod tests {
    use super::super::meta::Meta;
    use super::*;

    fn written(dir: &Path) -> (PathBuf, ProductQuantizer, Vec<u8>) {
        let (n, dim) = (300, 16);
        let data: Vec<f32> = (0..n * dim).map(|i| ((i * 37) % 101) as f32).collect();
        let pq = ProductQuantizer::train(&data, dim, 4, true, 300, 1).unwrap();
        let codes = pq.encode_all(&data);
        let path = compact_path(dir, 7);
        let mut w = create(&diskvec_io::storage::FsStorage, &path, 7, n, &pq).unwrap();
        w.write(&codes[..100]).unwrap();
        w.write(&codes[100..]).unwrap();
        w.finish().unwrap();
        (path, pq, codes)
    }

    #[test]
    fn reads_back_what_was_written_and_names_every_mismatch() {
        let dir = tempfile::tempdir().unwrap();
        let (path, pq, codes) = written(dir.path());
        let back = read(&path, 7, 300, 16).unwrap();
        assert_eq!(back.codes, codes);
        assert_eq!(back.pq.to_bytes(), pq.to_bytes());
        let err = |r: Result<CompactCodes>| r.err().expect("refused").to_string();
        assert!(err(read(&path, 8, 300, 16)).contains("another build"));
        assert!(err(read(&path, 7, 301, 16)).contains("holds 300 codes"));
        assert!(err(read(&path, 7, 300, 32)).contains("dimension"));
        let good = std::fs::read(&path).unwrap();
        let mut flipped = good.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        std::fs::write(&path, &flipped).unwrap();
        assert!(err(read(&path, 7, 300, 16)).contains("checksum"));
        std::fs::write(&path, &good[..good.len() - 3]).unwrap();
        assert!(err(read(&path, 7, 300, 16)).contains("do not add up"));
        std::fs::write(&path, &good[..20]).unwrap();
        assert!(err(read(&path, 7, 300, 16)).contains("shorter"));
        let mut other = good.clone();
        other[0] = b'X';
        std::fs::write(&path, &other).unwrap();
        assert!(err(read(&path, 7, 300, 16)).contains("bad magic"));
    }

    #[test]
    fn the_saving_is_read_from_the_headers() {
        let dir = tempfile::tempdir().unwrap();
        let (n, dim) = (300, 16);
        // Full rank: the projection keeps every dimension and costs more than it spares here.
        let data: Vec<f32> = {
            use rand::{Rng, SeedableRng};
            let mut rng = rand::rngs::SmallRng::seed_from_u64(4);
            (0..n * dim).map(|_| rng.random_range(-1.0..1.0)).collect()
        };
        let ids: Vec<i64> = (0..n as i64).collect();
        let params = super::super::BuildParams {
            pq_bytes: Some(8),
            max_degree: 8,
            build_list: 16,
            ..Default::default()
        };
        super::super::build(&data, dim, &ids, &params, dir.path(), &crate::NoProgress).unwrap();
        // 6 code bytes a node, less what the compact codebook (with its projection) takes
        // beyond the full one, each codebook's length as its own file's header says.
        let len_at = |path: PathBuf| {
            let bytes = std::fs::read(path).unwrap();
            u64::from_le_bytes(bytes[32..40].try_into().unwrap())
        };
        let build_id = Meta::read(&dir.path().join(super::super::META_FILE))
            .unwrap()
            .build_id;
        let extra = len_at(compact_path(dir.path(), build_id))
            .saturating_sub(len_at(dir.path().join(super::super::META_FILE)));
        assert!(extra > 0);
        assert_eq!(compact_saving(dir.path()), 300 * 6 - extra);
        // A compact file of another generation is not counted.
        std::fs::rename(
            compact_path(dir.path(), build_id),
            compact_path(dir.path(), build_id + 1),
        )
        .unwrap();
        assert_eq!(compact_saving(dir.path()), 0);
        let empty = tempfile::tempdir().unwrap();
        assert_eq!(compact_saving(empty.path()), 0);
    }

    #[test]
    fn the_compact_set_is_a_quarter_and_none_below_eight_bytes() {
        assert_eq!(compact_code_bytes(192), Some(48));
        assert_eq!(compact_code_bytes(8), Some(2));
        assert_eq!(compact_code_bytes(7), None);
    }
}
