//! `sparse.<i>.dvi`: the inverted index of a sealed segment's sparse space `i` on SSD, for
//! spaces whose index is `on_disk` (Qdrant's `sparse_vectors.<name>.index.on_disk`). The
//! term dictionary is read into DRAM at open (24 bytes a term); a query reads the posting
//! list of each of its terms with one positioned read and checks its CRC, so only the
//! dictionary stays in DRAM. Written once at sealing, atomically and durably.
//!
//! ```text
//! 0          8          12         16         20         24
//! +----------+----------+----------+----------+----------+
//! | magic    | crc32c of| version  | terms    | reserved |
//! | DVSPIDX1 | 12..end  | u32 = 1  | u32 LE   | 0 u32    |
//! |          | of dict. |          |          |          |
//! +----------+----------+----------+----------+----------+
//! | dictionary, terms x 24 bytes, ascending by term:     |
//! |   term u32 | count u32 | offset u64 | crc32c u32 | 0 |
//! |   (offset: byte position of the term's posting list; |
//! |    crc: of the list's count x 8 bytes)               |
//! +------------------------------------------------------+
//! | posting lists, back to back: count x (segment offset |
//! |   u32 LE ascending, weight f32 LE)                   |
//! +------------------------------------------------------+
//! ```

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use diskvec_io::storage::{write_atomic, Storage};

use crate::error::file_error;
use crate::vectors::SparseVector;
use crate::{DbError, Result};

const MAGIC: &[u8; 8] = b"DVSPIDX1";
const VERSION: u32 = 1;
const HEADER: usize = 24;
const ENTRY: usize = 24;

/// The file of sparse space `space` in a segment directory.
pub(crate) fn path(dir: &Path, space: usize) -> PathBuf {
    dir.join(format!("sparse.{space}.dvi"))
}

/// Where one term's list lies.
#[derive(Clone, Copy, Debug)]
struct Entry {
    count: u32,
    offset: u64,
    crc: u32,
}

/// A space's posting lists on SSD: the dictionary in DRAM, the lists read per query.
pub(crate) struct DiskPostings {
    file: File,
    path: PathBuf,
    terms: HashMap<u32, Entry>,
}

