//! The read path: searches over a snapshot of the segments, point lookups, scrolls, counts.

use std::collections::HashMap;
use std::sync::Arc;

use diskvec_index::limits;
use diskvec_vector::{check_vectors, Metric};

use super::state::Loc;
use super::{search_load, segment_share, Collection, Inner};
use crate::config::SparseModifier;
use crate::filter::Filter;
use crate::segment::{Details, FoundPoint, PendingSearch, Segment, SegmentQuery, SpaceQuery};
use crate::vectors::{NamedVectors, PointVectors, SparseVector, Vector};
use crate::{DbError, Payload, PointId, Result};

/// A search: the k closest points (after skipping `offset`), optionally filtered.
#[derive(Clone, Debug)]
pub struct SearchRequest {
    pub k: usize,
    pub filter: Option<Filter>,
    /// Search list (L) of the sealed segments' graph search; `None`: the collection's.
    pub search_list: Option<usize>,
    /// Results to skip (pagination); the search finds `offset + k`.
    pub offset: usize,
    pub with_payload: bool,
    pub with_vector: bool,
    /// Only results scoring at least this (at most, for l2, whose score is a distance).
    pub score_threshold: Option<f32>,
    /// The vector space searched, by name (`""`: the unnamed one).
    pub using: String,
    /// The points a sparse space's IDF weights are counted over (`None`: all of them):
    /// Qdrant's `params.idf.corpus`.
    pub idf_corpus: Option<Filter>,
    /// Compare the query with every matching point instead of searching the indexes
    /// (Qdrant's `params.exact`): slower, never misses.
    pub exact: bool,
}

impl SearchRequest {
    pub fn new(k: usize) -> Self {
        Self {
            k,
            filter: None,
            search_list: None,
            offset: 0,
            with_payload: false,
            with_vector: false,
            score_threshold: None,
            using: String::new(),
            idf_corpus: None,
            exact: false,
        }
    }
}

/// One search result.
#[derive(Clone, Debug, PartialEq)]
pub struct Hit {
    pub id: PointId,
    /// Qdrant's score: cosine similarity, dot product, or Euclidean distance for l2.
    pub score: f32,
    /// diskvec's distance (smaller is closer): 1 - cosine, -dot, squared Euclidean.
    pub distance: f32,
    pub version: u64,
    pub payload: Option<Payload>,
    /// Its vectors by space, when asked for.
    pub vectors: Option<NamedVectors>,
}

/// A stored point.
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    pub id: PointId,
    pub version: u64,
    pub payload: Option<Payload>,
    /// Its vectors by space, when asked for, as stored: unit length in cosine spaces.
    pub vectors: Option<NamedVectors>,
}

/// The vector in the unnamed dense space among `vectors`, if any.
fn unnamed(vectors: &Option<NamedVectors>) -> Option<&[f32]> {
    match vectors.as_ref()?.get("") {
        Some(Vector::Dense(v)) => Some(v),
        _ => None,
    }
}

impl Hit {
    /// Its vector in the unnamed dense space, when vectors were asked for.
    pub fn vector(&self) -> Option<&[f32]> {
        unnamed(&self.vectors)
    }
}

impl Record {
    /// Its vector in the unnamed dense space, when vectors were asked for.
    pub fn vector(&self) -> Option<&[f32]> {
        unnamed(&self.vectors)
    }
}

/// The user-facing score of a distance.
pub fn score_of(metric: Metric, distance: f32) -> f32 {
    match metric {
        Metric::Cosine => 1.0 - distance,
        Metric::InnerProduct => -distance,
        Metric::L2 => distance.max(0.0).sqrt(),
    }
}

/// Qdrant's inverse document frequency of a term held by `df` of `points` points:
/// ln(1 + (N - df + 0.5) / (df + 0.5)).
pub(crate) fn idf(points: u64, df: u64) -> f32 {
    let (n, df) = (points as f64, df as f64);
    (1.0 + (n - df + 0.5) / (df + 0.5)).ln() as f32
}

