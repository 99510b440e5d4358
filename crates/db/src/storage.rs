//! The file-system interface every durable write of the database goes through (the WAL,
//! manifests), with its crash model for tests: it lives in the io crate, the lowest layer,
//! so that the index's writers can use the same one.

pub use diskvec_io::storage::*;

/// `<pid>-<nanoseconds>-<n>`: a name part no other call of this process repeats (the
/// counter), nor another process or an earlier run of this one (the pid and the clock), for
/// the hidden files and directories work in progress is staged in.
pub fn unique_suffix() -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{}-{nanos}-{n}", std::process::id())
}

/// Whether the file or directory at `path` was last changed more than `age` ago (false when
/// that cannot be told): what the sweeps of files a dead peer or client left behind ask.
pub fn changed_before(path: &std::path::Path, age: std::time::Duration) -> bool {
    std::fs::symlink_metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .is_some_and(|a| a > age)
}
