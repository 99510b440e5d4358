//! A sealed segment: a DiskANN index per dense space of a frozen growing segment (a node's
//! external id is its point's offset; points without a vector in the space are left out of
//! its index), the sparse spaces' vectors and the points' ids, versions and payloads in
//! DRAM, and a deleted bitmap. Only the bitmap changes after sealing; an update of a sealed
//! point writes a new version into the growing segment and deletes this one.

use std::borrow::Cow;
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

use super::columns::Columns;
use super::files::{read_points, write_points, POINTS_FILE};
use super::payloads::PayloadPlacement;
use super::spaces_file::SpacesFile;
use super::sparse_postings::DiskPostings;
use super::{closest, Points, SealInput, SegmentHit, SpaceRef};
use crate::config::{CollectionConfig, DenseSpace};
use crate::filter::{Candidates, Filter, PayloadIndex, PayloadIndexKind};
use crate::vectors::PointVectors;
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
        space: usize,
        graph: GraphSearch,
        k: usize,
        filter: Option<Arc<Filter>>,
    },
}

pub(crate) enum GraphSearch {
    Queued(PendingSearch),
    Done(diskvec_index::Result<SearchResult>),
}

/// The DiskANN index of one dense space of a sealed segment.
struct DenseIndex {
    dir: PathBuf,
    metric: Metric,
    index: Arc<DiskIndex>,
    /// The index's search threads, started at its first graph search; `Err` (e.g. no
    /// read engine could be set up) sends graph searches to the caller's thread instead.
    service: OnceLock<std::result::Result<SearchService, String>>,
    counts: Counts,
}

/// Where dense space `space`'s index of the segment in `dir` lies: space 0 in the segment's
/// directory (where the one space of a segment sealed before named spaces lies), the others
/// in `dense.<space>/` inside it. Likewise for the segment's directories on the storage
/// paths.
pub(crate) fn space_dir(dir: &Path, space: usize) -> PathBuf {
    if space == 0 {
        dir.to_path_buf()
    } else {
        dir.join(format!("dense.{space}"))
    }
}

pub(crate) struct Sealed {
    pub dir: PathBuf,
    /// One per dense space of the collection: `None` when no point of the segment has a
    /// vector in it.
    dense: Vec<Option<DenseIndex>>,
    /// The sparse and multivector spaces.
    columns: Columns,
    ids: super::ids::IdColumn,
    pub versions: Vec<u64>,
    payloads: super::payloads::PayloadColumn,
    pub deleted: RwLock<RoaringBitmap>,
    /// Bumped at every delete; the manifest writer compares it to what it last wrote.
    pub deleted_changes: AtomicU64,
    pub payload_index: RwLock<PayloadIndex>,
}

/// Graph searches of one sealed segment and what they read.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
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
    /// Per dense space, the codebook to encode with, if any.
    pub codebooks: Vec<Option<Arc<diskvec_index::diskann::Codebook>>>,
    /// Where a build in shards keeps its finished shards (`BuildParams::checkpoint`).
    pub checkpoint: PathBuf,
}

