//! Finished shard graphs of a sharded build, kept until the build commits, so that a build
//! of the same input killed or failed part-way resumes after its finished shards instead of
//! starting over (the graph phase is most of a large build: 176 of 232 s at 1M x 768).
//!
//! A shard's graph is a function of its bucket (the vector numbers and vectors the
//! partition gave it) and of the graph parameters, so it is kept under a key hashed from
//! both: a later build whose shard hashes to the same key takes the lists as they are, and
//! anything else in the directory is stale. The files go through the durable-write path
//! and are synced when a shard finishes (one fsync per shard), so a power loss keeps the
//! finished shards; a file a crash tore anyway is found by its hash and built again. The
//! files are drawn in docs/format.md, "Build checkpoint".

use std::hash::Hasher;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use diskvec_io::storage::{
    create_dir_all_durable, remove_dir_all_durable, write_atomic, Storage, StorageFile,
};
use diskvec_io::SpillReader;
use twox_hash::XxHash3_64;

use super::budget::FILE_BUFFER;
use crate::error::file_error;
use crate::Result;

/// The default checkpoint directory of an index built into `out`.
pub const CHECKPOINT_DIR: &str = "build-checkpoint";

const MAGIC: &[u8; 8] = b"DVSHARD\0";
/// Bumped when a shard list's bytes or meaning change: older records are then stale.
const VERSION: u32 = 1;
/// magic, version, key, lists length, lists hash, crc32 of what precedes it.
const RECORD_BYTES: usize = 8 + 4 + 8 + 8 + 8 + 4;

/// The graph parameters a shard's lists depend on besides its bucket.
pub(crate) struct ShardRecipe {
    pub shard: usize,
    pub graph_dim: usize,
    pub max_degree: usize,
    pub build_list: usize,
    pub alpha: f32,
    pub seed: u64,
    pub passes: usize,
    /// The graph space's metric and precision, by name.
    pub space: String,
    /// Numbers of the graph space beyond the bucket's bytes: the largest squared norm (the
    /// extra coordinate of an inner-product space) and the 8-bit codes' distance scale, as
    /// bits.
    pub space_numbers: [u32; 2],
}

/// Hashes one bucket's records as the partition writes them.
pub(crate) struct BucketHasher(XxHash3_64);

impl BucketHasher {
    pub fn new() -> Self {
        Self(XxHash3_64::with_seed(0))
    }
    pub fn add(&mut self, record: &[u8]) {
        self.0.write(record);
    }
    /// The key of the shard this bucket holds, built as `recipe` says.
    pub fn key(&self, rows: usize, recipe: &ShardRecipe) -> u64 {
        let mut h = XxHash3_64::with_seed(u64::from(VERSION));
        for word in [
            self.0.finish(),
            rows as u64,
            recipe.shard as u64,
            recipe.graph_dim as u64,
            recipe.max_degree as u64,
            recipe.build_list as u64,
            u64::from(recipe.alpha.to_bits()),
            recipe.seed,
            recipe.passes as u64,
            u64::from(recipe.space_numbers[0]),
            u64::from(recipe.space_numbers[1]),
        ] {
            h.write(&word.to_le_bytes());
        }
        h.write(recipe.space.as_bytes());
        h.finish()
    }
}

/// A shard's lists file being written, hashed as it goes.
pub(crate) struct ListsWriter {
    out: Box<dyn StorageFile>,
    path: PathBuf,
    /// The lists come a node at a time; they reach the storage a buffer at a time.
    buffer: Vec<u8>,
    hash: XxHash3_64,
    len: u64,
    key: u64,
}

impl ListsWriter {
    pub fn write_all(&mut self, bytes: &[u8]) -> Result<()> {
        self.hash.write(bytes);
        self.len += bytes.len() as u64;
        self.buffer.extend_from_slice(bytes);
        if self.buffer.len() >= FILE_BUFFER {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        self.out
            .append(&self.buffer)
            .map_err(file_error(&self.path))?;
        self.buffer.clear();
        Ok(())
    }
}

/// The checkpoint directory of one build lane.
pub(crate) struct Checkpoints {
    dir: PathBuf,
    storage: Arc<dyn Storage>,
}

impl Checkpoints {
    /// The checkpoints in `dir`, which is made when the first shard is written to it (a
    /// build refused before then leaves nothing).
    pub fn new(dir: &Path, storage: Arc<dyn Storage>) -> Self {
        Self {
            dir: dir.to_path_buf(),
            storage,
        }
    }

    /// Where the lists of the shard with `key` are (or go).
    pub fn lists(&self, key: u64) -> PathBuf {
        self.dir.join(format!("shard.{key:016x}.lists"))
    }

    fn record(&self, key: u64) -> PathBuf {
        self.dir.join(format!("shard.{key:016x}.done"))
    }

    /// Removes every file but those of the shards in `keep`.
    pub fn retain(&self, keep: &[u64]) {
        let wanted: Vec<PathBuf> = keep
            .iter()
            .flat_map(|&k| [self.lists(k), self.record(k)])
            .collect();
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for e in entries.flatten() {
            if !wanted.contains(&e.path()) {
                let _ = self.storage.remove_file(&e.path());
            }
        }
    }

    /// Whether the lists of the shard with `key` are here whole: its record checks out
    /// and the lists file has the length and hash the record gives.
    pub fn finished(&self, key: u64) -> bool {
        let Ok(record) = std::fs::read(self.record(key)) else {
            return false;
        };
        let Some((len, hash)) = parse_record(&record, key) else {
            return false;
        };
        hash_file(&self.lists(key), len) == Some(hash)
    }