/// The segments as a read saw them, by id.
type Snapshot = Vec<(u64, Segment)>;

/// The k and search list each segment (by its `live` points) is asked for when the collection
/// is asked for `k` with list `list`: each segment's share of them (`segment_share`), or all of both
/// where `whole` (filtered or exact searches). Growing and frozen segments too: in DRAM a
/// longer list costs no read but costs the CPU, which is what limits 768-d searches on two
/// cores; at 500 points a second into 10M the growing segments' graph walks and linking were
/// a fifth of the process's cycles (session 46), each walked with the whole list of 200. They
/// hold the latest writes, which need not be a sample of the whole: `saturated` asks a
/// segment again with the whole k and list when all it returned ranks in the answer.
fn segment_requests(live: &[usize], k: usize, list: usize, whole: bool) -> Vec<(usize, usize)> {
    let total = live.iter().sum::<usize>().max(1) as f64;
    live.iter()
        .map(|&n| match whole {
            false => segment_share::segment_request(k, list, n as f64 / total),
            true => (k, list),
        })
        .collect()
}

/// The segments (by position) asked for fewer than `wanted` whose every hit in `found`
/// is among its `wanted` closest and who returned all they were asked for: they may hold
/// more of the answer than their share (points that did not arrive in random order, a
/// topic written at one time), so they are asked again with the whole k and list.
fn saturated(
    segments: &Snapshot,
    asked: &[(usize, usize)],
    wanted: usize,
    found: &[Found],
) -> Vec<usize> {
    let mut distances: Vec<f32> = found.iter().map(|f| f.distance).collect();
    let cut = match distances.len() > wanted {
        true => {
            *distances
                .select_nth_unstable_by(wanted - 1, f32::total_cmp)
                .1
        }
        false => f32::INFINITY,
    };
    segments
        .iter()
        .zip(asked)
        .enumerate()
        .filter(|(_, (_, &(k, _)))| k < wanted)
        .filter(|(_, ((id, _), &(k, _)))| {
            let mine = found.iter().filter(|f| f.loc.segment == *id);
            let (returned, within) = mine.fold((0, 0), |(r, w), f| {
                (r + 1, w + usize::from(f.distance.total_cmp(&cut).is_le()))
            });
            returned >= k && within == returned
        })
        .map(|(i, _)| i)
        .collect()
}

struct Found {
    distance: f32,
    id: PointId,
    version: u64,
    loc: Loc,
}

impl Found {
    /// Segment `segment`'s hit.
    fn new(segment: u64, p: FoundPoint) -> Self {
        Self {
            distance: p.hit.distance,
            id: p.id,
            version: p.version,
            loc: Loc {
                segment,
                offset: p.hit.offset,
                version: p.version,
            },
        }
    }
}

/// Queries of a batch whose sealed-segment searches are queued together: enough to keep
/// every segment's search threads busy, few enough to bound the queued copies.
const BATCH_CHUNK: usize = 256;

impl Inner {
    /// The dense space `name` names, by index, or a clear refusal.
    pub(crate) fn dense_space(&self, name: &str) -> Result<usize> {
        self.config().dense_space(name).ok_or_else(|| {
            let kind = if self.config().sparse_space(name).is_some() {
                "is a sparse space, searched with a sparse vector"
            } else {
                "is not a vector space of it"
            };
            DbError::InvalidInput(format!(
                "vector space {name:?} {kind} (collection {:?})",
                self.name
            ))
        })
    }

    /// The sparse space `name` names, by index, or a clear refusal.
    pub(crate) fn sparse_space(&self, name: &str) -> Result<usize> {
        self.config().sparse_space(name).ok_or_else(|| {
            let kind = if self.config().dense_space(name).is_some() {
                "is a dense space, searched with a dense vector"
            } else {
                "is not a sparse vector space of it"
            };
            DbError::InvalidInput(format!(
                "vector space {name:?} {kind} (collection {:?})",
                self.name
            ))
        })
    }