/// Builds the DiskANN index of every dense space of `input` that has points, one after the
/// other, then its spaces file and points file, into `dir` as `how` says; returns each
/// space's build report (with the codebook its codes were made with), `None` for a space
/// without points.
pub(crate) fn seal(
    storage: &Arc<dyn crate::storage::Storage>,
    input: &SealInput,
    dir: &Path,
    config: &CollectionConfig,
    paths: &[PathBuf],
    how: SealBuild,
    progress: &dyn diskvec_index::Progress,
) -> Result<Vec<Option<diskvec_index::diskann::BuildReport>>> {
    crate::storage::create_dir_all_durable(storage.as_ref(), dir)
        .map_err(crate::error::file_error(dir))?;
    if !input.rows_match() {
        return Err(crate::DbError::Unavailable(format!(
            "internal error: a build of {} points was given vectors for another number",
            input.len()
        )));
    }
    // A space deleted from the collection is built empty: its vectors go. The input may
    // have fewer spaces than the config (one added while it was gathered), never more.
    let removed_dense = |i: usize| config.dense.get(i).is_none_or(|s| s.removed);
    let removed_sparse = |i: usize| config.sparse.get(i).is_none_or(|s| s.removed);
    let removed_multi = |i: usize| config.multi.get(i).is_none_or(|s| s.removed);
    let mut reports = Vec::with_capacity(input.dense.len());
    for (i, space) in config.dense.iter().enumerate().take(input.dense.len()) {
        if input.dense[i].offsets.is_empty() || space.removed {
            reports.push(None);
            continue;
        }
        let index_dir = space_dir(dir, i);
        crate::storage::create_dir_all_durable(storage.as_ref(), &index_dir)
            .map_err(crate::error::file_error(&index_dir))?;
        let space_paths: Vec<PathBuf> = paths.iter().map(|p| space_dir(p, i)).collect();
        for p in &space_paths {
            crate::storage::create_dir_all_durable(storage.as_ref(), p)
                .map_err(crate::error::file_error(p))?;
        }
        let params = diskvec_index::diskann::BuildParams {
            codebook: how.codebooks.get(i).cloned().flatten(),
            checkpoint: Some(space_dir(&how.checkpoint, i)),
            storage: Arc::clone(storage),
            ..config.build_params(space, &space_paths, input.dense[i].offsets.len())
        };
        let report = crate::background::run_build(how.priority, || {
            build_from(
                &mut input.source(i),
                &params,
                MemoryBudget::Bytes(how.budget),
                &index_dir,
                progress,
            )
        })?;
        reports.push(Some(report));
    }
    let spaces = SpacesFile {
        dense_present: input
            .dense
            .iter()
            .enumerate()
            .map(|(i, s)| match removed_dense(i) {
                true => RoaringBitmap::new(),
                false => s.offsets.iter().copied().collect(),
            })
            .collect(),
        sparse: (input.sparse.iter().enumerate())
            .map(|(i, c)| match removed_sparse(i) {
                true => vec![None; c.len()],
                false => c.clone(),
            })
            .collect(),
        multi: (input.multi.iter().enumerate())
            .map(|(i, c)| match removed_multi(i) {
                true => vec![None; c.len()],
                false => c.clone(),
            })
            .collect(),
    };
    spaces.write(storage.as_ref(), dir)?;
    // Spaces whose index is on disk get their posting lists in a file of their own.
    for (i, vectors) in spaces.sparse.iter().enumerate() {
        if config
            .sparse
            .get(i)
            .is_some_and(|s| s.on_disk == Some(true) && !s.removed)
        {
            super::sparse_postings::write(storage.as_ref(), dir, i, vectors)?;
        }
    }
    write_points(
        storage.as_ref(),
        &dir.join(POINTS_FILE),
        &input.ids,
        &input.versions,
        &input.payloads.json(),
    )?;
    Ok(reports)
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

    fn deleted(&self) -> RoaringBitmap {
        self.deleted
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn point(&self, offset: u32) -> (PointId, Cow<'_, Payload>) {
        (
            self.ids.get(offset as usize),
            self.payloads.get_or_empty(offset as usize),
        )
    }

    fn text_index(
        &self,
        key: &crate::filter::KeyPath,
    ) -> Option<Arc<crate::filter::TextIndexParams>> {
        self.payload_index
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .text_params(key)
    }

    fn columns(&self) -> &Columns {
        &self.columns
    }

    fn candidates(&self, filter: &Filter) -> Option<Candidates> {
        self.payload_index
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .candidates(filter, self.len() as u32)
    }

    fn has_vector(&self, offset: u32, space: SpaceRef) -> bool {
        match space {
            SpaceRef::Dense(i) => self
                .dense_index(i)
                .is_some_and(|d| d.index.node_of(i64::from(offset)).is_some()),
        }
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
    /// Opens a sealed segment of a collection with `config`'s spaces, holding `cache` of
    /// its node records in DRAM, as `memory` says: whether it loads its navigation files
    /// when it has them (`CollectionConfig::navigation`), and steers by its compact codes.
    #[allow(clippy::too_many_arguments)]
    pub fn open(
        storage: &Arc<dyn crate::storage::Storage>,
        dir: &Path,
        config: &CollectionConfig,
        deleted: RoaringBitmap,
        fields: &[(String, PayloadIndexKind)],
        cache: NodeCacheSize,
        memory: SearchDram,
    ) -> Result<Self> {
        let mut payload_index = PayloadIndex::new();
        for (field, kind) in fields {
            payload_index.add_field(field, kind.clone());
        }
        let placement = match config.on_disk_payload {
            true => PayloadPlacement::Disk,
            false => PayloadPlacement::Dram,
        };
        let super::files::PointsFile {
            ids,
            versions,
            payloads,
        } = read_points(&dir.join(POINTS_FILE), placement, &mut |offset, p| {
            if !deleted.contains(offset) {
                payload_index.insert(offset, p);
            }
        })?;
        let corrupt = |message: String| crate::DbError::Corrupt {
            path: dir.to_path_buf(),
            message,
        };
        // A segment sealed before named spaces has every point in dense space 0 alone.
        let spaces = SpacesFile::read(dir)?.unwrap_or_else(|| SpacesFile {
            dense_present: vec![(0..ids.len() as u32).collect()],
            ..SpacesFile::default()
        });
        if spaces.dense_present.len() > config.dense.len()
            || spaces.sparse.len() > config.sparse.len()
            || spaces.multi.len() > config.multi.len()
        {
            return Err(corrupt(format!(
                "the segment has {} dense, {} sparse and {} multivector spaces, the \
                 collection {}, {} and {}",
                spaces.dense_present.len(),
                spaces.sparse.len(),
                spaces.multi.len(),
                config.dense.len(),
                config.sparse.len(),
                config.multi.len()
            )));
        }
        let listed = spaces
            .sparse
            .iter()
            .map(Vec::len)
            .chain(spaces.multi.iter().map(Vec::len));
        if let Some(n) = listed.into_iter().find(|&n| n != ids.len()) {
            return Err(corrupt(format!(
                "a space lists {n} points, {POINTS_FILE} {}",
                ids.len()
            )));
        }
        for (space, column) in config.multi.iter().zip(&spaces.multi) {
            if let Some(rows) = column.iter().flatten().find(|r| r.len() % space.dim != 0) {
                return Err(corrupt(format!(
                    "a multivector of {} numbers in space {:?} of dimension {}",
                    rows.len(),
                    space.name,
                    space.dim
                )));
            }
        }
        let mut dense = Vec::with_capacity(config.dense.len());
        for (i, space) in config.dense.iter().enumerate() {
            let present = spaces.dense_present.get(i);
            // A deleted space's index is not opened: nothing reads it.
            match present.filter(|p| !p.is_empty() && !space.removed) {
                None => dense.push(None),
                Some(present) => {
                    let index = Self::open_index(storage, dir, i, space, cache, memory)?;
                    if present.len() != index.index.len() as u64
                        || present.max().is_some_and(|m| m as usize >= ids.len())
                    {
                        return Err(corrupt(format!(
                            "dense space {i} lists {} points, its index {}",
                            present.len(),
                            index.index.len()
                        )));
                    }
                    dense.push(Some(index));
                }
            }
        }
        let on_ssd = (0..spaces.sparse.len())
            .map(|i| DiskPostings::open(dir, i))
            .collect::<Result<Vec<_>>>()?;
        let columns = Columns::stored(config, spaces.sparse, spaces.multi, on_ssd, ids.len());
        Ok(Self {
            dir: dir.to_path_buf(),
            dense,
            columns,
            ids,
            versions,
            payloads,
            deleted: RwLock::new(deleted),
            deleted_changes: AtomicU64::new(0),
            payload_index: RwLock::new(payload_index),
        })
    }

    fn open_index(
        storage: &Arc<dyn crate::storage::Storage>,
        dir: &Path,
        space: usize,
        config: &DenseSpace,
        cache: NodeCacheSize,
        memory: SearchDram,
    ) -> Result<DenseIndex> {
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
        let index_dir = space_dir(dir, space);
        let index = DiskIndex::open(&index_dir, &options)?;
        if index.metric() != config.metric || index.dim() != config.dim {
            return Err(crate::DbError::Corrupt {
                path: index_dir,
                message: format!(
                    "the index holds {}-d {} vectors, the space {}-d {}",
                    index.dim(),
                    index.metric().name(),
                    config.dim,
                    config.metric.name()
                ),
            });
        }
        if let NodeCacheSize::Share(share) = cache {
            if share > 0.0 {
                index.resize_node_cache((index.len() as f64 * share) as usize)?;
            }
        }
        Ok(DenseIndex {
            dir: index_dir,
            metric: config.metric,
            index: Arc::new(index),
            service: OnceLock::new(),
            counts: Counts::default(),
        })
    }

    /// The indexes of the dense spaces the segment's points have vectors in.
    fn indexes(&self) -> impl Iterator<Item = &DenseIndex> {
        self.dense.iter().flatten()
    }

    fn dense_index(&self, space: usize) -> Option<&DenseIndex> {
        self.dense.get(space).and_then(Option::as_ref)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The id of the point at `offset`.
    pub fn id(&self, offset: u32) -> PointId {
        self.ids.get(offset as usize)
    }

    /// The payload of the point at `offset` (read from SSD when they are kept there).
    pub fn payload(&self, offset: u32) -> Result<Cow<'_, Payload>> {
        self.payloads.get(offset as usize)
    }

    /// A mark of the damaged payload reads `Points::point` has met (taken as empty), taken
    /// before a request that filters points by yes or no.
    pub fn payload_damage_mark(&self) -> u64 {
        self.payloads.damage_mark()
    }

    /// An error if `Points::point` met a damaged payload since `mark`: checked before
    /// answering.
    pub fn check_payloads_since(&self, mark: u64) -> Result<()> {
        self.payloads.check_since(mark)
    }

    /// `read` (which filters this segment's points by yes or no), failed if it met a
    /// damaged payload.
    pub fn checked_payloads<T>(&self, read: impl FnOnce() -> T) -> Result<T> {
        let mark = self.payload_damage_mark();
        let value = read();
        self.check_payloads_since(mark)?;
        Ok(value)
    }

    /// Whether its payloads are left on SSD (`on_disk_payload` when it was opened).
    pub fn payloads_on_ssd(&self) -> bool {
        self.payloads.on_ssd()
    }

    /// Whether its walks are steered by the compact code sets.
    pub fn uses_compact_codes(&self) -> bool {
        self.indexes().any(|d| d.index.uses_compact_codes())
    }

    /// Bytes of PQ codes it holds in DRAM (full or compact), all spaces together.
    pub fn code_bytes_held(&self) -> usize {
        self.indexes().map(|d| d.index.code_bytes_held()).sum()
    }

    /// Bytes of the segment's navigation files (what loading them would take), loaded or
    /// not.
    pub fn navigation_file_bytes(&self) -> u64 {
        crate::collection::navigation_file_bytes(&self.dir)
    }

    /// Bytes of the navigation data held in DRAM (0 without it).
    pub fn navigation_bytes(&self) -> usize {
        self.indexes()
            .filter_map(|d| d.index.navigation())
            .map(diskvec_index::diskann::Navigation::dram_bytes)
            .sum()
    }

    /// Bytes of all its node records: what holding every one in DRAM takes.
    pub fn all_node_bytes(&self) -> u64 {
        self.indexes()
            .map(|d| d.index.len() as u64 * d.index.node_record_bytes() as u64)
            .sum()
    }

    /// Bytes of the dense vectors it holds, all spaces together.
    pub fn raw_vector_bytes(&self) -> u64 {
        self.indexes()
            .map(|d| d.index.len() as u64 * d.index.dim() as u64 * 4)
            .sum()
    }

    pub fn node_cache_bytes(&self) -> usize {
        self.indexes().map(|d| d.index.node_cache_bytes()).sum()
    }

    pub fn cached_nodes(&self) -> usize {
        self.indexes().map(|d| d.index.cached_nodes()).sum()
    }

    /// Whether holding `share` of its node records grows a cache (rather than shrinks).
    pub fn cache_grows_to(&self, share: f64) -> bool {
        self.indexes()
            .any(|d| (d.index.len() as f64 * share) as usize >= d.index.node_cache_room())
    }

    /// Holds `share` of each index's node records in DRAM from now on (searches running
    /// keep theirs).
    pub fn resize_node_cache(&self, share: f64) -> Result<()> {
        for d in self.indexes() {
            d.index
                .resize_node_cache((d.index.len() as f64 * share) as usize)?;
        }
        Ok(())
    }

    /// Graph searches since open, the node reads they sent and the nodes they found in
    /// DRAM instead, all spaces together.
    pub fn search_counts(&self) -> SearchCounts {
        use std::sync::atomic::Ordering::Relaxed;
        let mut total = SearchCounts::default();
        for d in self.indexes() {
            total.searches += d.counts.searches.load(Relaxed);
            total.reads += d.counts.reads.load(Relaxed);
            total.cache_hits += d.counts.cache_hits.load(Relaxed);
        }
        total
    }

    /// Follows the collection's spaces after one was added or deleted: a sealed segment
    /// has no vector in an added space, and keeps a deleted one's until it is rebuilt, only
    /// no longer under its name.
    pub fn follow_spaces(&self, config: &CollectionConfig) {
        self.columns.rename(config);
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
            // Read only when an index holds the point (a payload on SSD is read and parsed);
            // one that cannot be read stays in the indexes, and `is_live` still keeps the
            // point out of every answer.
            let mut index = self
                .payload_index
                .write()
                .unwrap_or_else(|e| e.into_inner());
            if !index.fields.is_empty() {
                if let Ok(payload) = self.payloads.get(offset as usize) {
                    index.remove(offset, &payload);
                }
            }
            drop(index);
            self.deleted_changes.fetch_add(1, Ordering::Release);
        }
    }

    /// The index of `field` as `kind` over the live points, built aside (the segment's
    /// indexes are not touched: a payload that cannot be read changes nothing).
    pub fn build_index_field(&self, field: &str, kind: PayloadIndexKind) -> Result<PayloadIndex> {
        let mut index = PayloadIndex::new();
        index.add_field(field, kind);
        let deleted = self.deleted.read().unwrap_or_else(|e| e.into_inner());
        for offset in 0..self.payloads.len() {
            if !deleted.contains(offset as u32) {
                index.insert(offset as u32, &*self.payloads.get(offset)?);
            }
        }
        Ok(index)
    }

    /// Takes `field`'s index built by `build_index_field` into the segment's indexes.
    pub fn install_index_field(&self, field: &str, built: PayloadIndex) {
        self.payload_index
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .take_field_from(field, built);
    }

    /// The k closest live points matching `filter` to a dense query in `space`, by the
    /// filter's share of the segment (from the payload indexes, or estimated on a sample
    /// of payloads):
    /// - `exact` asked for: every match, from its vector (read from SSD);
    /// - at most `EXACT_LIMIT` matches: exact, from their vectors (read from SSD);
    /// - up to `PQ_SCAN_SHARE` of the segment: every match ranked by its code in DRAM,
    ///   the best `search_list` re-ranked by their full vectors;
    /// - broader: the graph search with the filter as a predicate (rejected points still
    ///   route it), its list widened by 1 / share so that about `search_list` matches are
    ///   met; if it still finds fewer than k, exact over the matches.
    ///
    /// Points without a vector in the space are in no index and never found. This half
    /// plans, answers what needs no graph at once, and queues a graph search on the
    /// index's search threads, so one caller can keep many queries (and segments) in
    /// flight before waiting in `finish_search`.
    ///
    /// `query` is prepared for the space's metric (`Metric::prepare`), once for every
    /// segment a request searches, as `finish_search` takes it too.
    pub fn start_search(
        self: &Arc<Self>,
        space: usize,
        query: &[f32],
        k: usize,
        search_list: usize,
        filter: Option<&Arc<Filter>>,
        exact: bool,
    ) -> Result<StartedSearch> {
        let Some(dense) = self.dense_index(space) else {
            return Ok(StartedSearch::Done(Vec::new()));
        };
        if exact {
            let hits = self.exact_over_matches(dense, query, filter.map(|f| &**f), k)?;
            return Ok(StartedSearch::Done(hits));
        }
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
            if let Some(mut offsets) = planned {
                share = offsets.len() as f64 / len as f64;
                offsets.retain(|&o| dense.index.node_of(i64::from(o)).is_some());
                if offsets.len() <= EXACT_LIMIT as usize {
                    return Ok(StartedSearch::Done(dense.exact(query, &offsets, k)?));
                }
                if share <= PQ_SCAN_SHARE {
                    return Ok(StartedSearch::Done(dense.pq_scan(
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
        let cap = limits::SEARCH_LIST.max.min(dense.index.len().max(k));
        let widened = (search_list.max(k) as f64 / share.max(1e-3)).ceil() as usize;
        let list = widened.min(cap).max(k);
        let params = SearchParams {
            k,
            search_list: list,
            queries_per_thread: 1,
            query_prepared: true,
            ..Default::default()
        };
        let graph = match dense.service() {
            Some(service) => GraphSearch::Queued(service.submit(query, &params, Some(accept))?),
            None => GraphSearch::Done(dense.index.search_where(query, &params, Some(accept))),
        };
        Ok(StartedSearch::Graph {
            space,
            graph,
            k,
            filter: filter.cloned(),
        })
    }

    /// Waits for a search `start_search` queued and completes it.
    pub fn finish_search(&self, query: &[f32], started: StartedSearch) -> Result<Vec<SegmentHit>> {
        let (space, graph, k, filter) = match started {
            StartedSearch::Done(hits) => return Ok(hits),
            StartedSearch::Graph {
                space,
                graph,
                k,
                filter,
            } => (space, graph, k, filter),
        };
        let dense = self
            .dense_index(space)
            .expect("a graph search is started on an index");
        let found = match graph {
            GraphSearch::Queued(pending) => pending.wait()?,
            GraphSearch::Done(result) => result?,
        };
        dense.counts.add(&found);
        if found.ids.len() < k && filter.is_some() {
            // The graph could not reach k matches: the filter is narrower than it looked.
            return self.exact_over_matches(dense, query, filter.as_deref(), k);
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

    /// The exact k closest of every live match of `filter` in `dense`'s index, their full
    /// vectors read from SSD in one batch.
    fn exact_over_matches(
        &self,
        dense: &DenseIndex,
        query: &[f32],
        filter: Option<&Filter>,
        k: usize,
    ) -> Result<Vec<SegmentHit>> {
        let mut offsets = self.matching(filter);
        offsets.retain(|&o| dense.index.node_of(i64::from(o)).is_some());
        dense.exact(query, &offsets, k)
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

    /// The vectors of the points at `offsets`, in that order (dense ones read from the
    /// indexes, all of each space's in one batch).
    pub fn vectors(&self, offsets: &[u32]) -> Result<Vec<PointVectors>> {
        let mut out: Vec<PointVectors> = offsets
            .iter()
            .map(|&o| {
                let (sparse, multi) = self.columns.at(o);
                PointVectors {
                    dense: vec![None; self.dense.len()],
                    sparse,
                    multi,
                }
            })
            .collect();
        for (space, dense) in self.dense.iter().enumerate() {
            let Some(dense) = dense else { continue };
            let (positions, ids): (Vec<usize>, Vec<i64>) = offsets
                .iter()
                .enumerate()
                .filter(|(_, &o)| dense.index.node_of(i64::from(o)).is_some())
                .map(|(pos, &o)| (pos, i64::from(o)))
                .unzip();
            dense.index.fetch_vectors(&ids, |at, v| {
                out[positions[at]].dense[space] = Some(v.to_vec());
            })?;
        }
        Ok(out)
    }

    /// The vectors at `offsets` in dense space `space` (all of them must have one), with
    /// each one's out-neighbours in that space's graph (as offsets), read together.
    pub fn vectors_and_neighbours(
        &self,
        space: usize,
        offsets: &[u32],
    ) -> Result<Vec<(Vec<f32>, Vec<u32>)>> {
        let Some(dense) = self.dense_index(space) else {
            return Err(crate::DbError::Unavailable(format!(
                "internal error: segment {} has no index of dense space {space}",
                self.dir.display()
            )));
        };
        let ids = node_ids(offsets);
        let mut out = vec![(Vec::new(), Vec::new()); offsets.len()];
        dense
            .index
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
        let Some(dense) = self.indexes().next() else {
            return "none (no dense vectors)".to_string();
        };
        if dense.index.navigates_in_dram() {
            "in DRAM".to_string()
        } else if !asked {
            "off (the collection's setting)".to_string()
        } else if !held && self.navigation_file_bytes() > 0 {
            "off (the search memory does not hold the navigation data)".to_string()
        } else if let Some(off) = dense.index.navigation_stepped_aside() {
            format!("left off by the build: {off}")
        } else {
            match dense.index.navigation_problem() {
                Some(problem) => format!("none: {problem}"),
                None => "none".to_string(),
            }
        }
    }

    pub fn dram_bytes(&self) -> usize {
        self.indexes().map(|d| d.index.dram_bytes()).sum::<usize>()
            + self.columns.dram_bytes()
            + self.ids.bytes()
            + self.payloads.bytes()
            + self
                .payload_index
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .dram_bytes()
    }

    /// Each storage path's read counters since the segment was opened, one list per
    /// space's index.
    pub fn path_stats(&self) -> Vec<Vec<diskvec_io::PathSnapshot>> {
        self.indexes().map(|d| d.index.path_stats()).collect()
    }

    pub fn disk_bytes(&self) -> u64 {
        self.indexes().map(|d| d.index.disk_bytes()).sum()
    }
}

impl DenseIndex {
    /// The index's search threads, started on first use (an index that is never searched
    /// costs no threads).
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

    /// Ranks `offsets` by approximate distance (DRAM only) and re-ranks the best `rerank`
    /// by their full vectors.
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

    /// Exact k closest among `offsets` (all in the index), reading their vectors.
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
}

/// The index's external ids of segment offsets (a sealed segment's node i has id i).
fn node_ids(offsets: &[u32]) -> Vec<i64> {
    offsets.iter().map(|&o| i64::from(o)).collect()
}