    pub fn writer(&self, key: u64) -> Result<ListsWriter> {
        create_dir_all_durable(self.storage.as_ref(), &self.dir).map_err(file_error(&self.dir))?;
        let record = self.record(key);
        if record.exists() {
            let _ = self.storage.remove_file(&record);
        }
        let path = self.lists(key);
        Ok(ListsWriter {
            out: self.storage.create(&path).map_err(file_error(&path))?,
            path,
            buffer: Vec::with_capacity(FILE_BUFFER),
            hash: XxHash3_64::with_seed(0),
            len: 0,
            key,
        })
    }

    /// Syncs `lists` and records it finished (atomically: a record is whole or absent, and
    /// names lists that are on the device).
    pub fn finish(&self, mut lists: ListsWriter) -> Result<()> {
        lists.flush()?;
        lists.out.sync_data().map_err(file_error(&lists.path))?;
        let record = encode_record(lists.key, lists.len, lists.hash.finish());
        let path = self.record(lists.key);
        write_atomic(self.storage.as_ref(), &path, &record).map_err(file_error(&path))
    }

    /// Removes the directory, durably (a crash would otherwise bring back shard lists no
    /// build takes up until the next build in shards): the build it served has committed.
    pub fn clear(&self) {
        let _ = remove_dir_all_durable(self.storage.as_ref(), &self.dir);
    }
}

fn encode_record(key: u64, len: u64, hash: u64) -> Vec<u8> {
    let mut r = Vec::with_capacity(RECORD_BYTES);
    r.extend_from_slice(MAGIC);
    r.extend_from_slice(&VERSION.to_le_bytes());
    r.extend_from_slice(&key.to_le_bytes());
    r.extend_from_slice(&len.to_le_bytes());
    r.extend_from_slice(&hash.to_le_bytes());
    let crc = crc32fast::hash(&r);
    r.extend_from_slice(&crc.to_le_bytes());
    r
}

/// The lists' length and hash a record gives, if it is whole, of this version and of `key`.
fn parse_record(r: &[u8], key: u64) -> Option<(u64, u64)> {
    if r.len() != RECORD_BYTES || &r[..8] != MAGIC {
        return None;
    }
    let word = |at: usize| u64::from_le_bytes(r[at..at + 8].try_into().expect("8 bytes"));
    let crc = u32::from_le_bytes(r[RECORD_BYTES - 4..].try_into().expect("4 bytes"));
    let version = u32::from_le_bytes(r[8..12].try_into().expect("4 bytes"));
    (crc32fast::hash(&r[..RECORD_BYTES - 4]) == crc && version == VERSION && word(12) == key)
        .then(|| (word(20), word(28)))
}

/// The hash of `path`'s content if it is `len` bytes long.
fn hash_file(path: &Path, len: u64) -> Option<u64> {
    let mut input = SpillReader::open(path, FILE_BUFFER).ok()?;
    if input.len() != len {
        return None;
    }
    let mut hash = XxHash3_64::with_seed(0);
    let mut buf = vec![0u8; FILE_BUFFER.min(len as usize).max(1)];
    while input.remaining() > 0 {
        let take = (input.remaining() as usize).min(buf.len());
        input.read_exact(&mut buf[..take]).ok()?;
        hash.write(&buf[..take]);
    }
    Some(hash.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recipe(shard: usize) -> ShardRecipe {
        ShardRecipe {
            shard,
            graph_dim: 8,
            max_degree: 42,
            build_list: 100,
            alpha: 1.2,
            seed: 7,
            passes: 1,
            space: "l2/sq8".into(),
            space_numbers: [0, 0],
        }
    }

    #[test]
    fn a_finished_shard_is_found_and_a_damaged_or_foreign_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let cp = Checkpoints::new(
            &dir.path().join("cp"),
            Arc::new(diskvec_io::storage::FsStorage),
        );
        let mut bucket = BucketHasher::new();
        bucket.add(b"row 1");
        let key = bucket.key(1, &recipe(0));
        assert_ne!(
            key,
            bucket.key(1, &recipe(1)),
            "the shard number is in the key"
        );
        assert!(!cp.finished(key));
        let mut w = cp.writer(key).unwrap();
        w.write_all(b"some lists").unwrap();
        // Written but not recorded (killed before `finish`): not finished.
        drop(w);
        assert!(!cp.finished(key));
        let mut w = cp.writer(key).unwrap();
        w.write_all(b"some lists").unwrap();
        cp.finish(w).unwrap();
        assert!(cp.finished(key));

        // A torn or changed lists file, a damaged record: built again.
        std::fs::write(cp.lists(key), b"some listz").unwrap();
        assert!(!cp.finished(key));
        std::fs::write(cp.lists(key), b"some lists").unwrap();
        assert!(cp.finished(key));
        let record = cp.record(key);
        let mut bytes = std::fs::read(&record).unwrap();
        bytes[14] ^= 1;
        std::fs::write(&record, &bytes).unwrap();
        assert!(!cp.finished(key));

        // Retain keeps only the named shards.
        let mut w = cp.writer(key ^ 1).unwrap();
        w.write_all(b"other").unwrap();
        cp.finish(w).unwrap();
        cp.retain(&[key ^ 1]);
        assert!(cp.finished(key ^ 1));
        assert!(!cp.lists(key).exists() && !cp.record(key).exists());
        cp.clear();
        assert!(!dir.path().join("cp").exists());
    }
}
