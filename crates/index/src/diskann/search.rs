//! The query path: best-first search over the on-disk graph, steered by PQ distances held
//! in DRAM, re-ranked by the full vectors of the sectors it reads.
//!
//! Each thread drives several queries at once over one read engine. A query keeps up to
//! `beam_width` reads in flight and issues the next one as soon as any returns, and while
//! one query waits on the device the thread computes for the others, so the device sees
//! `queries_per_thread * beam_width` reads per thread instead of one beam at a time.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use diskvec_graph::{Neighbors, Scorer};
use diskvec_io::{EngineKind, ReadDone, ReadEngine};
use diskvec_vector::{check_vectors, PqTable, Rows, Sq4Query};

use super::layout::NodeRecord;
use super::nav::{Navigation, WalkCodes};
use super::node_cache::NodeCache;
use super::query_buffers::{BandEntry, QueryBuffers};
use super::DiskIndex;
use crate::limits;
use crate::SearchResult;
use crate::{IndexError, Result};

/// Parameters of a search.
#[derive(Clone, Copy, Debug)]
pub struct SearchParams {
    /// Results per query, 1 to `limits::K.max`.
    pub k: usize,
    /// L: candidate-list size; larger is slower and more accurate. Raised to `k` if below
    /// (`limits::check_search_params` returns the value used). 1 to `limits::SEARCH_LIST.max`.
    pub search_list: usize,
    /// W: reads one query keeps in flight, 1 to `limits::BEAM_WIDTH.max`; twice that
    /// while it is the only query running on the index, if `lone_query_widens`.
    pub beam_width: usize,
    /// A query alone on the index keeps `LONE_BEAM_FACTOR` times `beam_width` reads in
    /// flight (true, the default). False keeps `beam_width` whatever else runs: a query
    /// then reads the same nodes in the same order however many run beside it.
    pub lone_query_widens: bool,
    /// Queries one thread interleaves (1 = one query at a time, as DiskANN does), 1 to
    /// `limits::QUERIES_PER_THREAD.max`.
    pub queries_per_thread: usize,
    /// Start from the entry nodes closest to the query (by PQ distance) as well as the medoid.
    pub entry_set: bool,
    /// With navigation (`OpenOptions::navigation`): how sure a 4-bit estimate must be to
    /// decide a candidate unread, in standard deviations (σ) of the estimate's error.
    /// Candidates estimated more than 2·sigmas·σ closer than the k-th are returned unread,
    /// with their estimate as distance; those that much farther are dropped unread; the
    /// rest are read and re-ranked by their full vectors. `inf` reads every candidate.
    /// Ignored without navigation.
    pub rerank_sigmas: f32,
    /// With navigation: read the surely-in candidates too, so that every returned distance
    /// is exact (true, the default). False returns their 4-bit estimates instead and saves
    /// those reads; the ids that come back are almost always the same (the recheck's k-th
    /// distance and the final order can differ). Ignored without navigation.
    pub exact_distances: bool,
    /// The query is already prepared for the index's metric (`Metric::prepare`: unit
    /// length for cosine), as a database that searches one query over many segments
    /// prepares it once; false prepares a copy.
    pub query_prepared: bool,
}

/// Measured (docs/benchmarks.md): on the 1M synthetic set 1.0 capped recall@10 at 0.991
/// where 1.5 reaches 0.998 (the graph search 0.999); at k=100, 1.5 costs 1.1-1.3x the reads
/// of 1.0 when surely-in candidates keep their estimates, and almost nothing more with exact
/// distances (k reads dominate). 1.0 is the cheaper setting where recall 0.99 suffices.
pub const DEFAULT_RERANK_SIGMAS: f32 = 1.5;

/// The recheck of dropped candidates against the exact k-th distance looks this many
/// standard deviations further than the band did: a true neighbour near the k-th whose
/// estimate erred by more than `rerank_sigmas` is otherwise lost for good (at 1.0, one in
/// six of those), which capped recall@10 below the graph search's on the 1M synthetic set.
const RECHECK_EXTRA_SIGMAS: f32 = 1.0;

