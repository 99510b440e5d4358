//! Index kinds: FLAT (exact search, the ground-truth tool) and DISKANN (graph and full
//! vectors on SSD, compressed vectors in DRAM).

pub mod diskann;
mod error;
pub mod flat;
pub mod hnsw;
mod input;
pub mod limits;
mod progress;
mod result;
mod topk;

pub use error::{IndexError, Result};
pub use progress::{NoProgress, Progress};
pub use result::SearchResult;
pub use topk::TopK;