    pub(crate) fn check_query_dimension(&self, space: &str, dim: usize) -> Result<()> {
        let want = self.config().dense[self.dense_space(space)?].dim;
        if dim != want {
            return Err(DbError::InvalidInput(crate::config::dimension_error(
                want,
                dim,
                &format!(
                    " (query, collection {:?}{})",
                    self.name,
                    crate::config::space_suffix(space)
                ),
            )));
        }
        Ok(())
    }

    pub(crate) fn search(&self, query: &[f32], req: &SearchRequest) -> Result<Vec<Hit>> {
        self.check_query_dimension(&req.using, query.len())?;
        let mut all = self.search_batch(query, req)?;
        Ok(all.pop().unwrap_or_default())
    }

    /// Checks a request's page bounds and search list; returns the matches to find
    /// (`offset + k`) and the search list.
    fn check_request(&self, req: &SearchRequest) -> Result<(usize, usize)> {
        let wanted = req.k.saturating_add(req.offset);
        limits::K.check(req.k)?;
        if wanted > limits::K.max {
            return Err(DbError::InvalidInput(format!(
                "offset + limit must be at most {}, got {wanted}",
                limits::K.max
            )));
        }
        let search_list = req.search_list.unwrap_or(self.config().search_list);
        limits::SEARCH_LIST.check(search_list)?;
        Ok((wanted, search_list))
    }

    /// The segments as of now.
    fn snapshot(&self) -> Snapshot {
        self.snapshot_with_active().0
    }

    /// The segments as of now and, as of the same moment, which growing one is active.
    fn snapshot_with_active(&self) -> (Snapshot, u64) {
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        let segments = state
            .segments
            .iter()
            .map(|(&id, s)| (id, s.clone()))
            .collect();
        (segments, state.active)
    }

    /// Searches every row of `queries` (row-major, the dimension of the dense space
    /// `req.using`) with `req`. The sealed segments' graph searches of a chunk of queries
    /// are all queued before any is waited for, so their reads overlap on the segments'
    /// search threads.
    pub(crate) fn search_batch(
        &self,
        queries: &[f32],
        req: &SearchRequest,
    ) -> Result<Vec<Vec<Hit>>> {
        let space = self.dense_space(&req.using)?;
        let dim = self.config().dense[space].dim;
        if !queries.len().is_multiple_of(dim) {
            return Err(DbError::InvalidInput(format!(
                "queries hold {} numbers, not a whole number of rows of dimension {dim} \
                 (collection {:?}{})",
                queries.len(),
                self.name,
                crate::config::space_suffix(&req.using)
            )));
        }
        for (row, query) in queries.chunks_exact(dim).enumerate() {
            check_vectors(query, dim).map_err(|e| {
                DbError::InvalidInput(if queries.len() == dim {
                    format!("query: {e}")
                } else {
                    format!("query {row}: {e}")
                })
            })?;
        }
        let (wanted, search_list) = self.check_request(req)?;
        let filter = req.filter.clone().map(Arc::new);
        let (segments, active) = self.snapshot_with_active();
        let live: Vec<usize> = segments.iter().map(|(_, s)| s.live_points()).collect();
        let shares = segment_requests(&live, wanted, search_list, filter.is_some() || req.exact);
        let mut out = Vec::with_capacity(queries.len() / dim);
        let metric = self.config().dense[space].metric;
        for raw in queries.chunks(BATCH_CHUNK * dim) {
            // Each query is prepared for the metric once, for every segment.
            let mut chunk = raw.to_vec();
            chunk.chunks_exact_mut(dim).for_each(|q| metric.prepare(q));
            let queries = |prepared| -> Vec<SegmentQuery> {
                shares
                    .iter()
                    .map(|&(k, search_list)| SegmentQuery {
                        query: SpaceQuery::Dense { space, prepared },
                        k,
                        search_list,
                        filter: filter.as_ref(),
                        exact: req.exact,
                    })
                    .collect()
            };
            // Every segment's search is started first (sealed ones queue their graph
            // searches), then finished: the DRAM work overlaps the reads.
            let mut started = Vec::new();
            for prepared in chunk.chunks_exact(dim) {
                let asked = queries(prepared);
                let mut per_query = Vec::with_capacity(segments.len());
                for ((_, segment), q) in segments.iter().zip(&asked) {
                    per_query.push(segment.start_search(q)?);
                }
                started.push((asked, per_query));
            }
            for (asked, per_query) in started {
                let mut found = self.finish(&segments, Some(active), &asked, per_query)?;
                for i in saturated(&segments, &shares, wanted, &found) {
                    let (id, segment) = &segments[i];
                    let whole = SegmentQuery {
                        k: wanted,
                        search_list,
                        ..asked[i]
                    };
                    found.retain(|f| f.loc.segment != *id);
                    let pending = segment.start_search(&whole)?;
                    for p in segment.finish_search(&whole, pending)? {
                        found.push(Found::new(*id, p));
                    }
                }
                out.push(self.rank(&segments, found, req, |d| score_of(metric, d), metric)?);
            }
        }
        Ok(out)
    }

