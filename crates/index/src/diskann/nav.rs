//! The navigation file (`nav.<generation>.dvr`, drawn in docs/format.md): every node's
//! neighbour list and a 4-bit scalar code of its vector, for searches that walk the graph in
//! DRAM and read the SSD only to re-rank the candidates whose codes cannot decide.
//!
//! A build writes it in the index directory (wherever the node files are striped), as part
//! of the same generation (its name
//! carries the build id, the intent record lists it, the meta.dvm switch makes it current).
//! An index opened without navigation never reads it.

use std::io::Read;
use std::path::{Path, PathBuf};

use diskvec_vector::ScalarQuantizer4;

use super::summed_file::{self, SummedWriter, CRC_AT};
use crate::error::{corrupt, file_error};
use crate::Result;
use diskvec_io::storage::Storage;

pub const NAV_MAGIC: &[u8; 8] = b"DISKVECN";
/// 2: the header says when the build left navigation off (`NavOff`) and the file is then
/// the header alone. Version 1 files (navigation always present) are still read.
pub const NAV_VERSION: u32 = 2;
/// Offset of the reason navigation was left off (0: present).
const OFF_AT: usize = 56;
const NAV_HEADER: usize = 64;

/// The file name of generation `build_id`'s navigation data.
pub fn nav_file_name(build_id: u64) -> String {
    format!("nav.{build_id:016x}.dvr")
}

pub(crate) fn nav_path(dir: &Path, build_id: u64) -> PathBuf {
    dir.join(nav_file_name(build_id))
}

/// Which codes steer the walk through the graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WalkCodes {
    /// The 4-bit codes: finer than PQ on embeddings whose dimensions each spread around one
    /// value (every real set we have).
    Sq4,
    /// The PQ codes, when the build found them to rank neighbours better (dimensions with
    /// several separate clusters of values, where 16 evenly spaced levels blur neighbours).
    Pq,
}

impl Navigation {
    /// Whether the 4-bit codes steer the walk; the PQ codes and codebook are then unread.
    pub fn walks_by_sq4(&self) -> bool {
        self.walk == WalkCodes::Sq4
    }
}

/// Neighbour lists and 4-bit codes of every node, by node id (disk order).
#[derive(Debug, PartialEq)]
pub struct Navigation {
    pub walk: WalkCodes,
    /// Share of true nearest neighbours the 4-bit codes ranked first in the build's sample
    /// (0 to 1): below `MIN_CODE_RECALL` they do not decide candidates unread.
    pub code_recall: f32,
    pub sq: ScalarQuantizer4,
    /// Per node: its 4-bit code, then its vector's squared norm (f32, little-endian; the L2
    /// estimate needs it), side by side so one prefetch brings both.
    pub codes: Vec<u8>,
    /// Node `i`'s neighbours are `neighbors[offsets[i]..offsets[i + 1]]`.
    pub offsets: Vec<u32>,
    pub neighbors: Vec<u32>,
}

/// Why a build left navigation off: the data where it would not pay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NavOff {
    /// The 4-bit codes rank too few true neighbours first (`MIN_CODE_RECALL`): a walk
    /// would read every candidate anyway, as a search without navigation does.
    WeakCodes = 1,
    /// The neighbour lists and codes would take more DRAM than the raw vectors (low
    /// dimensions): caching nodes spends that memory better.
    LargerThanVectors = 2,
}

/// A build's record that it wrote no navigation data, with the figures it decided on.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SteppedAside {
    pub why: NavOff,
    pub code_recall: f32,
    /// DRAM the navigation data would have taken, and the raw vectors' bytes.
    pub nav_bytes: u64,
    pub raw_bytes: u64,
}

impl std::fmt::Display for SteppedAside {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let share = 100.0 * self.nav_bytes as f64 / self.raw_bytes.max(1) as f64;
        match self.why {
            NavOff::WeakCodes => write!(
                f,
                "the 4-bit codes found {:.0}% of sampled neighbours (below {:.0}%: a walk \
                 would read every candidate, as a search without navigation does)",
                100.0 * self.code_recall,
                100.0 * MIN_CODE_RECALL
            ),
            NavOff::LargerThanVectors => write!(
                f,
                "navigation would take {:.1} MiB, {share:.0}% of the raw vectors (caching \
                 nodes spends that memory better)",
                self.nav_bytes as f64 / 1048576.0
            ),
        }
    }
}

