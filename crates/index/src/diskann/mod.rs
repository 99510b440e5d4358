//! DISKANN: a Vamana graph whose nodes (full vector + neighbour list) live in 4 KiB
//! sectors on SSD, searched with PQ distances from DRAM and direct reads of the sectors.
//!
//! Files of an index directory (drawn in docs/format.md):
//! - `nodes.<generation>.dvn` (or one file per storage path): a header sector, then node
//!   sectors, each sector checksummed;
//! - `nav.<generation>.dvr`: every node's neighbour list and a 4-bit code of its vector,
//!   loaded only by searches that walk the graph in DRAM (nav.rs);
//! - `compact.<generation>.dvq`: a second PQ codebook with a quarter of the code bytes and
//!   every node's code in it, loaded instead of meta.dvm's codes where memory is tight
//!   (compact.rs);
//! - `meta.dvm`: what search keeps in DRAM: PQ codebook, PQ codes, external ids, and the
//!   names of the node files; replacing it is the one atomic switch of a build (commit.rs).

mod budget;
mod build;
mod codebook;
mod commit;
mod compact;
mod fetch;
mod graph_builder;
mod header;
mod hot_records;
mod index;
mod layout;
mod meta;
mod meta_read;
mod meta_writer;
mod nav;
mod node_cache;
mod query_buffers;
mod reorder;
mod resume;
mod search;
mod service;
mod sharded;
mod sharded_codes;
mod sharded_disk;
mod sharded_write;
mod source;
mod summed_file;
mod verify;

pub use crate::SearchResult;
pub use budget::{available_memory, mib, BuildPlan, BuildShape, MemoryBudget, AUTO_SHARE};
pub use build::{
    build, build_from, BuildParams, BuildReport, GraphPrecision, INPUT_ORDER_VAR,
    SHARD_CAPACITY_VAR,
};
pub use codebook::Codebook;
pub use compact::{
    compact_code_bytes, compact_file_name, compact_saving, has_compact_file, CompactCodes,
    COMPACT_RATIO, COMPACT_VERSION,
};
pub use graph_builder::{GraphBuilder, PIPNN_KNOBS_VAR};
pub use header::{layout_version_for, Header, LAYOUT_VERSION, OLDEST_LAYOUT_VERSION};
pub use index::{DiskIndex, OpenOptions};
pub use layout::NodeLayout;
pub use meta::Meta;
pub use nav::{
    nav_file_name, NavFile, NavOff, Navigation, SteppedAside, WalkCodes, MIN_CODE_RECALL,
    NAV_VERSION,
};
pub use resume::CHECKPOINT_DIR;
pub use search::{Accept, BatchStats, SearchParams, DEFAULT_RERANK_SIGMAS};
pub use service::{PendingSearch, SearchService};
pub use source::{SliceSource, VectorSource};
pub use verify::verify;

pub const NODES_FILE: &str = "nodes.dvn";
pub const META_FILE: &str = "meta.dvm";