    /// Every segment's hits for `q`, whose searches `per_query` started (the exact ones in
    /// DRAM first, while the sealed ones' reads land).
    fn finish(
        &self,
        segments: &Snapshot,
        timed: Option<u64>,
        queries: &[SegmentQuery],
        per_query: Vec<PendingSearch>,
    ) -> Result<Vec<Found>> {
        self.search_load.note_search();
        let mut found: Vec<Found> = Vec::new();
        let mut searches: Vec<_> = segments.iter().zip(queries).zip(per_query).collect();
        searches.sort_by_key(|(_, pending)| matches!(pending, PendingSearch::Sealed(..)));
        for (((id, segment), q), pending) in searches {
            // Dense searches time what the growing segments cost them (`search_load.rs`),
            // given the active segment's id; the linking it weighs is of dense rows only.
            let timer = match (segment, timed) {
                (Segment::Growing(_), Some(active)) => Some((active, std::time::Instant::now())),
                _ => None,
            };
            for p in segment.finish_search(q, pending)? {
                found.push(Found::new(*id, p));
            }
            if let Some((active, started)) = timer {
                let kind = if *id == active {
                    search_load::Growing::Active
                } else {
                    search_load::Growing::Frozen
                };
                self.search_load.record(kind, started.elapsed());
            }
        }
        Ok(found)
    }

    /// The `req.k` best points by MaxSim with `rows` (prepared rows back to back) in the
    /// multivector space `space`.
    pub(crate) fn search_multi(
        &self,
        space: usize,
        rows: &[f32],
        req: &SearchRequest,
    ) -> Result<Vec<Hit>> {
        self.search_scored(SpaceQuery::Multi { space, rows }, req)
    }

    /// Every segment's best points for `query`, a space whose scores are "higher is
    /// better" similarities (sparse dot products, MaxSim), ranked into `req`'s page.
    fn search_scored(&self, query: SpaceQuery, req: &SearchRequest) -> Result<Vec<Hit>> {
        let (wanted, search_list) = self.check_request(req)?;
        let filter = req.filter.clone().map(Arc::new);
        let segments = self.snapshot();
        let q = SegmentQuery {
            query,
            k: wanted,
            search_list,
            filter: filter.as_ref(),
            exact: req.exact,
        };
        let mut started = Vec::with_capacity(segments.len());
        for (_, segment) in &segments {
            started.push(segment.start_search(&q)?);
        }
        let found = self.finish(&segments, None, &vec![q; segments.len()], started)?;
        // The distance is the negated score: higher is better, as for an inner product;
        // but a Euclidean multivector's score is a distance (lower is better).
        let euclidean_multi = matches!(q.query, SpaceQuery::Multi { space, .. }
            if self.config().multi[space].metric == Metric::L2);
        if euclidean_multi {
            return self.rank(
                &segments,
                found,
                req,
                |d| crate::segment::multi_l2_score(-d),
                Metric::L2,
            );
        }
        self.rank(&segments, found, req, |d| -d, Metric::InnerProduct)
    }