/// DRAM the navigation data of `n` nodes with `edges` neighbour ids and `code_bytes`-byte
/// codes takes (as `Navigation::dram_bytes` counts it).
pub(crate) fn nav_bytes(n: usize, edges: usize, code_bytes: usize) -> u64 {
    n as u64 * (code_bytes as u64 + 4) + 4 * (n as u64 + 1) + 4 * edges as u64
}

/// Whether navigation would not pay on this build's data, and why: the codes cannot decide
/// candidates, or the data takes more DRAM than the vectors it navigates.
pub(crate) fn step_aside(
    n: usize,
    dim: usize,
    edges: usize,
    code_bytes: usize,
    code_recall: f32,
) -> Option<SteppedAside> {
    let nav_bytes = nav_bytes(n, edges, code_bytes);
    let raw_bytes = n as u64 * dim as u64 * 4;
    let why = if code_recall < MIN_CODE_RECALL {
        NavOff::WeakCodes
    } else if nav_bytes > raw_bytes {
        NavOff::LargerThanVectors
    } else {
        return None;
    };
    Some(SteppedAside {
        why,
        code_recall,
        nav_bytes,
        raw_bytes,
    })
}

/// What a navigation file holds: the data, or the build's record that it left it off.
#[derive(Debug, PartialEq)]
pub enum NavFile {
    Present(Navigation),
    SteppedAside(SteppedAside),
}

/// What a navigation file's header describes: its build, size and codes.
pub(crate) struct NavSummary<'a> {
    pub build_id: u64,
    pub n: usize,
    /// Neighbour ids in all.
    pub edges: usize,
    pub sq: &'a ScalarQuantizer4,
    pub walk: WalkCodes,
    pub code_recall: f32,
}

impl NavSummary<'_> {
    /// The header (its CRC field zero until the file is complete); `off`: navigation left
    /// off, the header is the whole file.
    pub(crate) fn header(&self, off: Option<NavOff>) -> [u8; NAV_HEADER] {
        let mut h = [0u8; NAV_HEADER];
        h[..8].copy_from_slice(NAV_MAGIC);
        h[8..12].copy_from_slice(&NAV_VERSION.to_le_bytes());
        h[16..24].copy_from_slice(&self.build_id.to_le_bytes());
        h[24..32].copy_from_slice(&(self.n as u64).to_le_bytes());
        h[32..40].copy_from_slice(&(self.edges as u64).to_le_bytes());
        h[40..44].copy_from_slice(&(self.sq.to_bytes().len() as u32).to_le_bytes());
        h[44..48].copy_from_slice(&(self.sq.code_bytes() as u32).to_le_bytes());
        h[48..52].copy_from_slice(&(self.walk as u32).to_le_bytes());
        h[52..56].copy_from_slice(&self.code_recall.to_le_bytes());
        h[OFF_AT..OFF_AT + 4].copy_from_slice(&off.map_or(0u32, |o| o as u32).to_le_bytes());
        h
    }

    /// Whether navigation would not pay for vectors of `dim` dimensions (`step_aside`).
    pub(crate) fn step_aside(&self, dim: usize) -> Option<SteppedAside> {
        step_aside(
            self.n,
            dim,
            self.edges,
            self.sq.code_bytes(),
            self.code_recall,
        )
    }

    /// Writes the file of a build that left navigation off: the header alone, with the
    /// reason and the figures it was decided on.
    pub(crate) fn write_stepped_aside(
        &self,
        storage: &dyn Storage,
        path: &Path,
        why: NavOff,
    ) -> Result<()> {
        SummedWriter::start(storage, path, &self.header(Some(why)))?.finish()
    }
}

/// Writes a navigation file a section at a time (codes, then offsets, then neighbour ids),
/// so a build need not hold it whole.
pub(crate) struct NavWriter;

impl NavWriter {
    pub(crate) fn create<'s>(
        storage: &'s dyn Storage,
        path: &Path,
        summary: &NavSummary,
    ) -> Result<SummedWriter<'s>> {
        let mut w = SummedWriter::start(storage, path, &summary.header(None))?;
        w.write(&summary.sq.to_bytes())?;
        Ok(w)
    }
}

fn header_crc(header: &[u8]) -> crc32fast::Hasher {
    summed_file::header_crc(&header[..NAV_HEADER])
}