fn corrupt(path: &Path, message: impl Into<String>) -> DbError {
    DbError::Corrupt {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

/// Writes the inverted index of `vectors` (by segment offset) as `space`'s file in `dir`.
pub(crate) fn write(
    storage: &dyn Storage,
    dir: &Path,
    space: usize,
    vectors: &[Option<SparseVector>],
) -> Result<()> {
    let mut lists: BTreeMap<u32, Vec<(u32, f32)>> = BTreeMap::new();
    for (offset, v) in vectors.iter().enumerate() {
        for (term, weight) in v.iter().flat_map(|v| v.entries()) {
            lists.entry(term).or_default().push((offset as u32, weight));
        }
    }
    let mut out = Vec::with_capacity(HEADER + lists.len() * ENTRY);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&(lists.len() as u32).to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    let mut body = Vec::new();
    let mut at = (HEADER + lists.len() * ENTRY) as u64;
    for (term, list) in &lists {
        let start = body.len();
        for &(offset, weight) in list {
            body.extend_from_slice(&offset.to_le_bytes());
            body.extend_from_slice(&weight.to_le_bytes());
        }
        let crc = crc32c::crc32c(&body[start..]);
        out.extend_from_slice(&term.to_le_bytes());
        out.extend_from_slice(&(list.len() as u32).to_le_bytes());
        out.extend_from_slice(&at.to_le_bytes());
        out.extend_from_slice(&crc.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        at += (list.len() * 8) as u64;
    }
    let crc = crc32c::crc32c(&out[12..]);
    out[8..12].copy_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&body);
    let file = path(dir, space);
    write_atomic(storage, &file, &out).map_err(file_error(&file))
}

impl DiskPostings {
    /// Opens `space`'s file in `dir`, reading and checking its dictionary; `None` when the
    /// segment has none (sealed with the index in DRAM).
    pub fn open(dir: &Path, space: usize) -> Result<Option<Self>> {
        let path = path(dir, space);
        let file = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(file_error(&path)(e)),
        };
        let len = file.metadata().map_err(file_error(&path))?.len();
        let mut head = [0u8; HEADER];
        if len < HEADER as u64 {
            return Err(corrupt(
                &path,
                format!("{len} bytes, shorter than its header"),
            ));
        }
        file.read_exact_at(&mut head, 0)
            .map_err(file_error(&path))?;
        let word = |at: usize| u32::from_le_bytes(head[at..at + 4].try_into().expect("4 bytes"));
        if &head[..8] != MAGIC {
            return Err(corrupt(&path, "not a sparse index file (bad magic)"));
        }
        if word(12) != VERSION {
            return Err(corrupt(&path, format!("version {} is not 1", word(12))));
        }
        let terms = word(16) as usize;
        let dict_end = HEADER as u64 + (terms * ENTRY) as u64;
        if dict_end > len {
            return Err(corrupt(
                &path,
                format!("{terms} terms do not fit in {len} bytes"),
            ));
        }
        let mut dict = vec![0u8; terms * ENTRY];
        file.read_exact_at(&mut dict, HEADER as u64)
            .map_err(file_error(&path))?;
        let mut crc = crc32c::crc32c(&head[12..]);
        crc = crc32c::crc32c_append(crc, &dict);
        if crc != word(8) {
            return Err(corrupt(&path, "the dictionary's checksum does not match"));
        }
        let mut map = HashMap::with_capacity(terms);
        for e in dict.chunks_exact(ENTRY) {
            let u32_at = |at: usize| u32::from_le_bytes(e[at..at + 4].try_into().expect("4 bytes"));
            let entry = Entry {
                count: u32_at(4),
                offset: u64::from_le_bytes(e[8..16].try_into().expect("8 bytes")),
                crc: u32_at(16),
            };
            if entry.offset < dict_end || entry.offset + u64::from(entry.count) * 8 > len {
                return Err(corrupt(
                    &path,
                    format!("term {} lies outside the file", u32_at(0)),
                ));
            }
            map.insert(u32_at(0), entry);
        }
        Ok(Some(Self {
            file,
            path,
            terms: map,
        }))
    }

    /// Points holding `term`.
    pub fn count(&self, term: u32) -> u64 {
        self.terms.get(&term).map_or(0, |e| u64::from(e.count))
    }

    /// The posting list of `term`, ascending by offset (empty for a term no point has);
    /// an offset at or past `points` (the segment's) is damage.
    pub fn list(&self, term: u32, points: usize) -> Result<Vec<(u32, f32)>> {
        let Some(e) = self.terms.get(&term) else {
            return Ok(Vec::new());
        };
        let mut bytes = vec![0u8; e.count as usize * 8];
        self.file
            .read_exact_at(&mut bytes, e.offset)
            .map_err(file_error(&self.path))?;
        if crc32c::crc32c(&bytes) != e.crc {
            return Err(corrupt(
                &self.path,
                format!("the posting list of term {term} does not match its checksum"),
            ));
        }
        let list: Vec<(u32, f32)> = bytes
            .chunks_exact(8)
            .map(|p| {
                (
                    u32::from_le_bytes(p[..4].try_into().expect("4 bytes")),
                    f32::from_le_bytes(p[4..].try_into().expect("4 bytes")),
                )
            })
            .collect();
        if let Some((o, _)) = list.iter().find(|(o, _)| *o as usize >= points) {
            return Err(corrupt(
                &self.path,
                format!("term {term} lists offset {o}, past the segment's {points} points"),
            ));
        }
        Ok(list)
    }

    /// DRAM the dictionary takes.
    pub fn dram_bytes(&self) -> usize {
        self.terms.capacity() * (4 + std::mem::size_of::<Entry>())
    }
}