/// How much wider a query's beam is while no other query runs on the index: one client's
/// query is bound by the device's latency, not its throughput. Measured on 1M x 768 with no
/// node cache (docs/benchmarks.md, session 19): a wider beam alone gained 15-19% QPS at one
/// client (k=10 L=50, k=100 L=200) for 5-19% more reads, and lost up to 11% at four clients
/// (k=10), where the device is the limit; so only a lone query widens.
pub(crate) const LONE_BEAM_FACTOR: usize = 2;

/// The reads an engine serving `params` must take in flight at once: a query that widened
/// its beam while alone keeps those reads in flight when others start beside it.
pub(crate) fn engine_depth(params: &SearchParams) -> usize {
    (params.queries_per_thread + LONE_BEAM_FACTOR - 1) * params.beam_width
}

/// A query counted among those running on an index while it lives.
struct Running(Arc<AtomicUsize>);

impl Running {
    fn start(count: &Arc<AtomicUsize>) -> Self {
        count.fetch_add(1, Ordering::Relaxed);
        Running(Arc::clone(count))
    }

    fn alone(&self) -> bool {
        self.0.load(Ordering::Relaxed) <= 1
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Default for SearchParams {
    fn default() -> Self {
        Self {
            k: 10,
            search_list: 100,
            beam_width: 4,
            lone_query_widens: true,
            queries_per_thread: 16,
            entry_set: true,
            rerank_sigmas: DEFAULT_RERANK_SIGMAS,
            exact_distances: true,
            query_prepared: false,
        }
    }
}

/// Which results a query may return, by external id. Rejected nodes still route the search
/// (a deleted point, or one a filter excludes, is a good stepping stone to its neighbours);
/// they are only kept out of the answer.
pub type Accept = Arc<dyn Fn(i64) -> bool + Send + Sync>;

/// Totals of a batch.
#[derive(Clone, Debug)]
pub struct BatchStats {
    pub seconds: f64,
    pub engine: EngineKind,
    /// The most reads one thread had in flight at once.
    pub max_in_flight: usize,
}

/// What one search thread returns: its (query index, result) pairs, the most reads it had
/// in flight, and its engine.
type WorkerOutcome = Result<(Vec<(usize, Result<SearchResult>)>, usize, EngineKind)>;

struct Query {
    index: usize,
    params: SearchParams,
    accept: Option<Accept>,
    vector: Vec<f32>,
    /// PQ table, candidate list, visited set and re-rank pool, from the index's pool.
    b: QueryBuffers,
    in_flight: usize,
    /// Navigation only: the graph walk is over and the band is chosen.
    walked: bool,
    /// Navigation only: the next band entry to read.
    next_band: usize,
    /// Navigation only: candidates estimated above this were dropped unread.
    dropped_above: f32,
    /// Navigation only: the dropped candidates were checked against the exact k-th.
    rechecked: bool,
    /// The first failed read of this query: it sends no more reads, waits for those in
    /// flight, and then reports this error instead of an answer.
    failed: Option<IndexError>,
    result: SearchResult,
    started: Instant,
    /// The node cache as it stood when the query started (a resize does not change it
    /// under a running query).
    cache: Arc<NodeCache>,
    running: Running,
}

impl Query {
    /// Reads this query keeps in flight now.
    fn beam(&self) -> usize {
        if self.params.lone_query_widens && self.running.alone() {
            LONE_BEAM_FACTOR * self.params.beam_width
        } else {
            self.params.beam_width
        }
    }
}

/// Reusable buffers of one worker.
#[derive(Default)]
struct Scratch {
    vector: Vec<f32>,
    record: Vec<u8>,
    /// A measured record copied out of the node cache.
    cached: Vec<u8>,
    /// The in-range neighbours of the record being expanded.
    neighbours: Vec<u32>,
    /// Distances known exactly, for the recheck's k-th.
    distances: Vec<f32>,
}

/// Distances by PQ code: the walk's, without navigation or where the build chose them.
struct PqScorer<'a> {
    table: &'a PqTable,
    codes: &'a [u8],
    code_bytes: usize,
}

impl Scorer for PqScorer<'_> {
    #[inline]
    fn distance(&self, id: u32) -> f32 {
        let m = self.code_bytes;
        self.table
            .distance(&self.codes[id as usize * m..(id as usize + 1) * m])
    }