    /// Live points with a vector in sparse space `space`, and how many hold each of
    /// `terms`, over every segment: what an IDF weighting is computed from.
    pub(crate) fn sparse_frequencies(
        &self,
        space: usize,
        terms: &[u32],
        corpus: Option<&Filter>,
    ) -> Result<(u64, Vec<u64>)> {
        let (mut points, mut per_term) = (0u64, vec![0u64; terms.len()]);
        for (_, segment) in &self.snapshot() {
            let (n, df) = segment.sparse_frequencies(space, terms, corpus)?;
            points += n;
            per_term.iter_mut().zip(df).for_each(|(t, d)| *t += d);
        }
        Ok((points, per_term))
    }

    /// The `req.k` best points for a sparse query in the sparse space `req.using`: exact
    /// dot products (times each term's IDF when the space asks for it) over the points
    /// sharing a term with it.
    pub(crate) fn search_sparse(
        &self,
        query: SparseVector,
        req: &SearchRequest,
    ) -> Result<Vec<Hit>> {
        let space = self.sparse_space(&req.using)?;
        let mut query = query
            .checked()
            .map_err(|e| DbError::InvalidInput(format!("query: {e}")))?;
        if self.config().sparse[space].modifier == SparseModifier::Idf {
            let (points, per_term) =
                self.sparse_frequencies(space, &query.indices, req.idf_corpus.as_ref())?;
            for (value, df) in query.values.iter_mut().zip(per_term) {
                *value *= idf(points, df);
            }
        }
        let query = SpaceQuery::Sparse {
            space,
            query: &query,
        };
        self.search_scored(query, req)
    }

    /// The page `req` asks for from every segment's candidates, with its details.
    /// `score` turns a distance into the user's score; `metric` says which way scores
    /// improve (down for l2, up for the rest) for the score threshold.
    fn rank(
        &self,
        segments: &Snapshot,
        mut found: Vec<Found>,
        req: &SearchRequest,
        score: impl Fn(f32) -> f32,
        metric: Metric,
    ) -> Result<Vec<Hit>> {
        // A point being rewritten while we searched can show up in two segments: keep the
        // newer version. (A segment holds each point once, so one segment needs no check.)
        let first_segment = found.first().map(|f| f.loc.segment);
        if found.iter().any(|f| Some(f.loc.segment) != first_segment) {
            let mut newest: HashMap<PointId, u64> = HashMap::with_capacity(found.len());
            for f in &found {
                let v = newest.entry(f.id).or_insert(f.version);
                *v = (*v).max(f.version);
            }
            found.retain(|f| newest[&f.id] == f.version);
        }
        found.sort_by(|a, b| a.distance.total_cmp(&b.distance).then(a.id.cmp(&b.id)));
        let mut hits = Vec::with_capacity(req.k);
        for f in found.into_iter().skip(req.offset).take(req.k) {
            let score = score(f.distance);
            if let Some(t) = req.score_threshold {
                let passes = if metric == Metric::L2 {
                    score <= t
                } else {
                    score >= t
                };
                if !passes {
                    break;
                }
            }
            hits.push((f, score));
        }
        let locs: Vec<Loc> = hits.iter().map(|(f, _)| f.loc).collect();
        let mut details = self.details(segments, &locs, req.with_payload, req.with_vector)?;
        Ok(hits
            .into_iter()
            .zip(details.drain(..))
            .map(|((f, score), (payload, vectors))| Hit {
                id: f.id,
                score,
                distance: f.distance,
                version: f.version,
                payload,
                vectors: vectors.map(|v| self.named(v)),
            })
            .collect())
    }

