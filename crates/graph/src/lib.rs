//! Graph construction: the Vamana algorithm (DiskANN, Subramanya et al. 2019), parallel.

mod adjacency;
mod candidates;
mod order;
pub mod prune;
mod vamana;
mod vectors;

pub use adjacency::Graph;
pub use candidates::CandidateList;
pub use prune::robust_prune;
pub use vamana::{build, greedy_search, VamanaParams};
pub use vectors::{FullVectors, GraphVectors, Sq8Vectors};
