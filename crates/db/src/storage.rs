//! The file-system interface every durable write of the database goes through (the WAL,
//! manifests), with its crash model for tests: it lives in the io crate, the lowest layer,
//! so that the index's writers can use the same one.

pub use diskvec_io::storage::*;
