//! How much disk a build in shards needs at its peak, phase by phase, checked before it
//! reads a row (a build that fills the disk halfway would fail late, after hours of work).
//!
//! Alive at the end of the shard graphs: the codes (PQ, compact, 4-bit: already in the
//! index files when nodes keep input order, in scratch files when they are placed), the
//! rows the shards are built from, each vector's shards, the seed lists and the shard
//! lists. Alive at the end of the node file: the index, the shard lists (kept for a resume
//! until the commit), the merged graph, and where nodes are placed the scratch codes and
//! the vector copy.

use std::path::Path;

use diskvec_io::SECTOR;

use super::budget::{shard_degree, BuildPlan, SHARD_OVERLAP};
use super::build::{BuildParams, GraphPrecision};
use super::compact::compact_code_bytes;
use crate::{IndexError, Result};

/// Bytes of each file a build in shards writes, for the inputs' shape.
pub(crate) struct DiskNeed {
    nodes: u64,
    navigation: u64,
    meta: u64,
    compact: u64,
    codes: u64,
    rows: u64,
    shard_lists: u64,
    seeds: u64,
    merged: u64,
    placed_vectors: u64,
    /// Nodes placed by position: codes in scratch files until the last pass.
    placed: bool,
}

impl DiskNeed {
    /// `placed`: whether nodes are placed by position, from scratch codes and a copy of the
    /// vectors (sharded_codes.rs, sharded_write.rs).
    pub fn of(
        (n, dim): (usize, usize),
        params: &BuildParams,
        pq_bytes: usize,
        plan: &BuildPlan,
        placed: bool,
    ) -> Self {
        let (n, d, r) = (n as u64, dim as u64, params.max_degree as u64);
        let mc = compact_code_bytes(pq_bytes).unwrap_or(0) as u64;
        let layout = super::NodeLayout::new(dim, params.max_degree, params.element);
        let graph_dim = d + 1;
        let row = match params.graph_precision {
            GraphPrecision::Sq8 => graph_dim,
            GraphPrecision::Full => 4 * d,
        };
        let shard_r = shard_degree(params.max_degree) as u64;
        Self {
            // Whole sectors, as the file is laid out (a 768-d f32 record fills one alone).
            nodes: (1 + layout.data_sectors(n as usize))
                * SECTOR as u64
                * (1 + params.mirror as u64),
            navigation: n * (d / 2 + 4) + 4 * (n + 1) + 4 * n * r + SECTOR as u64,
            meta: n * (pq_bytes as u64 + 8) + 256 * 4 * d + SECTOR as u64,
            compact: n * mc,
            codes: n * (pq_bytes as u64 + mc + d / 2 + 4),
            rows: n * (row + 2 * SHARD_OVERLAP as u64),
            shard_lists: SHARD_OVERLAP as u64 * n * (8 + 8 * shard_r),
            seeds: if plan.reprune {
                n * (8 + 8 * r.div_ceil(2))
            } else {
                0
            },
            merged: n * 4 * (r + 1),
            placed_vectors: if placed {
                n * d * params.element.bytes() as u64
            } else {
                0
            },
            placed,
        }
    }

    fn index(&self) -> u64 {
        self.nodes + self.navigation + self.meta + self.compact
    }

    /// Codes in scratch files (placed nodes) or in the index files as they are encoded.
    fn scratch_codes(&self) -> u64 {
        if self.placed {
            self.codes
        } else {
            0
        }
    }

    fn scratch_at_graphs(&self) -> u64 {
        self.scratch_codes() + self.rows + self.seeds + self.shard_lists
    }

    fn scratch_at_nodes(&self) -> u64 {
        self.scratch_codes() + self.shard_lists + self.merged + self.placed_vectors
    }

    /// The most the build holds on disk at once.
    pub fn peak(&self) -> u64 {
        let early_index = self.codes - self.scratch_codes();
        (early_index + self.scratch_at_graphs()).max(self.scratch_at_nodes() + self.index())
    }

    /// Kept free beyond the peak: a tenth of it, at most 1 GiB (estimates round, other
    /// writers share the disk).
    fn margin(&self) -> u64 {
        (self.peak() / 10).min(1 << 30)
    }

    /// Refuses the build when `dir`'s file system has less free space than it needs,
    /// saying what for.
    pub fn check(&self, dir: &Path) -> Result<()> {
        let free = super::commit::free_bytes(dir).map_err(crate::error::file_error(dir))?;
        let needed = self.peak() + self.margin();
        if free >= needed {
            return Ok(());
        }
        Err(IndexError::InvalidArgument(format!(
            "{}: {}; {} is free",
            dir.display(),
            self.describe(),
            size(free)
        )))
    }

    /// What the build needs, by part.
    pub fn describe(&self) -> String {
        format!(
            "the build needs about {} of disk at its peak: the index {} (nodes {}, navigation \
             {}, meta.dvm {}, compact {}), scratch {} beside it at the end (shard lists {}, \
             codes {}, merged graph {}, placement {}) and {} of margin; scratch peaks at {} \
             while shard graphs are built (shard rows {}, shard lists {}, codes {}, seeds {}; \
             codes in scratch only where nodes are placed)",
            size(self.peak() + self.margin()),
            size(self.index()),
            size(self.nodes),
            size(self.navigation),
            size(self.meta),
            size(self.compact),
            size(self.scratch_at_nodes()),
            size(self.shard_lists),
            size(self.scratch_codes()),
            size(self.merged),
            size(self.placed_vectors),
            size(self.margin()),
            size(self.scratch_at_graphs()),
            size(self.rows),
            size(self.shard_lists),
            size(self.scratch_codes()),
            size(self.seeds),
        )
    }
}

/// Bytes in decimal units, as `df -H` and disk vendors count them.
fn size(bytes: u64) -> String {
    let b = bytes as f64;
    if b >= 1e9 {
        format!("{:.1} GB", b / 1e9)
    } else if b >= 1e6 {
        format!("{:.1} MB", b / 1e6)
    } else {
        format!("{:.0} kB", b / 1e3)
    }
}
