//! Vector math: metrics and SIMD distances, k-means, product, 4-bit and 8-bit scalar quantization.

mod column_bounds;
mod element;
mod gram;
mod heap;
mod huge_pages;
mod kernels;
mod kernels_f16;
mod kmeans;
mod metric;
mod mips;
mod nearest;
mod pq;
mod prefetch;
mod projection;
mod rows;
mod sq4;
mod sq8;
mod typed_rows;
mod validate;

pub use element::{ElementType, OutOfRange};
pub use gram::{gram_kernel, gram_kernels, Sq8Gram, GRAM_MAX_DIM};
pub use heap::release_freed_memory;
pub use huge_pages::{filled_with_huge_pages, to_huge_pages, vec_with_huge_pages};
pub use kernels::dot;
pub use kmeans::kmeans;
pub use metric::Metric;
pub use mips::mips_to_l2;
pub use pq::{PqTable, ProductQuantizer, PQ_TRAINING_ROWS};
pub use prefetch::prefetch;
pub use projection::{Projection, MAX_PROJECTED_DIM};
pub use rows::Rows;
pub use sq4::{ScalarQuantizer4, Sq4Query, SQ4_CLIP};
pub use sq8::{sq8_l2sq, ScalarQuantizer8};
pub use typed_rows::TypedRows;
pub use validate::{check_vectors, VectorError};