    /// Every code is asked for before any is scored, so their cache misses overlap; then
    /// eight at a time.
    #[inline]
    fn distances(&self, ids: &[u32], out: &mut Vec<f32>) {
        let m = self.code_bytes;
        for &id in ids {
            PqTable::prefetch(&self.codes[id as usize * m..(id as usize + 1) * m]);
        }
        out.clear();
        out.resize(ids.len(), 0.0);
        self.table.distances(self.codes, ids, out);
    }
}

/// Distances by the navigation file's 4-bit codes.
struct EstimateScorer<'a> {
    nav: &'a Navigation,
    query: &'a Sq4Query,
}

impl Scorer for EstimateScorer<'_> {
    #[inline]
    fn distance(&self, id: u32) -> f32 {
        let (code, norm) = Navigation::split(self.nav.record(id));
        self.query.distance(code, norm)
    }

    #[inline]
    fn distances(&self, ids: &[u32], out: &mut Vec<f32>) {
        for &id in ids {
            diskvec_vector::prefetch(self.nav.record(id), usize::MAX);
        }
        out.clear();
        out.extend(ids.iter().map(|&id| self.distance(id)));
    }
}

/// The navigation file's neighbour lists.
struct NavNeighbors<'a>(&'a Navigation);

impl Neighbors for NavNeighbors<'_> {
    #[inline]
    fn neighbors_into(&self, id: u32, out: &mut Vec<u32>) {
        out.extend_from_slice(self.0.neighbors(id));
    }
}

impl DiskIndex {
    pub(crate) fn check_params(&self, p: &SearchParams) -> Result<SearchParams> {
        limits::check_search_params(p)
    }

    /// Refuses queries of another dimension and non-finite values.
    pub(crate) fn check_queries(&self, data: &[f32], dim: usize) -> Result<()> {
        if dim != self.dim() {
            return Err(IndexError::DimensionMismatch {
                expected: self.dim(),
                got: dim,
            });
        }
        check_vectors(data, dim)?;
        Ok(())
    }

    /// Searches one query.
    pub fn search(&self, query: &[f32], params: &SearchParams) -> Result<SearchResult> {
        self.search_where(query, params, None)
    }

    /// Searches one query, returning only ids `accept` takes (all when `None`). Fewer than
    /// k come back when fewer accepted ids were among the nodes the search reached; a
    /// caller wanting k raises the search list and asks again.
    pub fn search_where(
        &self,
        query: &[f32],
        params: &SearchParams,
        accept: Option<Accept>,
    ) -> Result<SearchResult> {
        let p = SearchParams {
            queries_per_thread: 1,
            ..*params
        };
        let (mut results, _) =
            self.search_batch_where(Rows::new(query, query.len().max(1)), &p, 1, accept)?;
        Ok(results.pop().unwrap_or_default())
    }

    /// Searches every row of `queries` with `threads` threads; results are in query order.
    pub fn search_batch(
        &self,
        queries: Rows,
        params: &SearchParams,
        threads: usize,
    ) -> Result<(Vec<SearchResult>, BatchStats)> {
        self.search_batch_where(queries, params, threads, None)
    }

    /// `search_batch` returning only ids `accept` takes (see `search_where`).
    pub fn search_batch_where(
        &self,
        queries: Rows,
        params: &SearchParams,
        threads: usize,
        accept: Option<Accept>,
    ) -> Result<(Vec<SearchResult>, BatchStats)> {
        let params = self.check_params(params)?;
        self.check_queries(queries.data(), queries.dim())?;
        limits::THREADS.check(threads)?;
        let threads = threads.min(queries.len().max(1));
        let next = AtomicUsize::new(0);
        let start = Instant::now();
        let depth = engine_depth(&params);
        let work = || -> WorkerOutcome {
            let mut engine = self.take_engine(depth)?;
            let out = self.run_worker(queries, &params, accept.clone(), &next, engine.as_mut());
            let max = engine.stats().max_in_flight;
            let kind = engine.kind();
            self.return_engine(engine);
            out.map(|o| (o, max, kind))
        };
        let panicked = || IndexError::InvalidArgument("a search thread panicked".into());
        let outcomes: Vec<WorkerOutcome> = if threads == 1 {
            // One worker runs on the caller's thread: a single query (the database's case)
            // should not pay for starting a thread.
            vec![std::panic::catch_unwind(std::panic::AssertUnwindSafe(work))
                .unwrap_or_else(|_| Err(panicked()))]
        } else {
            std::thread::scope(|s| {
                let workers: Vec<_> = (0..threads).map(|_| s.spawn(work)).collect();
                workers
                    .into_iter()
                    .map(|w| w.join().unwrap_or_else(|_| Err(panicked())))
                    .collect()
            })
        };
        let mut results = vec![SearchResult::default(); queries.len()];
        let mut max_in_flight = 0;
        let mut engine = EngineKind::Pread;
        for outcome in outcomes {
            let (done, max, kind) = outcome?;
            max_in_flight = max_in_flight.max(max);
            engine = kind;
            for (i, r) in done {
                results[i] = r.map_err(|e| IndexError::SearchFailed(format!("query {i}: {e}")))?;
            }
        }
        let stats = BatchStats {
            seconds: start.elapsed().as_secs_f64(),
            engine,
            max_in_flight,
        };
        Ok((results, stats))
    }

