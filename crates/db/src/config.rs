//! A collection's settings, fixed at creation and kept in its manifest.

use std::path::PathBuf;

use diskvec_index::diskann::{mib, BuildParams, GraphBuilder, MemoryBudget};
use diskvec_vector::{ElementType, Metric};
use serde::{Deserialize, Serialize};

use crate::strict::StrictMode;
use crate::{DbError, Result};

/// Largest vector dimension a collection takes (Qdrant's limit is 65,536).
pub const MAX_DIM: usize = 65_536;

/// How an acknowledged write reaches stable storage.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Durability {
    /// A write returns once its log record is on stable storage (fdatasync; concurrent
    /// writers share one flush).
    Sync,
    /// A write returns once its log record is written; a background flush every
    /// `interval_ms` makes it durable, so a crash may lose the last interval's writes.
    Interval { interval_ms: u64 },
}

/// Most spaces (dense and sparse together) one collection may have.
pub const MAX_SPACES: usize = 64;

/// Most slots of one kind of space (a deleted space keeps its slot): a space index is a
/// byte in log records.
pub const MAX_SLOTS: usize = 255;

/// A dense vector space: every vector in it has `dim` numbers, ranked by `metric`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DenseSpace {
    /// `""`: the unnamed space of a collection created with one vector.
    pub name: String,
    pub dim: usize,
    #[serde(with = "metric_name")]
    pub metric: Metric,
    /// This space's own HNSW settings for its growing segments' graphs, where they differ
    /// from the collection's.
    #[serde(default, skip_serializing_if = "SpaceHnsw::is_default")]
    pub hnsw: SpaceHnsw,
    /// The size of the compressed copy of this space's vectors that sealed segments keep in
    /// DRAM, where it differs from the collection's `quantization`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quantization: Option<Quantization>,
    /// Deleted from the collection (`Collection::delete_space`): the slot stays, so that
    /// the spaces after it keep their index (the log and the segments name spaces by
    /// index), but no request reaches it and seals drop its vectors.
    #[serde(default, skip_serializing_if = "is_false")]
    pub removed: bool,
    /// How the vectors are stored (Qdrant's `datatype`): float32, float16 or uint8. Values
    /// are rounded to it once, where they enter (after the metric's preparation), so every
    /// copy, search and answer sees the values the sealed segments' records hold.
    #[serde(default, with = "element_name", skip_serializing_if = "is_float32")]
    pub datatype: ElementType,
}

fn is_float32(e: &ElementType) -> bool {
    *e == ElementType::Float32
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl DenseSpace {
    pub fn new(name: &str, dim: usize, metric: Metric) -> Self {
        Self {
            name: name.to_string(),
            dim,
            metric,
            hnsw: SpaceHnsw::default(),
            quantization: None,
            removed: false,
            datatype: ElementType::Float32,
        }
    }

    /// The space's values rounded to its datatype in place, or why one cannot be.
    pub fn round_to_datatype(&self, values: &mut [f32]) -> std::result::Result<(), String> {
        self.datatype.round_in_place(values).map_err(|e| {
            format!(
                "dimension {} of the vector{} is {}",
                e.position % self.dim.max(1),
                space_suffix(&self.name),
                e
            )
        })
    }
}

/// Qdrant's `quantization_config` as diskvec honours it: it sets the size of the compressed
/// copy of each vector that sealed segments keep in DRAM (their graph walk ranks by it,
/// then re-ranks by the full vectors read from SSD, as Qdrant rescores). diskvec's codes are
/// product-quantized at the size the setting implies: `scalar` int8 one byte per dimension
/// (every dimension coded on its own into 256 trained levels), `product` xN 32 / N bits per
/// dimension, `binary` one bit per dimension (two, or one and a half, by its `encoding`),
/// `turbo` its `bits`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Quantization {
    /// Bits of code per dimension.
    pub bits_per_dim: f32,
    /// Qdrant's object as given (`{"scalar": {...}}`), shown back as it came.
    pub given: serde_json::Value,
}

impl Quantization {
    /// Bytes of one code of a `dim`-dimensional vector (at least 1, at most `dim`).
    pub fn code_bytes(&self, dim: usize) -> usize {
        ((dim as f64 * f64::from(self.bits_per_dim) / 8.0).ceil() as usize).clamp(1, dim.max(1))
    }
}