fn file_crc(bytes: &[u8]) -> u32 {
    let mut h = header_crc(bytes);
    h.update(&bytes[NAV_HEADER..]);
    h.finalize()
}

/// The sampled recall the 4-bit codes need before a search trusts them to decide
/// candidates unread. Real embeddings measure 0.95 (both shipped sets); data whose
/// dimensions hold several separate clusters of values measured 0.24.
pub const MIN_CODE_RECALL: f32 = 0.8;

impl Navigation {
    /// Whether the 4-bit estimates may decide candidates without reading them.
    pub fn codes_decide(&self) -> bool {
        self.code_recall >= MIN_CODE_RECALL
    }

    pub fn len(&self) -> usize {
        self.offsets.len().saturating_sub(1)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes per node in `codes`: the code and the norm.
    pub fn record_bytes(&self) -> usize {
        self.sq.code_bytes() + 4
    }

    /// Node `id`'s code and norm, together.
    #[inline]
    pub fn record(&self, id: u32) -> &[u8] {
        let m = self.record_bytes();
        &self.codes[id as usize * m..(id as usize + 1) * m]
    }

    /// The code and norm of a `record`.
    #[inline]
    pub fn split(record: &[u8]) -> (&[u8], f32) {
        let (code, norm) = record.split_at(record.len() - 4);
        (code, f32::from_le_bytes(norm.try_into().expect("4 bytes")))
    }

    #[inline]
    pub fn neighbors(&self, id: u32) -> &[u32] {
        let i = id as usize;
        &self.neighbors[self.offsets[i] as usize..self.offsets[i + 1] as usize]
    }

    /// DRAM the loaded navigation data takes.
    pub fn dram_bytes(&self) -> usize {
        nav_bytes(self.len(), self.neighbors.len(), self.sq.code_bytes()) as usize
    }

    /// What this data's file header says, as generation `build_id`'s.
    pub(crate) fn summary(&self, build_id: u64) -> NavSummary<'_> {
        NavSummary {
            build_id,
            n: self.len(),
            edges: self.neighbors.len(),
            sq: &self.sq,
            walk: self.walk,
            code_recall: self.code_recall,
        }
    }

