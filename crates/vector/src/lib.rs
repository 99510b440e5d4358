//! Vector math: metrics and SIMD distances, k-means, product quantization.

mod kmeans;
mod metric;
mod mips;
mod pq;
mod prefetch;
mod rows;
mod validate;

pub use kmeans::kmeans;
pub use metric::Metric;
pub use mips::mips_to_l2;
pub use pq::{PqTable, ProductQuantizer};
pub use prefetch::prefetch;
pub use rows::Rows;
pub use validate::{check_vectors, VectorError};
