//! A sealed segment: a DiskANN index of a frozen growing segment (node i's external id is
//! its offset), with the points' ids, versions and payloads in DRAM and a deleted bitmap.
//! Only the bitmap changes after sealing; an update of a sealed point writes a new version
//! into the growing segment and deletes this one.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, RwLock};

use diskvec_index::diskann::{
    build_from, Accept, DiskIndex, MemoryBudget, OpenOptions, PendingSearch, SearchParams,
    SearchResult, SearchService,
};
use diskvec_index::limits;
use diskvec_vector::Metric;
use roaring::RoaringBitmap;

use super::files::{read_points, write_points, POINTS_FILE};
use super::{closest, Points, SealInput, SegmentHit};
use crate::config::CollectionConfig;
use crate::filter::{Candidates, Filter, PayloadIndex, PayloadIndexKind};
use crate::{Payload, PointId, Result};

/// A filter whose index candidates number at most this is answered exactly: the matches'
/// vectors are read from SSD (a few hundred reads cost what one graph search does).
pub(crate) const EXACT_LIMIT: u64 = 2_000;

/// A filter matching at most this share of a segment is answered by ranking every match by
/// its code in DRAM (4-bit with navigation, else PQ; a few lookups each) rather than by walking the graph, where the
/// matches would be too sparse among the nodes the walk meets.
const PQ_SCAN_SHARE: f64 = 0.3;

/// Payloads sampled to estimate the share of a filter no payload index can narrow.
const SHARE_SAMPLE: usize = 512;

/// Queries one search thread of a segment interleaves (their reads overlap).
const QUERIES_PER_THREAD: usize = 16;

/// A sealed segment's search between `start_search` and `finish_search`.
pub(crate) enum StartedSearch {
    /// Answered without the graph (a selective filter).
    Done(Vec<SegmentHit>),
    Graph {
        graph: GraphSearch,
        k: usize,
        filter: Option<Arc<Filter>>,
    },
}

pub(crate) enum GraphSearch {
    Queued(PendingSearch),
    Done(diskvec_index::Result<SearchResult>),
}

pub(crate) struct Sealed {
    pub dir: PathBuf,
    metric: Metric,
    index: Arc<DiskIndex>,
    /// The segment's search threads, started at its first graph search; `Err` (e.g. no
    /// read engine could be set up) sends graph searches to the caller's thread instead.
    service: OnceLock<std::result::Result<SearchService, String>>,
    ids: super::ids::IdColumn,
    pub versions: Vec<u64>,
    payloads: super::payloads::PayloadColumn,
    pub deleted: RwLock<RoaringBitmap>,
    /// Bumped at every delete; the manifest writer compares it to what it last wrote.
    pub deleted_changes: AtomicU64,
    pub payload_index: RwLock<PayloadIndex>,
    counts: Counts,
}

/// Graph searches of one sealed segment and what they read.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct SearchCounts {
    pub searches: u64,
    pub reads: u64,
    pub cache_hits: u64,
}

#[derive(Default)]
struct Counts {
    searches: AtomicU64,
    reads: AtomicU64,
    cache_hits: AtomicU64,
}

impl Counts {
    fn add(&self, found: &diskvec_index::diskann::SearchResult) {
        use std::sync::atomic::Ordering::Relaxed;
        self.searches.fetch_add(1, Relaxed);
        self.reads.fetch_add(found.reads as u64, Relaxed);
        self.cache_hits.fetch_add(found.cache_hits as u64, Relaxed);
    }
}

/// How a seal's build runs: within `budget` bytes (what the database's build memory granted:
/// the build runs in shards when the whole of it does not fit), at `priority` (`run_build`),
/// encoding with `codebook` when given.
pub(crate) struct SealBuild {
    pub budget: u64,
    pub priority: crate::background::BuildPriority,
    pub codebook: Option<Arc<diskvec_index::diskann::Codebook>>,
    /// Where a build in shards keeps its finished shards (`BuildParams::checkpoint`).
    pub checkpoint: PathBuf,
}