    pub fn encode(&self, build_id: u64) -> Vec<u8> {
        let sq = self.sq.to_bytes();
        let mut out = Vec::with_capacity(
            NAV_HEADER
                + sq.len()
                + self.codes.len()
                + 4 * (self.offsets.len() + self.neighbors.len()),
        );
        out.extend_from_slice(&self.summary(build_id).header(None));
        out.extend_from_slice(&sq);
        out.extend_from_slice(&self.codes);
        for v in self.offsets.iter().chain(&self.neighbors) {
            out.extend_from_slice(&v.to_le_bytes());
        }
        let crc = file_crc(&out);
        out[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
        out
    }

    /// Writes the file (temporary name, fsync, rename); the caller syncs the directory
    /// before the commit that makes this generation current.
    pub fn write(&self, storage: &dyn Storage, path: &Path, build_id: u64) -> Result<()> {
        let mut w = NavWriter::create(storage, path, &self.summary(build_id))?;
        w.write(&self.codes)?;
        w.write_words(&self.offsets)?;
        w.write_words(&self.neighbors)?;
        w.finish()
    }

    /// Reads the file of generation `build_id` for an index of `count` nodes of `dim`
    /// dimensions; every mismatch is an error naming the file. The file is streamed into
    /// its typed sections, so opening holds the navigation data once, not twice (it is
    /// most of the DRAM a navigating index asks of a tight budget).
    pub fn read(path: &Path, build_id: u64, count: usize, dim: usize) -> Result<NavFile> {
        let file = std::fs::File::open(path).map_err(file_error(path))?;
        let len = file.metadata().map_err(file_error(path))?.len();
        let nav = Self::decode_from(&file, len, path, build_id, count, dim);
        // Held in memory now; the cached copy would be charged twice.
        diskvec_io::forget_cached(&file);
        nav
    }

    /// Parses a navigation file held in memory (see `decode_from`).
    pub fn decode(
        bytes: &[u8],
        path: &Path,
        build_id: u64,
        count: usize,
        dim: usize,
    ) -> Result<NavFile> {
        Self::decode_from(bytes, bytes.len() as u64, path, build_id, count, dim)
    }

    /// Parses a navigation file of `len` bytes from `src`: magic and version, then the
    /// section sizes checked against `len` before anything is allocated from them, then
    /// the sections (checksummed as they stream by), then their contents.
    fn decode_from(
        mut src: impl Read,
        len: u64,
        path: &Path,
        build_id: u64,
        count: usize,
        dim: usize,
    ) -> Result<NavFile> {
        let mut header = [0u8; NAV_HEADER];
        let got = read_up_to(&mut src, &mut header).map_err(file_error(path))?;
        if got < 8 || &header[..8] != NAV_MAGIC {
            return Err(corrupt(path, "not a diskvec navigation file (bad magic)"));
        }
        if got < NAV_HEADER {
            return Err(corrupt(path, "shorter than its header (truncated?)"));
        }
        let (u32_at, u64_at) = (|at| word32(&header, at), |at| word64(&header, at));
        let version = u32_at(8);
        if !(1..=NAV_VERSION).contains(&version) {
            return Err(corrupt(
                path,
                format!(
                    "navigation format version {version}; this build reads {NAV_VERSION} \
                     (damaged, or written by a newer diskvec)"
                ),
            ));
        }
        let (n, edges) = (u64_at(24), u64_at(32));
        let (sq_len, code_bytes) = (u32_at(40) as usize, u32_at(44) as usize);
        // Version 1 kept these bytes zero: navigation present.
        let off = match u32_at(OFF_AT) {
            0 => None,
            1 if version >= 2 => Some(NavOff::WeakCodes),
            2 if version >= 2 => Some(NavOff::LargerThanVectors),
            other => {
                return Err(corrupt(
                    path,
                    format!("unknown reason {other} for no navigation"),
                ))
            }
        };
        if let Some(why) = off {
            return Self::decode_stepped_aside(&header, len, path, build_id, count, dim, why);
        }
        let sections = [
            sq_len as u128,
            n as u128 * (code_bytes as u128 + 4),
            (n as u128 + 1) * 4,
            edges as u128 * 4,
        ];
        if NAV_HEADER as u128 + sections.iter().sum::<u128>() != len as u128 {
            return Err(corrupt(
                path,
                "section sizes do not add up to the file's length (damaged or truncated)",
            ));
        }
        let mut crc = header_crc(&header);
        // Every size below is bounded by `len`, checked above.
        let mut bytes_of = |len: u128| -> std::io::Result<Vec<u8>> {
            // Codes are read at random by every walk step: huge pages spare the TLB misses.
            let mut out = diskvec_vector::filled_with_huge_pages(0u8, len as usize);
            src.read_exact(&mut out)?;
            crc.update(&out);
            Ok(out)
        };
        let sq_bytes = bytes_of(sections[0]).map_err(file_error(path))?;
        let codes = bytes_of(sections[1]).map_err(file_error(path))?;
        let offsets =
            read_words(&mut src, sections[2] as usize / 4, &mut crc).map_err(file_error(path))?;
        let neighbors =
            read_words(&mut src, sections[3] as usize / 4, &mut crc).map_err(file_error(path))?;
        if crc.finalize() != u32_at(CRC_AT) {
            return Err(corrupt(path, "checksum mismatch (damaged or truncated)"));
        }
        let code_recall = check_checked_header(&header, path, build_id, count)?;
        let walk = match u32_at(48) {
            0 => WalkCodes::Sq4,
            1 => WalkCodes::Pq,
            other => return Err(corrupt(path, format!("unknown walk codes {other}"))),
        };
        let sq = ScalarQuantizer4::from_bytes(&sq_bytes)
            .filter(|sq| sq.dim() == dim && sq.code_bytes() == code_bytes)
            .ok_or_else(|| corrupt(path, "quantizer does not fit the index's dimension"))?;
        let monotone = offsets.first() == Some(&0)
            && offsets.windows(2).all(|w| w[0] <= w[1])
            && offsets.last().map(|&l| l as u64) == Some(edges);
        if !monotone {
            return Err(corrupt(path, "neighbour offsets out of order"));
        }
        if neighbors.iter().any(|&nb| nb as usize >= count) {
            return Err(corrupt(path, "a neighbour id beyond the index"));
        }
        Ok(NavFile::Present(Self {
            walk,
            code_recall,
            sq,
            codes,
            offsets,
            neighbors,
        }))
    }

    /// The rest of a file whose header says navigation was left off: nothing may follow
    /// the header, which is checked as a whole file's would be.
    fn decode_stepped_aside(
        header: &[u8; NAV_HEADER],
        len: u64,
        path: &Path,
        build_id: u64,
        count: usize,
        dim: usize,
        why: NavOff,
    ) -> Result<NavFile> {
        let (u32_at, u64_at) = (|at| word32(header, at), |at| word64(header, at));
        if len != NAV_HEADER as u64 {
            return Err(corrupt(
                path,
                "a navigation file left off holds more than its header (damaged)",
            ));
        }
        if header_crc(header).finalize() != u32_at(CRC_AT) {
            return Err(corrupt(path, "checksum mismatch (damaged or truncated)"));
        }
        let code_recall = check_checked_header(header, path, build_id, count)?;
        let edges = usize::try_from(u64_at(32)).unwrap_or(usize::MAX);
        Ok(NavFile::SteppedAside(SteppedAside {
            why,
            code_recall,
            nav_bytes: nav_bytes(count, edges.min(u32::MAX as usize), u32_at(44) as usize),
            raw_bytes: count as u64 * dim as u64 * 4,
        }))
    }
}

/// The fields of a header whose checksum held that both kinds of file share: its build and
/// node count must be the index's, the reserved bytes zero; returns the code recall.
fn check_checked_header(
    header: &[u8; NAV_HEADER],
    path: &Path,
    build_id: u64,
    count: usize,
) -> Result<f32> {
    if word64(header, 16) != build_id {
        return Err(corrupt(path, "belongs to another build of the index"));
    }
    let n = word64(header, 24);
    if n != count as u64 {
        return Err(corrupt(path, format!("holds {n} nodes, the index {count}")));
    }
    if header[OFF_AT + 4..NAV_HEADER].iter().any(|&b| b != 0) {
        return Err(corrupt(path, "reserved header bytes are not zero"));
    }
    let code_recall = f32::from_le_bytes(header[52..56].try_into().expect("4 bytes"));
    if !(0.0..=1.0).contains(&code_recall) {
        return Err(corrupt(
            path,
            format!("code recall {code_recall} outside 0..1"),
        ));
    }
    Ok(code_recall)
}

fn word32(header: &[u8; NAV_HEADER], at: usize) -> u32 {
    u32::from_le_bytes(header[at..at + 4].try_into().expect("4 bytes"))
}

fn word64(header: &[u8; NAV_HEADER], at: usize) -> u64 {
    u64::from_le_bytes(header[at..at + 8].try_into().expect("8 bytes"))
}

/// Fills as much of `buf` as `src` holds; returns how much that was.
fn read_up_to(src: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match src.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// Reads `count` little-endian u32 words through a small buffer (no second copy of the
/// section), adding their bytes to `crc`.
fn read_words(
    src: &mut impl Read,
    count: usize,
    crc: &mut crc32fast::Hasher,
) -> std::io::Result<Vec<u32>> {
    const CHUNK_WORDS: usize = 16 * 1024;
    let mut out = diskvec_vector::vec_with_huge_pages(count);
    let mut buf = vec![0u8; CHUNK_WORDS * 4];
    while out.len() < count {
        let words = (count - out.len()).min(CHUNK_WORDS);
        let chunk = &mut buf[..words * 4];
        src.read_exact(chunk)?;
        crc.update(chunk);
        out.extend(
            chunk
                .chunks_exact(4)
                .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes"))),
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Navigation {
        let dim = 8;
        let data: Vec<f32> = (0..4 * dim).map(|i| (i as f32 * 0.37).sin()).collect();
        let sq = ScalarQuantizer4::train(&data, dim);
        let m = sq.code_bytes();
        let mut codes = vec![0u8; 4 * (m + 4)];
        for (i, (row, record)) in data
            .chunks_exact(dim)
            .zip(codes.chunks_exact_mut(m + 4))
            .enumerate()
        {
            sq.encode(row, &mut record[..m]);
            record[m..].copy_from_slice(&(i as f32).to_le_bytes());
        }
        Navigation {
            walk: WalkCodes::Pq,
            code_recall: 0.5,
            sq,
            codes,
            offsets: vec![0, 2, 3, 3, 5],
            neighbors: vec![1, 2, 0, 0, 1],
        }
    }

    #[test]
    fn a_written_file_reads_back_and_every_damage_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let nav = sample();
        let path = nav_path(dir.path(), 7);
        nav.write(&diskvec_io::storage::FsStorage, &path, 7)
            .unwrap();
        let NavFile::Present(back) = Navigation::read(&path, 7, 4, 8).unwrap() else {
            panic!("navigation present");
        };
        assert_eq!(back, nav);
        assert_eq!(back.neighbors(0), &[1, 2]);
        assert_eq!(Navigation::split(back.record(3)).1, 3.0);
        assert!(back.neighbors(2).is_empty());
        let err = |r: Result<NavFile>| r.expect_err("refused").to_string();
        assert!(err(Navigation::read(&path, 8, 4, 8)).contains("another build"));
        assert!(err(Navigation::read(&path, 7, 5, 8)).contains("4 nodes"));
        let bytes = std::fs::read(&path).unwrap();
        for at in [0, 9, 30, NAV_HEADER + 3, bytes.len() - 1] {
            let mut bad = bytes.clone();
            bad[at] ^= 0x40;
            assert!(
                Navigation::decode(&bad, &path, 7, 4, 8).is_err(),
                "byte {at}"
            );
        }
        assert!(Navigation::decode(&bytes[..bytes.len() - 4], &path, 7, 4, 8).is_err());

        // A version 1 file (the reason bytes zero) still reads.
        let mut v1 = bytes.clone();
        v1[8..12].copy_from_slice(&1u32.to_le_bytes());
        let crc = file_crc(&v1);
        v1[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
        assert!(matches!(
            Navigation::decode(&v1, &path, 7, 4, 8).unwrap(),
            NavFile::Present(_)
        ));
    }

    #[test]
    fn a_build_that_left_navigation_off_says_why_and_damage_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let nav = sample();
        let path = nav_path(dir.path(), 9);
        NavSummary {
            build_id: 9,
            n: 4,
            edges: 5,
            sq: &nav.sq,
            walk: WalkCodes::Pq,
            code_recall: 0.25,
        }
        .write_stepped_aside(&diskvec_io::storage::FsStorage, &path, NavOff::WeakCodes)
        .unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes.len(), NAV_HEADER, "the header alone");
        let NavFile::SteppedAside(off) = Navigation::read(&path, 9, 4, 8).unwrap() else {
            panic!("left off");
        };
        assert_eq!(off.why, NavOff::WeakCodes);
        assert_eq!(off.code_recall, 0.25);
        assert_eq!(off.nav_bytes, nav_bytes(4, 5, nav.sq.code_bytes()));
        assert_eq!(off.raw_bytes, 4 * 8 * 4);
        assert!(
            off.to_string().contains("found 25% of sampled neighbours"),
            "{off}"
        );
        assert!(Navigation::read(&path, 8, 4, 8).is_err());
        assert!(Navigation::read(&path, 9, 5, 8).is_err());
        for at in [9, 20, OFF_AT, OFF_AT + 5] {
            let mut bad = bytes.clone();
            bad[at] ^= 0x40;
            assert!(
                Navigation::decode(&bad, &path, 9, 4, 8).is_err(),
                "byte {at}"
            );
        }
        let mut longer = bytes.clone();
        longer.extend_from_slice(&[0; 8]);
        assert!(Navigation::decode(&longer, &path, 9, 4, 8).is_err());
        // A reason in a version 1 file is damage: that version had none.
        let mut v1 = bytes;
        v1[8..12].copy_from_slice(&1u32.to_le_bytes());
        let crc = header_crc(&v1).finalize();
        v1[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
        assert!(Navigation::decode(&v1, &path, 9, 4, 8).is_err());
    }

    #[test]
    fn navigation_steps_aside_for_weak_codes_and_for_data_larger_than_the_vectors() {
        // 768 dimensions, 48 neighbours: a fifth of the vectors, codes that decide.
        assert_eq!(step_aside(1000, 768, 48_000, 384, 0.95), None);
        let weak = step_aside(1000, 768, 48_000, 384, 0.5).unwrap();
        assert_eq!(weak.why, NavOff::WeakCodes);
        // 50 dimensions, 60 neighbours: the lists alone outweigh the vectors.
        let big = step_aside(1000, 50, 60_000, 25, 0.95).unwrap();
        assert_eq!(big.why, NavOff::LargerThanVectors);
        assert!(big.nav_bytes > big.raw_bytes);
        assert!(big.to_string().contains("of the raw vectors"), "{big}");
    }
}