/// A space's HNSW settings (Qdrant's per-vector `hnsw_config`); `None`: the collection's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpaceHnsw {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub m: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ef_construct: Option<usize>,
    /// Qdrant's `inline_storage` (quantized vectors stored beside each graph node), kept as
    /// given: a sealed segment's nodes always hold their full vector beside the neighbour
    /// list, whatever it says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inline_storage: Option<bool>,
}

impl SpaceHnsw {
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

/// How a sparse space weighs a query's terms.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SparseModifier {
    /// Scores are the plain dot product.
    #[default]
    None,
    /// Each query term's weight is multiplied by its inverse document frequency over the
    /// collection (Qdrant's `modifier: idf`, as BM25 weighs terms).
    Idf,
}

/// A sparse vector space (term ids with weights), scored by dot product.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SparseSpace {
    pub name: String,
    #[serde(default)]
    pub modifier: SparseModifier,
    /// The inverted index of sealed segments on SSD (Qdrant's `index.on_disk`): only the
    /// term dictionary in DRAM, each query term's posting list read per query. Applies to
    /// segments sealed afterwards. `None`: not set (in DRAM).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_disk: Option<bool>,
    /// Deleted from the collection, as `DenseSpace::removed`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub removed: bool,
}

impl SparseSpace {
    pub fn new(name: &str, modifier: SparseModifier) -> Self {
        Self {
            name: name.to_string(),
            modifier,
            on_disk: None,
            removed: false,
        }
    }
}

/// Settings of one collection. `CollectionConfig::new(dim, metric)` gives the defaults for
/// one unnamed dense space; `with_spaces` for named and sparse ones.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CollectionConfig {
    /// The dense spaces, in a fixed order: a space is stored by its index here.
    pub dense: Vec<DenseSpace>,
    /// The sparse spaces, likewise.
    #[serde(default)]
    pub sparse: Vec<SparseSpace>,
    /// The multivector spaces (a point holds several vectors of `dim` numbers in one,
    /// compared by MaxSim: each query vector's best match, summed), likewise.
    #[serde(default)]
    pub multi: Vec<DenseSpace>,
    /// Directories (devices or NVMe-oF namespaces) the sealed segments' nodes are striped
    /// over; empty keeps them in the collection's directory.
    pub paths: Vec<PathBuf>,
    /// Where the write-ahead log lives; `None`: in the collection's directory.
    pub wal_path: Option<PathBuf>,
    pub durability: Durability,
    /// Points a growing segment takes before it is frozen and sealed into a DiskANN segment.
    pub seal_threshold: usize,
    /// Share of deleted points at which a sealed segment is rebuilt without them.
    pub vacuum_threshold: f64,
    /// Largest sealed segment a merge may produce (a build larger than its memory runs in
    /// shards; a merge of this many takes as long as a seal of as many).
    pub max_segment_points: usize,
    /// HNSW links per point (2x on the bottom level) of growing segments (Qdrant's `m`).
    pub hnsw_m: usize,
    /// HNSW candidate list while linking a point (Qdrant's `ef_construct`).
    pub hnsw_ef_construction: usize,
    /// DiskANN build parameters of sealed segments.
    pub max_degree: usize,
    pub build_list: usize,
    pub pq_bytes: Option<usize>,
    /// The size of the DRAM codes of every dense space that sets none of its own (Qdrant's
    /// collection-level `quantization_config`); ahead of `pq_bytes` when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quantization: Option<Quantization>,
    /// Search list (L) of a search that names none.
    pub search_list: usize,
    /// The algorithm that builds sealed segments' graphs; `None` (`auto`): PiPNN for builds
    /// of at least `PIPNN_FROM_POINTS` points, Vamana below (where both take a few seconds).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "builder_name"
    )]
    pub graph_builder: Option<GraphBuilder>,
    /// Largest payload of one point, as JSON bytes.
    pub max_payload_bytes: usize,
    /// `false` keeps every node of a sealed segment (full vector and adjacency list) in DRAM
    /// as well as on disk, so searches read nothing from the SSD (Qdrant's `on_disk: false`),
    /// whatever the search memory; `true` keeps as many as `search_memory` pays for, the
    /// rest is read per query.
    #[serde(default = "yes")]
    pub on_disk: bool,
    /// Sealed segments load their navigation file (every neighbour list and a 4-bit code per
    /// vector, a fifth to a quarter of the raw vectors' size) and walk the graph in DRAM:
    /// 1.6x less CPU per query with every node cached, 0.6-0.8x the SSD reads without.
    /// `false` keeps only the PQ codes in DRAM (the setting for a tight memory budget).
    #[serde(default = "yes")]
    pub navigation: bool,
    /// Sealed segments leave their payloads in `points.dvp` and read one when a filter,
    /// an `order_by` or an answer needs it (Qdrant's `on_disk_payload`): 12 bytes of DRAM a
    /// point instead of the parsed payload. Payload indexes stay in DRAM, so indexed
    /// filters read nothing. Applies to segments sealed or opened after it changes.
    #[serde(default)]
    pub on_disk_payload: bool,
    /// After this many milliseconds without a write, the segments are merged into one when
    /// the smaller ones hold at least a tenth of the largest (0: never).
    #[serde(default = "idle_merge_default")]
    pub idle_merge_ms: u64,
    /// Memory each seal, vacuum and merge of this collection may use (bytes, or a share of
    /// the build's raw vectors), within the database's build memory that all collections'
    /// builds share; `None`: the database's. A build that does not fit in memory runs in
    /// shards.
    #[serde(default, with = "budget_text")]
    pub build_memory: Option<MemoryBudget>,
    /// DRAM the sealed segments' searches may hold beyond their compressed vectors (bytes,
    /// or a share of the raw vectors of the sealed points): their navigation data first,
    /// then node records, the closest to the entry point first (search_memory.rs). `None`:
    /// a share of the database's search memory, which all such collections split.
    #[serde(default, with = "search_budget_text")]
    pub search_memory: Option<MemoryBudget>,
    /// Limits on the requests the collection serves (`strict.rs`).
    #[serde(default, skip_serializing_if = "StrictMode::is_default")]
    pub strict_mode: StrictMode,
    /// The application's own notes on the collection (Qdrant's `metadata`): kept and shown,
    /// never read by diskvec.
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub metadata: serde_json::Map<String, serde_json::Value>,
}