    fn start_query(
        &self,
        index: usize,
        mut vector: Vec<f32>,
        params: SearchParams,
        accept: Option<Accept>,
    ) -> Query {
        if !params.query_prepared {
            self.header.metric.prepare(&mut vector);
        }
        let mut b = self.buffers.take(params.search_list);
        if let Some(nav) = &self.nav {
            nav.sq.query_into(&vector, self.header.metric, &mut b.sq);
        }
        if let Some(pq) = self.meta.pq.as_ref().filter(|_| self.walks_by_pq()) {
            pq.table_into(&vector, &mut b.table);
        }
        let mut q = Query {
            index,
            params,
            accept,
            vector,
            b,
            in_flight: 0,
            walked: false,
            next_band: 0,
            dropped_above: f32::INFINITY,
            rechecked: false,
            failed: None,
            result: SearchResult::default(),
            started: Instant::now(),
            cache: self.node_cache(),
            running: Running::start(&self.queries_running),
        };
        let medoid = self.header.medoid;
        let d = self.first_distance(&q.b, medoid);
        q.b.walk.enter(medoid, d, None);
        if params.entry_set && !self.meta.entries.is_empty() {
            // Only the best `search_list` entries can enter the list, so rank all of them
            // first and insert just those; the rest stay unvisited and may be found later.
            let mut scored: Vec<(f32, u32)> = self
                .meta
                .entries
                .iter()
                .filter(|&&e| e != medoid)
                .map(|&e| (self.first_distance(&q.b, e), e))
                .collect();
            let keep = params.search_list.min(scored.len());
            if keep < scored.len() {
                scored.select_nth_unstable_by(keep, |a, b| a.0.total_cmp(&b.0));
                scored.truncate(keep);
            }
            for (d, e) in scored {
                q.b.walk.enter(e, d, None);
            }
        }
        q
    }

    /// Whether PQ distances steer the walk (no navigation, or the build chose PQ for it).
    #[inline]
    fn walks_by_pq(&self) -> bool {
        self.sq4_walk().is_none()
    }

    /// The 4-bit estimate of a node's distance (navigation only).
    #[inline]
    fn estimate(nav: &Navigation, b: &QueryBuffers, id: u32) -> f32 {
        let (code, norm) = Navigation::split(nav.record(id));
        b.sq.distance(code, norm)
    }

    /// The distance that steers the walk.
    #[inline]
    fn first_distance(&self, b: &QueryBuffers, id: u32) -> f32 {
        match self.sq4_walk() {
            Some(nav) => Self::estimate(nav, b, id),
            None => b.table.distance(self.code(id)),
        }
    }

    #[inline]
    fn code(&self, id: u32) -> &[u8] {
        let m = self.code_bytes;
        &self.meta.codes[id as usize * m..(id as usize + 1) * m]
    }

    /// The exact distance from the query to a node's full vector.
    #[inline]
    fn exact_distance(&self, q: &Query, record: &NodeRecord, scratch: &mut Scratch) -> f32 {
        let vector = record.vector(&mut scratch.vector);
        self.header.metric.distance(&q.vector, vector)
    }