    /// Stored vectors by space name.
    pub(crate) fn named(&self, v: PointVectors) -> NamedVectors {
        let mut out = NamedVectors::new();
        // A deleted space's vectors stay in segments until they are rebuilt: never shown.
        for (space, dense) in self.config().dense.iter().zip(v.dense) {
            if let (Some(d), false) = (dense, space.removed) {
                out.insert(space.name.clone(), Vector::Dense(d));
            }
        }
        for (space, sparse) in self.config().sparse.iter().zip(v.sparse) {
            if let (Some(s), false) = (sparse, space.removed) {
                out.insert(space.name.clone(), Vector::Sparse(s));
            }
        }
        for (space, multi) in self.config().multi.iter().zip(v.multi) {
            if let (Some(rows), false) = (multi, space.removed) {
                let rows = rows.chunks_exact(space.dim).map(<[f32]>::to_vec).collect();
                out.insert(space.name.clone(), Vector::Multi(rows));
            }
        }
        out
    }

    /// Payloads and vectors of points at `locs`, as asked.
    fn details(
        &self,
        segments: &[(u64, Segment)],
        locs: &[Loc],
        with_payload: bool,
        with_vector: bool,
    ) -> Result<Vec<Details>> {
        let mut out: Vec<Details> = vec![(None, None); locs.len()];
        if !with_payload && !with_vector {
            return Ok(out);
        }
        // Per segment, the positions asked of it: one call each (a sealed segment reads
        // every vector asked of it in one batch).
        let mut asked: HashMap<u64, Vec<usize>> = HashMap::new();
        for (i, loc) in locs.iter().enumerate() {
            asked.entry(loc.segment).or_default().push(i);
        }
        for (id, segment) in segments {
            let Some(positions) = asked.get(id) else {
                continue;
            };
            let offsets: Vec<u32> = positions.iter().map(|&i| locs[i].offset).collect();
            for (&i, d) in
                positions
                    .iter()
                    .zip(segment.details(&offsets, with_payload, with_vector)?)
            {
                out[i] = d;
            }
        }
        Ok(out)
    }

    /// The stored points among `ids` (unknown ids are left out), in the order asked.
    pub(crate) fn records(
        &self,
        ids: &[PointId],
        with_payload: bool,
        with_vector: bool,
    ) -> Result<Vec<Record>> {
        let (segments, found): (Snapshot, Vec<(PointId, Loc)>) = {
            let state = self.state.read().unwrap_or_else(|e| e.into_inner());
            let found = ids
                .iter()
                .filter_map(|id| state.tracker.get(id).map(|loc| (*id, loc)))
                .collect();
            let segments = state
                .segments
                .iter()
                .map(|(&id, s)| (id, s.clone()))
                .collect();
            (segments, found)
        };
        let locs: Vec<Loc> = found.iter().map(|(_, l)| *l).collect();
        let details = self.details(&segments, &locs, with_payload, with_vector)?;
        Ok(found
            .into_iter()
            .zip(details)
            .map(|((id, loc), (payload, vectors))| Record {
                id,
                version: loc.version,
                payload,
                vectors: vectors.map(|v| self.named(v)),
            })
            .collect())
    }

    /// Ids of live points matching `filter`, ascending, from `from` on, at most `limit`.
    pub(crate) fn matching_ids(
        &self,
        filter: Option<&Filter>,
        from: Option<PointId>,
        limit: usize,
    ) -> Result<Vec<PointId>> {
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        let mut out = Vec::new();
        for (id, loc) in state.tracker.range(from) {
            if out.len() >= limit {
                break;
            }
            let matches = match filter {
                None => true,
                Some(f) => state.point_matches(loc, f)?,
            };
            if matches {
                out.push(id);
            }
        }
        Ok(out)
    }
}

