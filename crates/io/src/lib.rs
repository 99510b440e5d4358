//! The storage path: where diskvec touches the disk.
//!
//! A [`ReadEngine`] owns a fixed set of sector-aligned buffers ("slots") and keeps up to
//! that many reads in flight. Two engines implement it: [`UringEngine`] (io_uring, many
//! reads in flight per thread) and [`PreadEngine`] (plain `pread`, the fallback where
//! io_uring is unavailable). [`open_engine`] picks one and says in the log when it falls back.

mod aligned;
mod emulation;
mod engine;
mod failpoint;
mod file;
pub mod iobench;
mod page_cache;
mod pread;
mod spill;
mod stats;
pub mod storage;
mod stripe;
mod striped_writer;
mod uring;
mod verify;
mod volume;

pub use aligned::AlignedBuf;
pub use emulation::PathEmulation;
pub use engine::{
    open_engine, uring_available, EngineChoice, EngineKind, EngineStats, ReadDone, ReadEngine,
};
pub use failpoint::failpoint;
pub use file::{open_for_reading, DataFile};
pub use page_cache::forget_cached;
pub use pread::PreadEngine;
pub use spill::{SpillReader, SpillWriter};
pub use stats::{PathSnapshot, PathStats};
pub use stripe::{Piece, StripeMap};
pub use striped_writer::StripedWriter;
pub use uring::UringEngine;
pub use verify::{verify_volume, Damage, VerifyReport};
pub use volume::{expected_path_len, SectorCheck, Volume, VolumeEngine, DEFAULT_READ_DEADLINE};

/// The unit of direct I/O and of the on-disk layout.
pub const SECTOR: usize = 4096;

/// Errors of the storage path. Every message names the file it concerns.
#[derive(Debug, thiserror::Error)]
pub enum IoError {
    #[error("{path}: {source}")]
    Os {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: read past end of file at offset {offset} (file truncated?)")]
    UnexpectedEof { path: String, offset: u64 },
    #[error("{path}: the sector at offset {offset} fails its checksum")]
    Corrupt { path: String, offset: u64 },
    /// The device did not answer a read within the read deadline (a fabric path gone,
    /// the kernel holding its I/O while it reconnects): the read was given up on.
    #[error("{path}: no answer to a read in {:.1} s (the device or its path stopped answering)", after.as_secs_f64())]
    TimedOut {
        path: String,
        after: std::time::Duration,
    },
    #[error("{0}")]
    Usage(String),
}

pub type Result<T> = std::result::Result<T, IoError>;

/// Rounds `n` up to a whole number of sectors.
pub fn round_up_to_sector(n: usize) -> usize {
    n.div_ceil(SECTOR) * SECTOR
}