    /// Takes in a node's record: its exact distance joins the re-rank pool, its
    /// neighbours join the candidate list by PQ distance (the search's shared expand step).
    fn expand(&self, q: &mut Query, id: u32, record: &NodeRecord, scratch: &mut Scratch) {
        let d = self.exact_distance(q, record, scratch);
        q.b.exact.push((d, id));
        scratch.neighbours.clear();
        // Ids read from the device are checked, not trusted.
        scratch.neighbours.extend(
            record
                .neighbors()
                .filter(|&nb| (nb as u64) < self.header.count),
        );
        let scorer = PqScorer {
            table: &q.b.table,
            codes: &self.meta.codes,
            code_bytes: self.code_bytes,
        };
        q.b.walk.offer_unseen(&scratch.neighbours, &scorer, None);
    }

    /// Expands cached nodes and sends reads until the query has `beam_width` in flight
    /// or nothing left to expand. Returns true when the query is finished (answered, or
    /// failed with no read of its own still in flight).
    fn advance(
        &self,
        q: &mut Query,
        slot: usize,
        engine: &mut dyn ReadEngine,
        scratch: &mut Scratch,
    ) -> bool {
        if let Some(nav) = &self.nav {
            return self.advance_in_dram(nav, q, slot, engine, scratch);
        }
        let cache = Arc::clone(&q.cache);
        let mut copy = std::mem::take(&mut scratch.cached);
        while q.failed.is_none() && q.in_flight < q.beam() {
            let Some(pos) = q.b.walk.list.next_unexpanded() else {
                break;
            };
            q.b.walk.list.mark_expanded(pos);
            let id = q.b.walk.list.items()[pos].id;
            if let Some(record) = cache.record(id, &mut copy) {
                q.result.cache_hits += 1;
                self.expand(q, id, &record, scratch);
                continue;
            }
            self.submit_read(q, slot, engine, id);
        }
        scratch.cached = copy;
        q.in_flight == 0
    }

    /// `advance` with navigation: walks the whole graph in DRAM at once (no reads), picks
    /// the band of candidates the estimates cannot decide, then reads those, `beam_width`
    /// at a time.
    fn advance_in_dram(
        &self,
        nav: &Navigation,
        q: &mut Query,
        slot: usize,
        engine: &mut dyn ReadEngine,
        scratch: &mut Scratch,
    ) -> bool {
        if !q.walked {
            let b = &mut q.b;
            b.scored.clear();
            // Every node the walk expands stays a candidate, even once closer ones push it
            // off the list (as the exact pool keeps them without navigation).
            let scored = &mut b.scored;
            let keep = |c: diskvec_graph::Candidate| scored.push((c.distance, c.id));
            let graph = NavNeighbors(nav);
            match nav.walk {
                WalkCodes::Pq => {
                    let scorer = PqScorer {
                        table: &b.table,
                        codes: &self.meta.codes,
                        code_bytes: self.code_bytes,
                    };
                    b.walk.run(&graph, &scorer, None, keep);
                }
                _ => {
                    let scorer = EstimateScorer { nav, query: &b.sq };
                    b.walk.run(&graph, &scorer, None, keep);
                }
            }
            q.walked = true;
            self.choose_band(nav, q);
        }
        loop {
            self.read_band(q, slot, engine, scratch);
            let band_done = q.in_flight == 0 && q.next_band == q.b.band.len();
            if !band_done || q.rechecked || q.failed.is_some() {
                break;
            }
            q.rechecked = true;
            self.recheck_dropped(q, scratch);
        }
        q.in_flight == 0
    }

    /// Once the band is re-ranked, the k-th distance is known far better than the k-th
    /// estimate was (that one is the smallest of many noisy values, biased low where the
    /// codes resolve the data poorly): any dropped candidate whose estimate minus its error
    /// margin is below it joins the band after all. Reads only shrink the k-th distance,
    /// so one check suffices.
    fn recheck_dropped(&self, q: &mut Query, scratch: &mut Scratch) {
        if !q.dropped_above.is_finite() {
            return;
        }
        // The worker's distance buffer is free between expansions: no allocation per query.
        let known = &mut scratch.distances;
        known.clear();
        known.extend(q.b.exact.iter().chain(&q.b.sure).map(|e| e.0));
        let k = q.params.k;
        if known.len() < k {
            return;
        }
        let kth = *known.select_nth_unstable_by(k - 1, |a, b| a.total_cmp(b)).1;
        let z_sigma = (q.params.rerank_sigmas + RECHECK_EXTRA_SIGMAS) * q.b.sq.sigma();
        let (dropped_above, band, exact) = (q.dropped_above, &mut q.b.band, &q.b.exact);
        band.extend(
            q.b.scored
                .iter()
                .filter(|&&(est, _)| est > dropped_above && est - z_sigma <= kth)
                // A sector mate of a read may have its exact distance already.
                .filter(|&&(_, id)| !exact.iter().any(|e| e.1 == id))
                .map(|&(_, id)| BandEntry { id, done: false }),
        );
    }

