//! The database layer: collections of points (id, vector, payload) that take writes while
//! they serve searches, log every write ahead to a checksummed log, keep fresh points in a
//! growing in-memory segment and seal them into DiskANN segments on the storage paths.

mod aliases;
mod background;
mod build_memory;
mod clock;
mod collection;
mod config;
mod db;
mod error;
pub mod filter;
#[doc(hidden)]
pub mod fuzzing;
pub mod json;
mod linked_copy;
mod manifest;
mod ops;
mod places;
mod point;
pub mod query;
mod search_memory;
mod segment;
mod snapshot;
pub mod storage;
pub mod strict;
mod vectors;
pub mod wal;

pub use aliases::{apply as apply_alias_actions, AliasAction};
pub use collection::snapshot::LinkedBytes;
pub use collection::{
    Collection, CollectionInfo, FacetValue, Hit, NewSpace, PathIo, Record, RecoveryReport,
    SearchMemoryInfo, SearchRequest, SegmentInfo, Status, TaskInfo, UpsertMode, MAX_BATCH,
    MAX_PAYLOAD_DEPTH,
};
pub use config::{
    dimension_error, parse_graph_builder, parse_metric, parse_search_memory, CollectionConfig,
    DenseSpace, Durability, Quantization, SparseModifier, SparseSpace, MAX_DIM, MAX_SPACES,
};
pub use db::{check_name, Database, DbOptions, MAX_NAME_BYTES};
pub use diskvec_index::diskann::MemoryBudget;
/// The distance a collection ranks by (its `CollectionConfig::metric`).
pub use diskvec_vector::{ElementType, Metric};
pub use error::{DbError, Result};
pub use linked_copy::LinkedCopy;
pub use places::StoragePaths;
/// Most results one search, query or scroll page returns (offset included).
pub const MAX_RESULTS: usize = diskvec_index::limits::K.max;
pub use clock::UtcTime;
/// The shard (of `total`) a point belongs to in a cluster: the hash `slice` filters use.
pub use filter::shard_of;
pub use filter::Filter;
pub use ops::PointRecord;
pub use search_memory::{PqCodes, Usage as SearchMemoryUsage, AUTO_SEARCH_SHARE};
pub use snapshot::{file_checksum, SnapshotInfo, SnapshotsOf};
pub use strict::{CollectionSize, Rate, Rates, StrictMode};
pub use vectors::{NamedVectors, SparseVector, Vector, MAX_SPARSE_ENTRIES};

pub(crate) use diskvec_io::failpoint;

/// Fails with an error when `DISKVEC_FAIL` names `step` (a comma-separated list), so tests
/// can reach the recovery from a failure that real disks give rarely (a freshly built
/// segment that does not open).
pub(crate) fn injected_failure(step: &str) -> Result<()> {
    if std::env::var("DISKVEC_FAIL").is_ok_and(|v| v.split(',').any(|s| s == step)) {
        return Err(DbError::Unavailable(format!("injected failure at {step}")));
    }
    Ok(())
}

/// Bytes of log after which a collection's WAL starts a new file (older files go once a
/// manifest covers them): 16 MiB, or `DISKVEC_WAL_FILE_BYTES` (at least 256), which crash
/// tests set small so that their few writes rotate and remove log files too.
pub(crate) fn wal_file_bytes() -> u64 {
    std::env::var("DISKVEC_WAL_FILE_BYTES")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .map_or(wal::WalOptions::default().segment_bytes, |b| b.max(256))
}

/// Sleeps for MILLIS when `DISKVEC_DELAY` is `step=MILLIS`, so tests can hold a moment open
/// (a seal that takes seconds) on a machine fast enough not to.
pub(crate) fn delay_point(step: &str) {
    if let Some(delay) = delay_at(step) {
        std::thread::sleep(delay);
    }
}

/// `delay_point`, cut short once `stop()` (asked every 20 ms): a delayed build that is
/// cancelled meanwhile stops as a slow one would.
pub(crate) fn delay_point_unless(step: &str, stop: impl Fn() -> bool) {
    let Some(delay) = delay_at(step) else {
        return;
    };
    let started = std::time::Instant::now();
    while started.elapsed() < delay && !stop() {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

fn delay_at(step: &str) -> Option<std::time::Duration> {
    let v = std::env::var("DISKVEC_DELAY").ok()?;
    v.strip_prefix(step)
        .and_then(|rest| rest.strip_prefix('='))
        .and_then(|ms| ms.parse::<u64>().ok())
        .map(std::time::Duration::from_millis)
}
pub use point::{Payload, PointId, Uuid128};