impl Collection {
    /// The `req.k` closest points to `query` (after `req.offset`), closest first.
    pub fn search(&self, query: &[f32], req: &SearchRequest) -> Result<Vec<Hit>> {
        self.inner.search(query, req)
    }

    /// Refuses a query of `dim` numbers unless that is the dimension of the dense space
    /// named `space` (`""`: the unnamed one).
    pub fn check_query_dimension(&self, space: &str, dim: usize) -> Result<()> {
        self.inner.check_query_dimension(space, dim)
    }

    /// The `req.k` best points for a sparse query in the sparse space `req.using`.
    pub fn search_sparse(&self, query: SparseVector, req: &SearchRequest) -> Result<Vec<Hit>> {
        self.inner.search_sparse(query, req)
    }

    /// [`search`](Self::search) for every row of `queries` (row-major, the dimension of the
    /// space `req.using`), with the sealed segments' reads of many queries in flight at
    /// once.
    pub fn search_batch(&self, queries: &[f32], req: &SearchRequest) -> Result<Vec<Vec<Hit>>> {
        self.inner.search_batch(queries, req)
    }

    /// Points by id; unknown ids are left out.
    pub fn get(
        &self,
        ids: &[PointId],
        with_payload: bool,
        with_vector: bool,
    ) -> Result<Vec<Record>> {
        self.inner.records(ids, with_payload, with_vector)
    }

    /// A page of points matching `filter` in id order, starting at `offset` (an id); also
    /// returns the id the next page starts at, if any.
    pub fn scroll(
        &self,
        filter: Option<&Filter>,
        limit: usize,
        offset: Option<PointId>,
        with_payload: bool,
        with_vector: bool,
    ) -> Result<(Vec<Record>, Option<PointId>)> {
        if limit == 0 || limit > limits::K.max {
            return Err(DbError::InvalidInput(format!(
                "limit must be between 1 and {}, got {limit}",
                limits::K.max
            )));
        }
        let mut ids = self.inner.matching_ids(filter, offset, limit + 1)?;
        let next = if ids.len() > limit { ids.pop() } else { None };
        let records = self.inner.records(&ids, with_payload, with_vector)?;
        Ok((records, next))
    }

    /// Live points matching `filter` (all live points without one).
    ///
    /// Counted segment by segment, where the payload indexes narrow the filter to their
    /// candidates (a live offset holds the one live copy of its point: a point written again
    /// is deleted where it was).
    pub fn count(&self, filter: Option<&Filter>) -> Result<usize> {
        use crate::segment::Points;
        let Some(f) = filter else {
            return Ok(self.len());
        };
        let state = self.inner.state.read().unwrap_or_else(|e| e.into_inner());
        let mut matched = 0;
        for segment in state.segments.values() {
            matched += match segment {
                Segment::Growing(g) => g
                    .read()
                    .unwrap_or_else(|e| e.into_inner())
                    .matching(Some(f))
                    .len(),
                Segment::Sealed(s) => s.checked_payloads(|| s.matching(Some(f)).len())?,
            };
        }
        Ok(matched)
    }

    /// Live points.
    pub fn len(&self) -> usize {
        self.inner
            .state
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .tracker
            .len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A growing segment of 20,000 points beside 10M sealed ones is asked its share, as a
    /// sealed one of that size is, not the whole list of 200; a filtered or exact search, or
    /// a segment holding most of the points, is asked the whole.
    #[test]
    fn every_segment_is_asked_its_share_of_k_and_the_list() {
        let shares = segment_requests(&[9_980_000, 20_000], 100, 200, false);
        assert_eq!(shares[0], (100, 200));
        let (k, list) = shares[1];
        assert!(list < 50 && k <= list, "{shares:?}");
        assert_eq!(
            segment_requests(&[9_980_000, 20_000], 100, 200, true),
            vec![(100, 200); 2]
        );
        assert_eq!(segment_requests(&[20_000], 10, 64, false), vec![(10, 64)]);
    }
}