    /// Sends reads for band entries (or scores cached ones) until `beam_width` are in
    /// flight or the band is exhausted.
    fn read_band(
        &self,
        q: &mut Query,
        slot: usize,
        engine: &mut dyn ReadEngine,
        scratch: &mut Scratch,
    ) {
        let cache = Arc::clone(&q.cache);
        let mut copy = std::mem::take(&mut scratch.cached);
        while q.failed.is_none() && q.in_flight < q.beam() && q.next_band < q.b.band.len() {
            let at = q.next_band;
            q.next_band += 1;
            let entry = &mut q.b.band[at];
            if entry.done {
                continue;
            }
            entry.done = true;
            let id = entry.id;
            if let Some(record) = cache.record(id, &mut copy) {
                q.result.cache_hits += 1;
                let d = self.exact_distance(q, &record, scratch);
                q.b.exact.push((d, id));
                continue;
            }
            self.submit_read(q, slot, engine, id);
        }
        scratch.cached = copy;
    }

    /// Sends the read of node `id`'s sector(s) for query `q` (tagged with its slot); a
    /// refused submission fails the query.
    fn submit_read(&self, q: &mut Query, slot: usize, engine: &mut dyn ReadEngine, id: u32) {
        match engine.submit(
            self.layout.offset_of(id),
            self.layout.read_bytes(),
            (slot as u64) << 32 | id as u64,
        ) {
            Ok(_) => {
                q.in_flight += 1;
                q.result.reads += 1;
            }
            Err(e) => q.failed = Some(e.into()),
        }
    }

    /// Sorts the walked candidates the query accepts into surely in (kept unread with their
    /// estimates), surely out (dropped), and the band between, to read and re-rank: the
    /// boundary is the k-th accepted estimate, the margin 2·sigmas·σ on either side of it.
    /// Surely-in nodes whose records are in DRAM join the band: their exact distances cost
    /// no read, and then a fully cached index returns exact distances only.
    fn choose_band(&self, nav: &Navigation, q: &mut Query) {
        let accept = q.accept.as_ref();
        // (estimate, node) of the accepted expanded nodes, closest first.
        let mut scored = std::mem::take(&mut q.b.scored);
        scored.retain(|&(_, id)| accept.is_none_or(|a| a(self.external_id(id))));
        if nav.walk == WalkCodes::Pq {
            for entry in scored.iter_mut() {
                entry.0 = Self::estimate(nav, &q.b, entry.1);
            }
        }
        scored.sort_by(diskvec_graph::by_distance);
        let boundary = scored.get(q.params.k - 1).map(|c| c.0);
        let margin = 2.0 * q.params.rerank_sigmas * q.b.sq.sigma();
        // Nothing is decided unread where the codes resolve the data poorly (the build
        // measured it: most candidates then lie within the margin of the k-th, and one in
        // ~15 of them past it), where every candidate is asked for (infinite sigmas), or
        // where the margin is not a number (infinity times the zero error of a zero query).
        let margin =
            if !nav.codes_decide() || q.params.rerank_sigmas.is_infinite() || !margin.is_finite() {
                f32::INFINITY
            } else {
                margin
            };
        q.dropped_above = boundary.map_or(f32::INFINITY, |t| t + margin);
        let (mut band, mut sure) = (std::mem::take(&mut q.b.band), std::mem::take(&mut q.b.sure));
        for &(distance, id) in &scored {
            let certain_in = match boundary {
                _ if margin.is_infinite() => false,
                None => true,
                Some(t) if distance < t - margin => true,
                Some(t) if distance > t + margin => continue,
                Some(_) => false,
            };
            // A node in DRAM costs no read: its exact distance is better than a sure guess.
            if certain_in && !q.params.exact_distances && !q.cache.contains(id) {
                sure.push((distance, id));
            } else {
                band.push(BandEntry { id, done: false });
            }
        }
        q.b.band = band;
        q.b.sure = sure;
        q.b.scored = scored;
    }

