//! A build in shards and the disk it runs on: one that cannot fit is refused before it reads
//! a row, saying what it needs; one whose disk fills while it runs (another writer) fails
//! naming the file, leaves nothing behind, and the previous index stays current.
//!
//! The disk is a small tmpfs the test mounts, so these run as root (CI and the test script
//! do); elsewhere they say so and return.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use diskvec_index::diskann::{BuildParams, DiskIndex, OpenOptions, VectorSource};
use diskvec_index::NoProgress;
use diskvec_vector::Metric;

const DIM: usize = 64;

/// A tmpfs of `mib` MiB mounted on a fresh directory, unmounted when dropped.
struct SmallDisk {
    dir: PathBuf,
    _root: tempfile::TempDir,
}

impl SmallDisk {
    fn mount(mib: usize) -> Option<Self> {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("disk");
        std::fs::create_dir(&dir).unwrap();
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
            .arg(&dir)
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
        if !mounted {
            eprintln!("skipped: mounting a tmpfs needs root (the test script runs as root)");
            return None;
        }
        Some(Self { dir, _root: root })
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.dir).status();
    }
}

fn params() -> BuildParams {
    BuildParams {
        metric: Metric::L2,
        max_degree: 24,
        build_list: 40,
        pq_bytes: Some(16),
        ..Default::default()
    }
}

/// Vectors that, when read again (the build's second pass), first fill the disk holding
/// `filler` (another writer taking the space the build counted on).
struct FillsTheDisk<'a> {
    data: &'a [f32],
    ids: &'a [i64],
    next: usize,
    filler: Option<PathBuf>,
}

impl VectorSource for FillsTheDisk<'_> {
    fn dim(&self) -> usize {
        DIM
    }
    fn rows(&self) -> usize {
        self.ids.len()
    }
    fn next_chunk(&mut self, data: &mut Vec<f32>, ids: &mut Vec<i64>) -> Result<usize, String> {
        data.clear();
        ids.clear();
        let end = (self.next + 500).min(self.ids.len());
        data.extend_from_slice(&self.data[self.next * DIM..end * DIM]);
        ids.extend_from_slice(&self.ids[self.next..end]);
        let rows = end - self.next;
        self.next = end;
        Ok(rows)
    }
    fn rewind(&mut self) -> Result<(), String> {
        self.next = 0;
        if let Some(path) = self.filler.take() {
            fill(&path);
        }
        Ok(())
    }
}

/// Writes `path` until its file system is full.
fn fill(path: &Path) {
    let mut f = std::fs::File::create(path).unwrap();
    let block = vec![7u8; 64 << 10];
    while f.write_all(&block).is_ok() {}
    let _ = f.sync_all();
}

/// A build in shards; `input_order`: nodes in input order, codes streamed into the index
/// files (else placed, codes through scratch files).
fn build_sharded(
    source: &mut dyn VectorSource,
    dir: &Path,
    input_order: bool,
) -> diskvec_index::Result<()> {
    let knobs = common::Knobs {
        shard_capacity: Some(1500),
        input_order,
    };
    common::build_source(source, &params(), dir, knobs, &NoProgress)
        .map(|report| assert!(report.shards > 1))
}

#[test]
fn a_build_that_cannot_fit_is_refused_before_it_reads_a_row() {
    let Some(disk) = SmallDisk::mount(1) else {
        return;
    };
    let n = 6000;
    let data = common::clustered(n, DIM, 3);
    let ids: Vec<i64> = (0..n as i64).collect();
    let index = disk.dir.join("index");
    let mut source = FillsTheDisk {
        data: &data,
        ids: &ids,
        next: 0,
        filler: None,
    };
    let err = build_sharded(&mut source, &index, false)
        .unwrap_err()
        .to_string();
    eprintln!("{err}");
    assert!(
        err.contains("the build needs about") && err.contains("B is free"),
        "{err}"
    );
    assert!(
        err.contains("nodes") && err.contains("shard lists"),
        "{err}"
    );
    assert_eq!(source.next, 0, "the input was read before the refusal");
    let left: Vec<String> = common::file_names(&index)
        .into_iter()
        .filter(|f| f.starts_with("build.") || f.ends_with(".tmp"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn a_disk_that_fills_during_the_build_fails_it_naming_the_file_and_keeps_the_old_index() {
    let Some(disk) = SmallDisk::mount(64) else {
        return;
    };
    let n = 6000;
    let data = common::clustered(n, DIM, 4);
    let ids: Vec<i64> = (0..n as i64).collect();
    let index = disk.dir.join("index");
    // The previous index: the first 1,000 rows.
    let mut first = FillsTheDisk {
        data: &data[..1000 * DIM],
        ids: &ids[..1000],
        next: 0,
        filler: None,
    };
    build_sharded(&mut first, &index, false).unwrap();
    let before = common::file_names(&index);
    // Codes into scratch files (nodes placed), and straight into the index files.
    for input_order in [false, true] {
        let filler = disk.dir.join("other-writer");
        let mut source = FillsTheDisk {
            data: &data,
            ids: &ids,
            next: 0,
            filler: Some(filler.clone()),
        };
        let err = build_sharded(&mut source, &index, input_order)
            .unwrap_err()
            .to_string();
        eprintln!("{err}");
        assert!(
            err.contains("No space left") && err.contains(index.to_str().unwrap()),
            "{err}"
        );
        assert_eq!(common::file_names(&index), before, "{err}");
        std::fs::remove_file(filler).unwrap();
        let old = DiskIndex::open(&index, &OpenOptions::default()).unwrap();
        assert_eq!(old.len(), 1000);
    }
}