fn yes() -> bool {
    true
}

/// Manifests written before `idle_merge_ms` existed get the default.
fn idle_merge_default() -> u64 {
    IDLE_MERGE_MS
}

/// Builds of at least this many points use PiPNN when the collection names no graph builder:
/// at 20,000 points x 768 its graph took 1.3 s against Vamana's 9.2 s, at 160,000 9.5 s against
/// 46.6 s, at equal recall (synthetic sets, docs/benchmarks.md); below it both are quick and
/// Vamana's graph needs no entry points near every cluster.
pub const PIPNN_FROM_POINTS: usize = 10_000;

/// Default quiet time before the idle merge.
pub const IDLE_MERGE_MS: u64 = 2_000;

impl CollectionConfig {
    pub fn new(dim: usize, metric: Metric) -> Self {
        Self::with_spaces(vec![DenseSpace::new("", dim, metric)], Vec::new())
    }

    /// The defaults, with these spaces.
    pub fn with_spaces(dense: Vec<DenseSpace>, sparse: Vec<SparseSpace>) -> Self {
        Self {
            dense,
            sparse,
            multi: Vec::new(),
            paths: Vec::new(),
            wal_path: None,
            durability: Durability::Sync,
            seal_threshold: 20_000,
            vacuum_threshold: 0.2,
            max_segment_points: 2_000_000,
            hnsw_m: 16,
            hnsw_ef_construction: 100,
            max_degree: 64,
            build_list: 100,
            pq_bytes: None,
            quantization: None,
            search_list: 100,
            graph_builder: None,
            max_payload_bytes: 1 << 20,
            on_disk: true,
            navigation: true,
            on_disk_payload: false,
            idle_merge_ms: IDLE_MERGE_MS,
            build_memory: None,
            search_memory: None,
            strict_mode: StrictMode::default(),
            metadata: serde_json::Map::new(),
        }
    }