    /// Handles one finished read (the volume has checked its sectors): expands the node,
    /// and expands for free any node sharing its sector that the query wants next. With
    /// navigation it only re-ranks: the node, and band members sharing its sector.
    fn read_done(&self, q: &mut Query, id: u32, data: &[u8], scratch: &mut Scratch) {
        let mut record_buf = std::mem::take(&mut scratch.record);
        if self.nav.is_some() {
            for mate in self.layout.sector_mates(id, self.len()) {
                // A mate the query accepted and has no exact distance for gets one free:
                // a band member is then not read, a surely-in one not returned by its
                // estimate, a dropped one not read again if the recheck wants it.
                if mate != id {
                    let wanted = q.b.scored.iter().any(|e| e.1 == mate)
                        && !q.b.exact.iter().any(|e| e.1 == mate);
                    if !wanted {
                        continue;
                    }
                    if let Some(entry) = q.b.band.iter_mut().find(|e| e.id == mate) {
                        entry.done = true;
                    }
                    q.b.sure.retain(|e| e.1 != mate);
                    q.result.free_expansions += 1;
                }
                let record = self.layout.record(data, mate, &mut record_buf);
                let d = self.exact_distance(q, &record, scratch);
                q.cache.offer(mate, record.bytes());
                q.b.exact.push((d, mate));
            }
            scratch.record = record_buf;
            return;
        }
        let record = self.layout.record(data, id, &mut record_buf);
        q.cache.offer(id, record.bytes());
        self.expand(q, id, &record, scratch);
        for mate in self.layout.sector_mates(id, self.len()) {
            if mate == id {
                continue;
            }
            if let Some(pos) =
                q.b.walk
                    .list
                    .items()
                    .iter()
                    .position(|c| c.id == mate && !c.expanded)
            {
                q.b.walk.list.mark_expanded(pos);
                q.result.free_expansions += 1;
                let record = self.layout.record(data, mate, &mut record_buf);
                // Held, it would cost a read next time: the walk expands it only because
                // it came with this one.
                q.cache.offer(mate, record.bytes());
                self.expand(q, mate, &record, scratch);
            }
        }
        scratch.record = record_buf;
    }

    fn finish(&self, mut q: Query) -> (usize, SearchResult) {
        let sure = std::mem::take(&mut q.b.sure);
        q.b.exact.extend_from_slice(&sure);
        q.b.sure = sure;
        q.b.exact.sort_by(diskvec_graph::by_distance);
        q.b.exact.dedup_by_key(|e| e.1);
        let accepted =
            q.b.exact
                .iter()
                .filter(|&&(_, id)| q.accept.as_ref().is_none_or(|a| a(self.external_id(id))));
        for &(d, id) in accepted.take(q.params.k) {
            q.result.ids.push(self.external_id(id));
            q.result.distances.push(d);
        }
        q.result.latency_us = q.started.elapsed().as_secs_f64() * 1e6;
        self.buffers.give_back(q.b);
        (q.index, q.result)
    }

    fn run_worker(
        &self,
        queries: Rows,
        params: &SearchParams,
        accept: Option<Accept>,
        next: &AtomicUsize,
        engine: &mut dyn ReadEngine,
    ) -> Result<Vec<(usize, Result<SearchResult>)>> {
        let mut feed = BatchFeed {
            queries,
            params: *params,
            accept,
            next,
            out: Vec::new(),
        };
        self.serve(&mut feed, params, engine)?;
        Ok(feed.out)
    }

