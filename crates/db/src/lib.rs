//! The database layer: collections of points (id, vector, payload) that take writes while
//! they serve searches, log every write ahead to a checksummed log, keep fresh points in a
//! growing in-memory segment and seal them into DiskANN segments on the storage paths.

mod error;
pub mod filter;
mod point;
pub mod storage;
pub mod wal;

pub use error::{DbError, Result};
pub use point::{Payload, PointId};
