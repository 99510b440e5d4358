//! The file-system interface every durable write of the database goes through (the WAL,
//! manifests), with its crash model for tests: it lives in the io crate, the lowest layer,
//! so that the index's writers can use the same one.

pub use diskvec_io::storage::*;

/// Whether the file or directory at `path` was last changed more than `age` ago (false when
/// that cannot be told): what the sweeps of files a dead peer or client left behind ask.
pub fn changed_before(path: &std::path::Path, age: std::time::Duration) -> bool {
    std::fs::symlink_metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .is_some_and(|a| a > age)
}