    /// Runs queries from `feed` on one engine, up to `queries_per_thread` at a time, until
    /// the feed closes. A failed read fails only the query it was for; every read that
    /// lands is released, whatever its query's state. Only an error of the engine itself
    /// (its ring cannot be waited on) ends the loop: the engine is then drained so it can
    /// be reused, and the queries that were active are lost (the feed is told through the
    /// error).
    pub(crate) fn serve(
        &self,
        feed: &mut dyn QueryFeed,
        params: &SearchParams,
        engine: &mut dyn ReadEngine,
    ) -> Result<()> {
        let mut active: Vec<Option<Query>> = (0..params.queries_per_thread).map(|_| None).collect();
        let mut done: Vec<ReadDone> = Vec::new();
        let mut scratch = Scratch::default();
        let mut closed = false;
        let result = (|| loop {
            for slot in 0..active.len() {
                loop {
                    if active[slot].is_none() {
                        if closed {
                            break;
                        }
                        let idle = active.iter().all(Option::is_none);
                        match feed.next(idle) {
                            Fetch::Query(query) => {
                                // A query's own beam may not exceed the one the engine
                                // was sized for.
                                let own = SearchParams {
                                    beam_width: query.params.beam_width.min(params.beam_width),
                                    ..query.params
                                };
                                active[slot] = Some(self.start_query(
                                    query.tag,
                                    query.vector,
                                    own,
                                    query.accept,
                                ))
                            }
                            Fetch::Empty => break,
                            Fetch::Closed => {
                                closed = true;
                                break;
                            }
                        }
                    }
                    let q = active[slot].as_mut().expect("an active query");
                    if self.advance(q, slot, engine, &mut scratch) {
                        let mut q = active[slot].take().expect("an active query");
                        match q.failed.take() {
                            Some(e) => feed.deliver(q.index, Err(e)),
                            None => {
                                let (i, r) = self.finish(q);
                                feed.deliver(i, Ok(r));
                            }
                        }
                        continue;
                    }
                    break;
                }
            }
            let idle = active.iter().all(Option::is_none);
            if closed && idle {
                return Ok(());
            }
            if idle {
                continue;
            }
            done.clear();
            engine.complete(1, &mut done)?;
            for d in done.drain(..) {
                let slot = (d.tag >> 32) as usize;
                let id = d.tag as u32;
                match active.get_mut(slot).and_then(Option::as_mut) {
                    Some(q) => {
                        q.in_flight -= 1;
                        match d.result {
                            Ok(()) if q.failed.is_none() => self.read_done(
                                q,
                                id,
                                &engine.buffer(d.slot)[..self.layout.read_bytes()],
                                &mut scratch,
                            ),
                            Ok(()) => {}
                            Err(e) => {
                                if q.failed.is_none() {
                                    q.failed = Some(e.into());
                                }
                            }
                        }
                    }
                    None => debug_assert!(false, "a read for a finished query"),
                }
                engine.release(d.slot);
            }
        })();
        if result.is_err() {
            drain(engine);
        }
        result
    }
}

/// One query handed to a search worker: the caller's tag, the raw vector, its own
/// (checked) parameters and result filter.
pub(crate) struct QueryRequest {
    pub tag: usize,
    pub vector: Vec<f32>,
    pub params: SearchParams,
    pub accept: Option<Accept>,
}

/// What a search worker gets when it asks for the next query.
pub(crate) enum Fetch {
    Query(QueryRequest),
    /// None waiting now; more may come.
    Empty,
    /// No more will come.
    Closed,
}

/// Where a search worker takes queries from and hands answers to.
pub(crate) trait QueryFeed {
    /// The next query; `wait` is true when the worker has nothing else to do and may block.
    fn next(&mut self, wait: bool) -> Fetch;
    fn deliver(&mut self, tag: usize, result: Result<SearchResult>);
}

/// A fixed batch shared by several workers, each taking the next unclaimed row.
struct BatchFeed<'a> {
    queries: Rows<'a>,
    params: SearchParams,
    accept: Option<Accept>,
    next: &'a AtomicUsize,
    out: Vec<(usize, Result<SearchResult>)>,
}

impl QueryFeed for BatchFeed<'_> {
    fn next(&mut self, _wait: bool) -> Fetch {
        let i = self.next.fetch_add(1, Ordering::Relaxed);
        if i >= self.queries.len() {
            return Fetch::Closed;
        }
        Fetch::Query(QueryRequest {
            tag: i,
            vector: self.queries.get(i as u32).to_vec(),
            params: self.params,
            accept: self.accept.clone(),
        })
    }

    fn deliver(&mut self, tag: usize, result: Result<SearchResult>) {
        self.out.push((tag, result));
    }
}

/// After an error, waits out the reads still in flight so the engine can be reused.
pub(crate) fn drain(engine: &mut dyn ReadEngine) {
    let mut done = Vec::new();
    while engine.in_flight() > 0 {
        done.clear();
        if engine.complete(1, &mut done).is_err() {
            break;
        }
        for d in &done {
            engine.release(d.slot);
        }
    }
}
