//! Reads the sealed segments made from each storage path, as monotonic totals for
//! monitoring: a merge or vacuum drops segments, so their counts move to `retired` first.

use std::path::{Path, PathBuf};

use super::{lock, Collection, Inner};
use crate::config::CollectionConfig;
use crate::segment::Segment;

/// One storage path's read counters since the collection was opened.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct PathIo {
    /// Position of the path in the collection's `paths` (0 when it has none).
    pub path: usize,
    /// The directory: the configured path, or the collection's own directory.
    pub location: PathBuf,
    pub reads: u64,
    pub bytes: u64,
    /// Reads that waited because the path was at its queue-depth cap.
    pub waited: u64,
    /// Reads that failed on this path and were served by its mirror.
    pub failovers: u64,
    /// Reads of this path given up on after the read deadline (the device stopped
    /// answering).
    pub timeouts: u64,
}

impl PathIo {
    fn add(&mut self, s: &diskvec_io::PathSnapshot) {
        self.reads += s.reads;
        self.bytes += s.bytes;
        self.waited += s.waited;
        self.failovers += s.failovers;
        self.timeouts += s.timeouts;
    }
}

/// Empty totals, one per storage path of a collection in `dir`.
pub(super) fn zero_io(config: &CollectionConfig, dir: &Path) -> Vec<PathIo> {
    let locations = if config.paths.is_empty() {
        vec![dir.to_path_buf()]
    } else {
        config.paths.clone()
    };
    locations
        .into_iter()
        .enumerate()
        .map(|(path, location)| PathIo {
            path,
            location,
            ..PathIo::default()
        })
        .collect()
}

impl Inner {
    /// Keeps counts taken from a segment that has left the segment list.
    pub(super) fn retire_stats(&self, stats: &[diskvec_io::PathSnapshot]) {
        add_all(&mut lock(&self.retired_io), stats);
    }
}

fn add_all(totals: &mut [PathIo], snapshots: &[diskvec_io::PathSnapshot]) {
    for (t, s) in totals.iter_mut().zip(snapshots) {
        t.add(s);
    }
}

impl Collection {
    /// Each storage path's reads since open, over every sealed segment there was.
    pub fn storage_io(&self) -> Vec<PathIo> {
        let inner = &self.inner;
        let mut totals = lock(&inner.retired_io).clone();
        let state = inner.state.read().unwrap_or_else(|e| e.into_inner());
        for segment in state.segments.values() {
            if let Segment::Sealed(s) = segment {
                for stats in s.path_stats() {
                    add_all(&mut totals, &stats);
                }
            }
        }
        totals
    }
}