/// Builds the DiskANN index and the points file of `input` into `dir` as `how` says;
/// returns the build's report (with the codebook its codes were made with).
pub(crate) fn seal(
    storage: &Arc<dyn crate::storage::Storage>,
    input: &SealInput,
    dir: &Path,
    config: &CollectionConfig,
    paths: &[PathBuf],
    how: SealBuild,
    progress: &dyn diskvec_index::Progress,
) -> Result<diskvec_index::diskann::BuildReport> {
    crate::storage::create_dir_all_durable(storage.as_ref(), dir)
        .map_err(crate::error::file_error(dir))?;
    if !input.rows_match() {
        return Err(crate::DbError::Unavailable(format!(
            "internal error: a build of {} points was given vectors for another number",
            input.len()
        )));
    }
    let params = diskvec_index::diskann::BuildParams {
        codebook: how.codebook,
        checkpoint: Some(how.checkpoint),
        storage: Arc::clone(storage),
        ..config.build_params(paths)
    };
    let report = crate::background::run_build(how.priority, || {
        build_from(
            &mut input.source(),
            &params,
            MemoryBudget::Bytes(how.budget),
            dir,
            progress,
        )
    })?;
    write_points(
        storage.as_ref(),
        &dir.join(POINTS_FILE),
        &input.ids,
        &input.versions,
        &input.payloads,
    )?;
    Ok(report)
}

impl Points for Sealed {
    fn len(&self) -> usize {
        self.ids.len()
    }

    fn is_live(&self, offset: u32) -> bool {
        !self
            .deleted
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .contains(offset)
    }

    fn point(&self, offset: u32) -> (PointId, &Payload) {
        (
            self.ids.get(offset as usize),
            self.payloads.get(offset as usize),
        )
    }

    fn candidates(&self, filter: &Filter) -> Option<Candidates> {
        self.payload_index
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .candidates(filter, self.len() as u32)
    }
}

/// How many of a sealed segment's node records it holds in DRAM.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum NodeCacheSize {
    /// Every one: a search reads nothing from the SSD (`on_disk: false`).
    All,
    /// This share (0 to 1) of them, as the search memory pays for (search_memory.rs).
    Share(f64),
}

impl NodeCacheSize {
    /// None of a shared cache (a rebalance fills it later); `All` stays.
    pub fn without_nodes(self) -> Self {
        match self {
            Self::All => Self::All,
            Self::Share(_) => Self::Share(0.0),
        }
    }
}

/// What a sealed segment loads into DRAM for its searches besides its node cache.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SearchDram {
    pub navigation: bool,
    pub compact_codes: bool,
}

