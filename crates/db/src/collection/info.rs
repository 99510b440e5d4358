//! What a collection reports about itself.

use serde::Serialize;

use super::{lock, Collection};
use crate::config::CollectionConfig;
use crate::segment::Points;
use crate::segment::Segment;

/// Green: nothing pending. Yellow: a seal, vacuum or merge is queued or running, or the
/// segments are due to be merged into one once writes pause (`idle_merge_ms`). Red: a
/// background task failed (`CollectionInfo::error` says why); the collection keeps serving.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Green,
    Yellow,
    Red,
}

impl Status {
    pub fn name(self) -> &'static str {
        match self {
            Status::Green => "green",
            Status::Yellow => "yellow",
            Status::Red => "red",
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct SegmentInfo {
    pub id: u64,
    /// "growing" (active), "frozen" (waiting to be sealed) or "sealed".
    pub kind: &'static str,
    pub points: usize,
    pub deleted: usize,
    /// Points of a growing segment not linked into its HNSW graph yet (searched by scan).
    pub unindexed: usize,
    pub dram_bytes: usize,
    pub disk_bytes: u64,
    /// How a sealed segment's searches walk its graph: "in DRAM" (navigation loaded), or
    /// why not ("left off by the build: ..." where it would not pay on this data, "off (the
    /// collection's setting)", or the problem with its file); `None` for growing segments.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub navigation: Option<String>,
    /// Whether the payloads are read from SSD when needed (a sealed segment opened or
    /// sealed with `on_disk_payload`) rather than held parsed in DRAM.
    pub payloads_on_ssd: bool,
    /// A sealed segment's graph searches since it opened, and the node records they read
    /// from the device (node cache hits not counted): which segments cost the reads.
    pub graph_searches: u64,
    pub node_reads: u64,
    /// A sealed segment's node records held in DRAM (its node cache): small segments are
    /// held whole, the others a share of theirs (search_memory.rs).
    pub cached_nodes: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct CollectionInfo {
    pub name: String,
    pub status: Status,
    pub error: Option<String>,
    /// Live points.
    pub points: usize,
    /// Live points in sealed (DiskANN) segments.
    pub indexed_points: usize,
    pub segments: Vec<SegmentInfo>,
    pub payload_indexes: Vec<(String, String)>,
    /// The options of the indexes created with some (`create_payload_index_with`).
    pub payload_index_params: std::collections::BTreeMap<String, serde_json::Value>,
    pub config: CollectionConfig,
    pub last_op: u64,
    pub wal_bytes: u64,
    /// fdatasyncs of the log since open (group commit and interval mode keep this below
    /// the number of writes).
    pub wal_syncs: u64,
    pub seals_done: u64,
    /// Vacuums and merges done since open.
    pub rebuilds_done: u64,
    /// The seal, vacuum or merge being built now, with its phase and progress (the seal
    /// when a merge runs beside it).
    pub task: Option<super::TaskInfo>,
    /// Every build running now: a seal, and a vacuum or merge beside it.
    pub tasks: Vec<super::TaskInfo>,
    /// The last seal, vacuum or merge that ended since open (its memory budget, shards,
    /// seconds), successful or not.
    pub last_task: Option<super::TaskInfo>,
    /// Indexing turned off for a bulk load (`set_indexing(false)`).
    pub indexing_paused: bool,
    /// What the sealed segments hold in DRAM for their searches, and what those read.
    pub search_memory: SearchMemoryInfo,
}

/// A collection's search memory: what its sealed segments hold in DRAM beyond their
/// compressed vectors (search_memory.rs), and what their graph searches read since open.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SearchMemoryInfo {
    /// The collection's own setting ("25%", "512MiB"), "all" (`on_disk: false`), or
    /// "shared" (a share of the database's search memory).
    pub setting: String,
    /// The share of its nodes each sealed segment holds, as the last rebalance planned.
    pub node_share: f64,
    /// Whether its sealed segments load their navigation data (the setting asks for it and
    /// the search memory holds it; a segment opened before that changed keeps its own).
    pub navigation: bool,
    pub navigation_bytes: u64,
    /// Sealed segments whose walk is steered by their compact code set (a quarter of the
    /// PQ codes' bytes: the database opens them so where memory cannot hold the full ones).
    pub compact_code_segments: u64,
    /// Bytes of PQ codes its sealed segments hold (full or compact).
    pub code_bytes: u64,
    pub node_cache_bytes: u64,
    pub cached_nodes: u64,
    pub nodes: u64,
    /// Graph searches of the sealed segments open now, since they were opened.
    pub graph_searches: u64,
    /// Node reads sent to the SSD per graph search.
    pub reads_per_search: f64,
    /// The share of node visits DRAM answered instead of the SSD.
    pub cache_hit_rate: f64,
}

impl Collection {
    pub fn info(&self) -> CollectionInfo {
        let inner = &self.inner;
        // Before the state lock: a manifest write holds the manifest lock while it reads
        // the state.
        let payload_index_params = lock(&inner.manifest).payload_index_params.clone();
        let (busy, error, seals_done, rebuilds_done, merge_all) = {
            let bg = lock(&inner.background);
            (
                bg.sealing || bg.merging,
                bg.error.clone(),
                bg.sealed,
                bg.rebuilt,
                bg.merge_all,
            )
        };
        let maintenance_due = inner.maintenance_due() || inner.merge_when_idle();
        let state = inner.state.read().unwrap_or_else(|e| e.into_inner());
        let mut segments = Vec::new();
        for (&id, s) in &state.segments {
            segments.push(match s {
                Segment::Growing(g) => {
                    let g = g.read().unwrap_or_else(|e| e.into_inner());
                    SegmentInfo {
                        id,
                        kind: if g.frozen_at.is_some() {
                            "frozen"
                        } else {
                            "growing"
                        },
                        points: g.len(),
                        deleted: g.len() - g.live(),
                        unindexed: g.unlinked(),
                        dram_bytes: g.dram_bytes(),
                        disk_bytes: 0,
                        navigation: None,
                        payloads_on_ssd: false,
                        graph_searches: 0,
                        node_reads: 0,
                        cached_nodes: 0,
                    }
                }
                Segment::Sealed(s) => {
                    let counts = s.search_counts();
                    SegmentInfo {
                        id,
                        kind: "sealed",
                        points: s.len(),
                        deleted: s.deleted_count(),
                        unindexed: 0,
                        dram_bytes: s.dram_bytes(),
                        disk_bytes: s.disk_bytes(),
                        navigation: Some(s.navigation_state(
                            inner.config().navigation,
                            inner.search_dram().navigation,
                        )),
                        payloads_on_ssd: s.payloads_on_ssd(),
                        graph_searches: counts.searches,
                        node_reads: counts.reads,
                        cached_nodes: s.cached_nodes(),
                    }
                }
            });
        }
        let indexed_points = segments
            .iter()
            .filter(|s| s.kind == "sealed")
            .map(|s| s.points - s.deleted)
            .sum();
        let status = if error.is_some() {
            Status::Red
        } else if busy || merge_all || maintenance_due || !state.frozen.is_empty() {
            Status::Yellow
        } else {
            Status::Green
        };
        let search_memory = search_memory_info(inner, &state);
        let stats = inner.wal.stats();
        let tasks = inner.task.running();
        CollectionInfo {
            name: inner.name.clone(),
            status,
            error,
            points: state.tracker.len(),
            indexed_points,
            segments,
            payload_indexes: state
                .fields
                .iter()
                .map(|(f, k)| (f.clone(), k.name().to_string()))
                .collect(),
            payload_index_params,
            config: (*inner.config()).clone(),
            last_op: inner.wal.last_op(),
            wal_bytes: stats.bytes,
            wal_syncs: stats.syncs,
            seals_done,
            rebuilds_done,
            task: tasks.first().cloned(),
            tasks,
            last_task: inner.task.last(),
            indexing_paused: state.indexing_paused,
            search_memory,
        }
    }
}

impl CollectionInfo {
    /// What a collection with no points and no segments reports: a cluster node's figures of
    /// a collection it holds no replica of.
    pub fn empty(name: String, config: CollectionConfig) -> Self {
        CollectionInfo {
            name,
            status: Status::Green,
            error: None,
            points: 0,
            indexed_points: 0,
            segments: Vec::new(),
            payload_indexes: Vec::new(),
            payload_index_params: Default::default(),
            config,
            last_op: 0,
            wal_bytes: 0,
            wal_syncs: 0,
            seals_done: 0,
            rebuilds_done: 0,
            task: None,
            tasks: Vec::new(),
            last_task: None,
            indexing_paused: false,
            search_memory: SearchMemoryInfo::default(),
        }
    }

    /// Adds what another part of the same collection reports (a cluster node's replica of
    /// another of its shards): points, segments, logs and tasks summed, the worse status.
    pub fn absorb(&mut self, part: CollectionInfo) {
        if part.status > self.status {
            self.status = part.status;
            self.error = part.error.or(self.error.take());
        }
        self.points += part.points;
        self.indexed_points += part.indexed_points;
        self.segments.extend(part.segments);
        self.last_op = self.last_op.max(part.last_op);
        self.wal_bytes += part.wal_bytes;
        self.wal_syncs += part.wal_syncs;
        self.seals_done += part.seals_done;
        self.rebuilds_done += part.rebuilds_done;
        self.tasks.extend(part.tasks);
        self.task = self.task.take().or(part.task);
        self.last_task = self.last_task.take().or(part.last_task);
        self.indexing_paused |= part.indexing_paused;
    }
}

fn search_memory_info(inner: &super::Inner, state: &super::state::State) -> SearchMemoryInfo {
    let config = inner.config();
    let mut info = SearchMemoryInfo {
        setting: match (config.on_disk, config.search_memory) {
            (false, _) => "all".into(),
            (true, Some(own)) => own.to_string(),
            (true, None) => "shared".into(),
        },
        node_share: match inner.node_cache() {
            crate::segment::NodeCacheSize::All => 1.0,
            crate::segment::NodeCacheSize::Share(s) => s,
        },
        navigation: inner.search_dram().navigation,
        ..Default::default()
    };
    let mut hits = 0;
    let mut reads = 0;
    for s in state.segments.values() {
        let Segment::Sealed(s) = s else { continue };
        info.navigation_bytes += s.navigation_bytes() as u64;
        info.compact_code_segments += s.uses_compact_codes() as u64;
        info.code_bytes += s.code_bytes_held() as u64;
        info.node_cache_bytes += s.node_cache_bytes() as u64;
        info.cached_nodes += s.cached_nodes() as u64;
        info.nodes += s.len() as u64;
        let counts = s.search_counts();
        info.graph_searches += counts.searches;
        reads += counts.reads;
        hits += counts.cache_hits;
    }
    if info.graph_searches > 0 {
        info.reads_per_search = reads as f64 / info.graph_searches as f64;
    }
    if reads + hits > 0 {
        info.cache_hit_rate = hits as f64 / (reads + hits) as f64;
    }
    info
}