    /// Refuses settings no collection can work with, naming the setting.
    pub fn check(&self) -> Result<()> {
        let bad = |m: String| Err(DbError::InvalidInput(m));
        self.strict_mode.check()?;
        let spaces =
            self.live_dense().count() + self.live_sparse().count() + self.live_multi().count();
        if spaces == 0 {
            return bad("a collection needs at least one vector space, dense or sparse".into());
        }
        if spaces > MAX_SPACES {
            return bad(format!(
                "a collection has at most {MAX_SPACES} vector spaces, got {spaces}"
            ));
        }
        // A space is stored by its index in its list, in one byte; a deleted space keeps
        // its slot.
        let slots = self
            .dense
            .len()
            .max(self.sparse.len())
            .max(self.multi.len());
        if slots > MAX_SLOTS {
            return bad(format!(
                "a collection's spaces of one kind, deleted ones included, take at most \
                 {MAX_SLOTS} slots; this change needs {slots}"
            ));
        }
        // Qdrant's wording for these two, which its clients and REST suite check.
        if self.live_sparse().any(|s| s.name.is_empty()) {
            return bad("Sparse vector name cannot be empty".into());
        }
        let mut names: Vec<&str> = self
            .live_dense()
            .map(|s| s.name.as_str())
            .chain(self.live_sparse().map(|s| s.name.as_str()))
            .chain(self.live_multi().map(|s| s.name.as_str()))
            .collect();
        names.sort_unstable();
        if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
            return bad(format!(
                "Dense and sparse vector names must be unique - duplicate found with '{}'",
                w[0]
            ));
        }
        for space in self.dense.iter().chain(&self.multi) {
            if let Some(m) = space.hnsw.m {
                diskvec_index::limits::HNSW_M.check(m)?;
            }
            if let Some(ef) = space.hnsw.ef_construct {
                diskvec_index::limits::EF_CONSTRUCTION.check(ef)?;
            }
            if space.datatype == ElementType::Uint8 && space.metric == Metric::Cosine {
                return bad(format!(
                    "datatype uint8 with Cosine distance is not supported{}: cosine vectors \
                     are scaled to unit length, which whole numbers 0-255 cannot hold; use Dot \
                     or Euclid, or datatype float16",
                    space_suffix(&space.name)
                ));
            }
            if space.dim == 0 || space.dim > MAX_DIM {
                return bad(format!(
                    "dim must be between 1 and {MAX_DIM}, got {}{}",
                    space.dim,
                    space_suffix(&space.name)
                ));
            }
        }
        if self.seal_threshold == 0 || self.seal_threshold > u32::MAX as usize / 2 {
            return bad(format!(
                "seal_threshold must be between 1 and {}, got {}",
                u32::MAX / 2,
                self.seal_threshold
            ));
        }
        if !(64..=64 << 20).contains(&self.max_payload_bytes) {
            return bad(format!(
                "max_payload_bytes must be between 64 and {}, got {}",
                64 << 20,
                self.max_payload_bytes
            ));
        }
        if self.max_segment_points < self.seal_threshold {
            return bad(format!(
                "max_segment_points ({}) must be at least seal_threshold ({})",
                self.max_segment_points, self.seal_threshold
            ));
        }
        if !(self.vacuum_threshold > 0.0 && self.vacuum_threshold <= 1.0) {
            return bad(format!(
                "vacuum_threshold must be in (0, 1], got {}",
                self.vacuum_threshold
            ));
        }
        if self.idle_merge_ms > 24 * 3_600_000 {
            return bad(format!(
                "idle_merge_ms must be at most 86400000 (a day), got {}",
                self.idle_merge_ms
            ));
        }
        if let Durability::Interval { interval_ms } = self.durability {
            if interval_ms == 0 || interval_ms > 60_000 {
                return bad(format!(
                    "the flush interval must be 1 to 60000 ms, got {interval_ms}"
                ));
            }
        }
        if self.build_memory == Some(MemoryBudget::Auto) {
            return bad(
                "build_memory \"auto\" is the database's budget: leave the setting unset instead"
                    .into(),
            );
        }
        if self.search_memory == Some(MemoryBudget::Auto) {
            return bad(
                "search_memory \"auto\" is the database's share: leave the setting unset instead"
                    .into(),
            );
        }
        diskvec_index::limits::HNSW_M.check(self.hnsw_m)?;
        diskvec_index::limits::EF_CONSTRUCTION.check(self.hnsw_ef_construction)?;
        diskvec_index::limits::MAX_DEGREE.check(self.max_degree)?;
        diskvec_index::limits::BUILD_LIST.check(self.build_list)?;
        diskvec_index::limits::SEARCH_LIST.check(self.search_list)?;
        let widest = self.dense.iter().map(|s| s.dim).max().unwrap_or(0);
        if let (Some(pq), Some(space)) = (self.pq_bytes, self.dense.first()) {
            let narrowest = self.dense.iter().map(|s| s.dim).min().unwrap_or(space.dim);
            diskvec_index::limits::pq_bytes(narrowest).check(pq)?;
        }
        if let (Some(budget), Some(space)) = (self.build_memory, self.dense.first()) {
            // Every seal builds at least this many points: a budget that cannot is refused now,
            // not at the first seal. (The spaces are built one after the other; the widest
            // needs the most.)
            let shape = self
                .build_params(space, &[], self.seal_threshold)
                .shape(self.seal_threshold, widest)?;
            let smallest = shape.smallest_budget()?;
            let given = budget.resolve(shape.raw_bytes());
            if given < smallest {
                return bad(format!(
                    "build_memory {budget} gives {} to a seal of {} points of {} dimensions, \
                     which needs at least {}",
                    mib(given),
                    self.seal_threshold,
                    widest,
                    mib(smallest)
                ));
            }
        }
        Ok(())
    }

    /// The dense space named `name`, by index.
    pub fn dense_space(&self, name: &str) -> Option<usize> {
        self.dense.iter().position(|s| s.name == name && !s.removed)
    }

    /// The multivector space named `name`, by index.
    pub fn multi_space(&self, name: &str) -> Option<usize> {
        self.multi.iter().position(|s| s.name == name && !s.removed)
    }

    /// Qdrant's conversion into uint8 spaces, for its API: each finite value truncated
    /// toward zero and held to 0-255 (256.19 is 255, 3.81 is 3), where this database itself
    /// refuses anything but whole numbers 0-255. Vectors of other spaces are left alone.
    pub fn cast_uint8_like_qdrant(&self, vectors: &mut crate::vectors::NamedVectors) {
        use crate::vectors::Vector;
        let cast = |values: &mut [f32]| {
            for x in values.iter_mut().filter(|x| x.is_finite()) {
                *x = x.trunc().clamp(0.0, 255.0);
            }
        };
        for (name, vector) in vectors.iter_mut() {
            let space = self
                .dense_space(name)
                .map(|i| &self.dense[i])
                .or_else(|| self.multi_space(name).map(|i| &self.multi[i]));
            if space.is_none_or(|s| s.datatype != ElementType::Uint8) {
                continue;
            }
            match vector {
                Vector::Dense(v) => cast(v),
                Vector::Multi(rows) => rows.iter_mut().for_each(|r| cast(r)),
                Vector::Sparse(_) => {}
            }
        }
    }

    /// The sparse space named `name`, by index.
    pub fn sparse_space(&self, name: &str) -> Option<usize> {
        self.sparse
            .iter()
            .position(|s| s.name == name && !s.removed)
    }

    /// Whether a space (dense, sparse or multivector) is named `name`.
    pub fn has_space(&self, name: &str) -> bool {
        self.dense_space(name).is_some()
            || self.sparse_space(name).is_some()
            || self.multi_space(name).is_some()
    }

    /// The dense spaces not deleted.
    pub fn live_dense(&self) -> impl Iterator<Item = &DenseSpace> {
        self.dense.iter().filter(|s| !s.removed)
    }

    /// The sparse spaces not deleted.
    pub fn live_sparse(&self) -> impl Iterator<Item = &SparseSpace> {
        self.sparse.iter().filter(|s| !s.removed)
    }

    /// The multivector spaces not deleted.
    pub fn live_multi(&self) -> impl Iterator<Item = &DenseSpace> {
        self.multi.iter().filter(|s| !s.removed)
    }

    /// The unnamed dense space (that of a collection made with one vector), if it has one.
    pub fn unnamed(&self) -> Option<&DenseSpace> {
        self.live_dense().find(|s| s.name.is_empty())
    }

    /// The spaces in a few words: "dim 768, cosine" for the one unnamed space, else each
    /// space's name and shape.
    pub fn describe_spaces(&self) -> String {
        if let [one] = self.dense.as_slice() {
            if one.name.is_empty() && self.sparse.is_empty() && self.multi.is_empty() {
                return format!("dim {}, {}", one.dim, one.metric.name());
            }
        }
        let dense = self
            .live_dense()
            .map(|s| format!("{:?} {}-d {}", s.name, s.dim, s.metric.name()));
        let sparse = self.live_sparse().map(|s| format!("{:?} sparse", s.name));
        let multi = self
            .live_multi()
            .map(|s| format!("{:?} {}-d {} multivector", s.name, s.dim, s.metric.name()));
        dense
            .chain(sparse)
            .chain(multi)
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The numbers of one point's dense vectors, all spaces together.
    pub fn dense_numbers(&self) -> usize {
        self.dense.iter().map(|s| s.dim).sum()
    }

    /// Bytes of each DRAM code of `space` in sealed segments: its quantization, else the
    /// collection's, else `pq_bytes`; `None`: the index's default.
    pub fn code_bytes(&self, space: &DenseSpace) -> Option<usize> {
        match space.quantization.as_ref().or(self.quantization.as_ref()) {
            Some(q) => Some(q.code_bytes(space.dim)),
            None => self.pq_bytes.map(|p| p.min(space.dim)),
        }
    }

    /// What Qdrant warns of in these settings (its words): `inline_storage` asked of a
    /// multivector space, or of a space without quantization.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        let inline = |s: &DenseSpace| s.hnsw.inline_storage == Some(true);
        for s in self.live_multi().filter(|s| inline(s)) {
            out.push(format!(
                "The `hnsw_config.inline_storage` option for vector '{}' is not compatible with \
                 multivectors. This option will be ignored.",
                s.name
            ));
        }
        for s in self.live_dense().filter(|s| inline(s)) {
            if s.quantization.is_none() && self.quantization.is_none() {
                out.push(format!(
                    "The `hnsw_config.inline_storage` option for vector '{}' requires \
                     quantization to be enabled. This option will be ignored.",
                    s.name
                ));
            }
        }
        out
    }

    /// The graph builder of a build of `n` points: the collection's, or by size.
    pub fn graph_builder_for(&self, n: usize) -> GraphBuilder {
        self.graph_builder.unwrap_or(if n >= PIPNN_FROM_POINTS {
            GraphBuilder::Pipnn
        } else {
            GraphBuilder::Vamana
        })
    }

    /// The DiskANN build parameters of a build of `n` points of `space` in this collection's
    /// sealed segments, whose nodes go to `paths` (none: the segment's directory).
    pub fn build_params(&self, space: &DenseSpace, paths: &[PathBuf], n: usize) -> BuildParams {
        BuildParams {
            graph_builder: self.graph_builder_for(n),
            metric: space.metric,
            max_degree: self.max_degree,
            build_list: self.build_list,
            pq_bytes: self.code_bytes(space),
            paths: paths.to_vec(),
            input_prepared: true,
            element: space.datatype,
            ..Default::default()
        }
    }
}

