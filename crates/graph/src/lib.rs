//! Graphs of vectors: the Vamana build (DiskANN, Subramanya et al. 2019), parallel, a build by
//! partitioning (PiPNN), and the
//! one best-first search every graph of diskvec is walked with.

mod adjacency;
mod candidates;
mod order;
mod pipnn;
pub mod prune;
mod search;
mod vamana;
mod vectors;

pub use adjacency::Graph;
pub use candidates::{Candidate, CandidateList};
pub use pipnn::{build_pipnn, PipnnParams};
pub use prune::{by_distance, reselect, robust_prune, select_diverse};
pub use search::{Accept, BestFirst, Neighbors, Scorer, VisitedSet};
pub use vamana::{build, VamanaParams};
pub use vectors::{FullVectors, GraphVectors, PairwiseBuffers, Sq8Vectors};