impl Sealed {
    /// Opens a sealed segment holding `cache` of its node records in DRAM, as `memory`
    /// says: whether it loads its navigation file when it has one
    /// (`CollectionConfig::navigation`), and steers by its compact codes.
    pub fn open(
        storage: &Arc<dyn crate::storage::Storage>,
        dir: &Path,
        metric: Metric,
        deleted: RoaringBitmap,
        fields: &[(String, PayloadIndexKind)],
        cache: NodeCacheSize,
        memory: SearchDram,
    ) -> Result<Self> {
        let options = OpenOptions {
            cache_nodes: Some(match cache {
                NodeCacheSize::All => diskvec_index::limits::MAX_VECTORS,
                NodeCacheSize::Share(_) => 0,
            }),
            navigation: memory.navigation,
            compact_codes: memory.compact_codes,
            storage: Arc::clone(storage),
            ..OpenOptions::default()
        };
        let index = DiskIndex::open(dir, &options)?;
        if let NodeCacheSize::Share(share) = cache {
            if share > 0.0 {
                index.resize_node_cache((index.len() as f64 * share) as usize)?;
            }
        }
        let super::files::PointsFile {
            ids,
            versions,
            payloads,
        } = read_points(&dir.join(POINTS_FILE))?;
        if ids.len() != index.len() {
            return Err(crate::DbError::Corrupt {
                path: dir.to_path_buf(),
                message: format!(
                    "{POINTS_FILE} lists {} points, the index {}",
                    ids.len(),
                    index.len()
                ),
            });
        }
        let mut payload_index = PayloadIndex::new();
        for (field, kind) in fields {
            payload_index.add_field(field, *kind);
        }
        for (offset, p) in payloads.iter().enumerate() {
            if !deleted.contains(offset as u32) {
                payload_index.insert(offset as u32, p);
            }
        }
        Ok(Self {
            dir: dir.to_path_buf(),
            metric,
            index: Arc::new(index),
            service: OnceLock::new(),
            ids,
            versions,
            payloads,
            deleted: RwLock::new(deleted),
            deleted_changes: AtomicU64::new(0),
            payload_index: RwLock::new(payload_index),
            counts: Counts::default(),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The id of the point at `offset`.
    pub fn id(&self, offset: u32) -> PointId {
        self.ids.get(offset as usize)
    }

    /// The payload of the point at `offset`.
    pub fn payload(&self, offset: u32) -> &Payload {
        self.payloads.get(offset as usize)
    }

    /// Whether its walk is steered by the compact code set.
    pub fn uses_compact_codes(&self) -> bool {
        self.index.uses_compact_codes()
    }

    /// Bytes of PQ codes it holds in DRAM (full or compact).
    pub fn code_bytes_held(&self) -> usize {
        self.index.code_bytes_held()
    }

    /// Bytes of the segment's navigation file (what loading it would take), loaded or not.
    pub fn navigation_file_bytes(&self) -> u64 {
        crate::collection::navigation_file_bytes(&self.dir)
    }

    /// Bytes of the navigation data held in DRAM (0 without it).
    pub fn navigation_bytes(&self) -> usize {
        self.index
            .navigation()
            .map_or(0, diskvec_index::diskann::Navigation::dram_bytes)
    }

    pub fn node_record_bytes(&self) -> usize {
        self.index.node_record_bytes()
    }

    pub fn node_cache_bytes(&self) -> usize {
        self.index.node_cache_bytes()
    }

    pub fn cached_nodes(&self) -> usize {
        self.index.cached_nodes()
    }

    /// Node records the segment's cache has room for.
    pub fn node_cache_room(&self) -> usize {
        self.index.node_cache_room()
    }

    /// Holds `records` node records in DRAM from now on (searches running keep theirs).
    pub fn resize_node_cache(&self, records: usize) -> Result<()> {
        self.index.resize_node_cache(records)?;
        Ok(())
    }

    /// Graph searches since open, the node reads they sent and the nodes they found in
    /// DRAM instead.
    pub fn search_counts(&self) -> SearchCounts {
        use std::sync::atomic::Ordering::Relaxed;
        SearchCounts {
            searches: self.counts.searches.load(Relaxed),
            reads: self.counts.reads.load(Relaxed),
            cache_hits: self.counts.cache_hits.load(Relaxed),
        }
    }

    pub fn deleted_count(&self) -> usize {
        self.deleted.read().unwrap_or_else(|e| e.into_inner()).len() as usize
    }

    pub fn delete(&self, offset: u32) {
        let fresh = self
            .deleted
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(offset);
        if fresh {
            self.payload_index
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .remove(offset, self.payloads.get(offset as usize));
            self.deleted_changes.fetch_add(1, Ordering::Release);
        }
    }

    pub fn add_index_field(&self, field: &str, kind: PayloadIndexKind) {
        let mut index = self
            .payload_index
            .write()
            .unwrap_or_else(|e| e.into_inner());
        index.add_field(field, kind);
        let deleted = self.deleted.read().unwrap_or_else(|e| e.into_inner());
        for (offset, p) in self.payloads.iter().enumerate() {
            if !deleted.contains(offset as u32) {
                index.insert(offset as u32, p);
            }
        }
    }

    /// The k closest live points matching `filter`, by the filter's share of the segment
    /// (from the payload indexes, or estimated on a sample of payloads):
    /// - at most `EXACT_LIMIT` matches: exact, from their vectors (read from SSD);
    /// - up to `PQ_SCAN_SHARE` of the segment: every match ranked by its code in DRAM,
    ///   the best `search_list` re-ranked by their full vectors;
    /// - broader: the graph search with the filter as a predicate (rejected points still
    ///   route it), its list widened by 1 / share so that about `search_list` matches are
    ///   met; if it still finds fewer than k, exact over the matches.
    ///
    /// This half plans, answers what needs no graph at once, and queues a graph search on
    /// the segment's search threads, so one caller can keep many queries (and segments) in
    /// flight before waiting in `finish_search`.
    ///
    /// `query` is prepared for the collection's metric (`Metric::prepare`), once for every
    /// segment a request searches, as `finish_search` takes it too.
    pub fn start_search(
        self: &Arc<Self>,
        query: &[f32],
        k: usize,
        search_list: usize,
        filter: Option<&Arc<Filter>>,
    ) -> Result<StartedSearch> {
        let len = self.len().max(1);
        let mut share = 1.0;
        if let Some(f) = filter.map(|f| f.as_ref()) {
            let planned = match self.candidates(f) {
                // Broad: no need to list the matches, the graph search checks them.
                Some(c) if c.offsets.len() as f64 <= PQ_SCAN_SHARE * len as f64 => {
                    Some(self.matching_candidates(&c, f))
                }
                Some(c) => {
                    share = c.offsets.len() as f64 / len as f64;
                    None
                }
                None => {
                    share = self.sampled_share(f);
                    (share <= PQ_SCAN_SHARE).then(|| self.matching(Some(f)))
                }
            };
            if let Some(offsets) = planned {
                share = offsets.len() as f64 / len as f64;
                if offsets.len() <= EXACT_LIMIT as usize {
                    return Ok(StartedSearch::Done(self.exact(query, &offsets, k)?));
                }
                if share <= PQ_SCAN_SHARE {
                    return Ok(StartedSearch::Done(self.pq_scan(
                        query,
                        &offsets,
                        k,
                        search_list.max(k),
                    )?));
                }
            }
        }
        let me = Arc::clone(self);
        let predicate = filter.cloned();
        let accept: Accept = Arc::new(move |id| me.matches(id as u32, predicate.as_deref()));
        let cap = limits::SEARCH_LIST.max.min(self.len().max(k));
        let widened = (search_list.max(k) as f64 / share.max(1e-3)).ceil() as usize;
        let list = widened.min(cap).max(k);
        let params = SearchParams {
            k,
            search_list: list,
            queries_per_thread: 1,
            query_prepared: true,
            ..Default::default()
        };
        let graph = match self.service() {
            Some(service) => GraphSearch::Queued(service.submit(query, &params, Some(accept))?),
            None => GraphSearch::Done(self.index.search_where(query, &params, Some(accept))),
        };
        Ok(StartedSearch::Graph {
            graph,
            k,
            filter: filter.cloned(),
        })
    }

    /// Waits for a search `start_search` queued and completes it.
    pub fn finish_search(&self, query: &[f32], started: StartedSearch) -> Result<Vec<SegmentHit>> {
        let (graph, k, filter) = match started {
            StartedSearch::Done(hits) => return Ok(hits),
            StartedSearch::Graph { graph, k, filter } => (graph, k, filter),
        };
        let found = match graph {
            GraphSearch::Queued(pending) => pending.wait()?,
            GraphSearch::Done(result) => result?,
        };
        self.counts.add(&found);
        if found.ids.len() < k && filter.is_some() {
            // The graph could not reach k matches: the filter is narrower than it looked.
            let offsets = self.matching(filter.as_deref());
            return self.exact(query, &offsets, k);
        }
        Ok(found
            .ids
            .iter()
            .zip(&found.distances)
            .map(|(&id, &distance)| SegmentHit {
                offset: id as u32,
                distance,
            })
            .collect())
    }

    /// The segment's search threads, started on first use (a segment that is never
    /// searched costs no threads).
    fn service(&self) -> Option<&SearchService> {
        let started = self.service.get_or_init(|| {
            let threads = std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
                .min(4);
            let params = SearchParams {
                queries_per_thread: QUERIES_PER_THREAD,
                ..Default::default()
            };
            SearchService::start(Arc::clone(&self.index), params, threads).map_err(|e| {
                log::warn!(
                    "{}: no search threads ({e}); graph searches run on the caller's thread",
                    self.dir.display()
                );
                e.to_string()
            })
        });
        started.as_ref().ok()
    }

    /// The share of live points matching `filter`, from `SHARE_SAMPLE` evenly spaced
    /// offsets (exact for segments that small).
    fn sampled_share(&self, filter: &Filter) -> f64 {
        let len = self.len();
        let step = (len / SHARE_SAMPLE).max(1);
        let (mut seen, mut matched) = (0usize, 0usize);
        for offset in (0..len).step_by(step) {
            seen += 1;
            matched += usize::from(self.matches(offset as u32, Some(filter)));
        }
        // One match more than seen, so a sample that met none still plans for a few.
        (matched as f64 + 1.0) / (seen as f64 + 1.0)
    }

    /// Ranks `offsets` by approximate distance (DRAM only) and re-ranks the best `rerank` by their
    /// full vectors.
    fn pq_scan(
        &self,
        query: &[f32],
        offsets: &[u32],
        k: usize,
        rerank: usize,
    ) -> Result<Vec<SegmentHit>> {
        let approx = self
            .index
            .approximate_distances_prepared(query, &node_ids(offsets))?;
        let ranked: Vec<SegmentHit> = offsets
            .iter()
            .zip(approx)
            .map(|(&offset, distance)| SegmentHit { offset, distance })
            .collect();
        let best: Vec<u32> = closest(ranked, rerank)
            .into_iter()
            .map(|h| h.offset)
            .collect();
        self.exact(query, &best, k)
    }

    /// Exact k closest among `offsets`, reading their vectors.
    fn exact(&self, q: &[f32], offsets: &[u32], k: usize) -> Result<Vec<SegmentHit>> {
        let ids = node_ids(offsets);
        let mut hits = Vec::with_capacity(offsets.len());
        self.index.fetch_vectors(&ids, |pos, v| {
            hits.push(SegmentHit {
                offset: offsets[pos],
                distance: self.metric.distance(q, v),
            })
        })?;
        Ok(closest(hits, k))
    }

    /// Stored (metric-prepared) vectors of `offsets`, in that order.
    pub fn vectors(&self, offsets: &[u32]) -> Result<Vec<Vec<f32>>> {
        let ids = node_ids(offsets);
        let mut out = vec![Vec::new(); offsets.len()];
        self.index
            .fetch_vectors(&ids, |pos, v| out[pos] = v.to_vec())?;
        Ok(out)
    }

    /// The vectors at `offsets`, with each one's out-neighbours in this segment's graph
    /// (as offsets), read together.
    pub fn vectors_and_neighbours(&self, offsets: &[u32]) -> Result<Vec<(Vec<f32>, Vec<u32>)>> {
        let ids = node_ids(offsets);
        let mut out = vec![(Vec::new(), Vec::new()); offsets.len()];
        self.index
            .fetch_vectors_and_neighbours(&ids, |pos, v, neighbours| {
                out[pos] = (
                    v.to_vec(),
                    neighbours.filter_map(|id| u32::try_from(id).ok()).collect(),
                )
            })?;
        Ok(out)
    }

    /// How the segment's searches walk its graph, for `info()`: `asked` is the
    /// collection's setting, `held` whether the search memory holds navigation data.
    pub fn navigation_state(&self, asked: bool, held: bool) -> String {
        if self.index.navigates_in_dram() {
            "in DRAM".to_string()
        } else if !asked {
            "off (the collection's setting)".to_string()
        } else if !held && self.navigation_file_bytes() > 0 {
            "off (the search memory does not hold the navigation data)".to_string()
        } else if let Some(off) = self.index.navigation_stepped_aside() {
            format!("left off by the build: {off}")
        } else {
            match self.index.navigation_problem() {
                Some(problem) => format!("none: {problem}"),
                None => "none".to_string(),
            }
        }
    }

    pub fn dram_bytes(&self) -> usize {
        self.index.dram_bytes()
            + self.ids.bytes()
            + self.payloads.bytes()
            + self
                .payload_index
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .dram_bytes()
    }

    /// Each storage path's read counters since the segment was opened.
    pub fn path_stats(&self) -> Vec<diskvec_io::PathSnapshot> {
        self.index.path_stats()
    }

    pub fn disk_bytes(&self) -> u64 {
        self.index.disk_bytes()
    }
}

/// The index's external ids of segment offsets (a sealed segment's node i has id i).
fn node_ids(offsets: &[u32]) -> Vec<i64> {
    offsets.iter().map(|&o| i64::from(o)).collect()
}