/// Qdrant's words for a vector of the wrong length (its clients and REST suite look for
/// them), followed by where: `context` (e.g. " (point 7, vector space \"text\")").
pub fn dimension_error(want: usize, got: usize, context: &str) -> String {
    format!("Vector dimension error: expected dim: {want}, got {got}{context}")
}

/// " of vector space NAME" for a named space, nothing for the unnamed one: the tail of an
/// error about a space.
pub fn space_suffix(name: &str) -> String {
    if name.is_empty() {
        String::new()
    } else {
        format!(" (vector space {name:?})")
    }
}

/// Metrics by the names users type.
pub fn parse_metric(name: &str) -> Result<Metric> {
    match name.to_ascii_lowercase().as_str() {
        "cosine" => Ok(Metric::Cosine),
        "l2" | "euclid" | "euclidean" => Ok(Metric::L2),
        "ip" | "dot" | "inner_product" => Ok(Metric::InnerProduct),
        other => Err(DbError::InvalidInput(format!(
            "unknown metric {other:?}: use cosine, l2 or ip"
        ))),
    }
}

mod element_name {
    use diskvec_vector::ElementType;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(e: &ElementType, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(e.name())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<ElementType, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

/// A collection's graph builder setting as users give it: `auto` (`None`: chosen by the
/// build's size) or a builder's name.
pub fn parse_graph_builder(text: &str) -> std::result::Result<Option<GraphBuilder>, String> {
    match text {
        "auto" => Ok(None),
        name => name.parse().map(Some),
    }
}

/// A graph builder by name (`vamana`, `pipnn`) in a manifest; absent: chosen by size.
mod builder_name {
    use diskvec_index::diskann::GraphBuilder;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(b: &Option<GraphBuilder>, s: S) -> Result<S::Ok, S::Error> {
        match b {
            Some(b) => s.serialize_some(b.name()),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<GraphBuilder>, D::Error> {
        Option::<String>::deserialize(d)?
            .map(|t| t.parse().map_err(serde::de::Error::custom))
            .transpose()
    }
}

mod metric_name {
    use diskvec_vector::Metric;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(m: &Metric, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(m.name())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Metric, D::Error> {
        let name = String::deserialize(d)?;
        super::parse_metric(&name).map_err(serde::de::Error::custom)
    }
}

/// A collection's search memory as text: a memory budget, or "0" (hold nothing).
pub fn parse_search_memory(text: &str) -> Result<MemoryBudget> {
    match text.trim() {
        "0" => Ok(MemoryBudget::Bytes(0)),
        t => t
            .parse::<MemoryBudget>()
            .map_err(|e| DbError::InvalidInput(format!("search_memory: {e}"))),
    }
}

mod search_budget_text {
    use diskvec_index::diskann::MemoryBudget;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(b: &Option<MemoryBudget>, s: S) -> Result<S::Ok, S::Error> {
        super::budget_text::serialize(b, s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<MemoryBudget>, D::Error> {
        Option::<String>::deserialize(d)?
            .map(|t| super::parse_search_memory(&t).map_err(serde::de::Error::custom))
            .transpose()
    }
}

/// A memory budget in a manifest: its text (`"auto"`, a byte count, `"25%"`).
mod budget_text {
    use diskvec_index::diskann::MemoryBudget;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(b: &Option<MemoryBudget>, s: S) -> Result<S::Ok, S::Error> {
        match b {
            None => s.serialize_none(),
            Some(MemoryBudget::Bytes(bytes)) => s.serialize_some(&bytes.to_string()),
            Some(other) => s.serialize_some(&other.to_string()),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<MemoryBudget>, D::Error> {
        Option::<String>::deserialize(d)?
            .map(|t| t.parse().map_err(serde::de::Error::custom))
            .transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn graph_builder_by_size_unless_named_and_kept_in_the_manifest() {
        let mut c = CollectionConfig::new(8, Metric::L2);
        assert_eq!(
            c.graph_builder_for(PIPNN_FROM_POINTS - 1),
            GraphBuilder::Vamana
        );
        assert_eq!(c.graph_builder_for(PIPNN_FROM_POINTS), GraphBuilder::Pipnn);
        let text = serde_json::to_string(&c).unwrap();
        assert!(
            !text.contains("graph_builder"),
            "auto is not written: {text}"
        );
        c.graph_builder = Some(GraphBuilder::Vamana);
        assert_eq!(
            c.build_params(&c.dense[0], &[], 1 << 20).graph_builder,
            GraphBuilder::Vamana
        );
        let text = serde_json::to_string(&c).unwrap();
        assert!(text.contains(r#""graph_builder":"vamana""#), "{text}");
        let back: CollectionConfig = serde_json::from_str(&text).unwrap();
        assert_eq!(back, c);
        let bad = text.replace(r#""vamana""#, r#""hnsw""#);
        let err = serde_json::from_str::<CollectionConfig>(&bad)
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown graph builder"), "{err}");
    }
}
