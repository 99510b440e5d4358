//! Segments: the growing one in DRAM that takes writes, and sealed ones whose vectors and
//! graph live on SSD as a DiskANN index. Points inside a segment are addressed by offset;
//! the collection's id tracker maps external ids to (segment, offset).

mod columns;

use columns::Columns;
mod dense_rows;
pub(crate) use dense_rows::SCAN_BELOW;
mod files;
mod growing;
mod ids;
mod multi_column;
mod payloads;
mod seal_input;
mod sealed;
mod spaces_file;
mod sparse_column;
mod sparse_postings;

use std::borrow::Cow;
use std::sync::{Arc, RwLock};

use crate::filter::{Candidates, Filter, KeyPath, PointContext, TextIndexParams};
use crate::vectors::{PointVectors, SparseVector};
use crate::{Payload, PointId};

pub(crate) use files::{read_deleted, write_deleted, POINTS_FILE};
pub(crate) use growing::Growing;
pub(crate) use multi_column::{max_sim, multi_l2_score};
pub(crate) use seal_input::{SealInput, VectorPart};
pub(crate) use sealed::{seal, NodeCacheSize, SealBuild, Sealed, SearchDram, EXACT_LIMIT};
pub(crate) use spaces_file::SPACES_FILE;

/// One of a collection's vector spaces, by its index in the config's dense list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SpaceRef {
    Dense(usize),
}

/// Matches a segment found for a query: offset and distance (smaller is closer).
#[derive(Clone, Copy, Debug)]
pub(crate) struct SegmentHit {
    pub offset: u32,
    pub distance: f32,
}

/// A segment as the collection holds it.
#[derive(Clone)]
pub(crate) enum Segment {
    /// Taking writes (the active one) or frozen, waiting to be sealed; searched exactly.
    Growing(Arc<RwLock<Growing>>),
    Sealed(Arc<Sealed>),
}

/// What filtering needs of a segment, shared by both kinds.
pub(crate) trait Points {
    fn len(&self) -> usize;
    fn is_live(&self, offset: u32) -> bool;
    /// The deleted offsets, as of now.
    fn deleted(&self) -> roaring::RoaringBitmap;
    /// The id and payload at `offset` (an empty payload where a payload on SSD could not
    /// be read, counted for `Sealed::check_payloads_since`).
    fn point(&self, offset: u32) -> (PointId, Cow<'_, Payload>);
    /// The payload indexes' candidates for `filter` (see `PayloadIndex::candidates`).
    fn candidates(&self, filter: &Filter) -> Option<Candidates>;
    /// Whether the point at `offset` has a vector in `space`.
    fn has_vector(&self, offset: u32, space: SpaceRef) -> bool;
    /// The segment's sparse and multivector spaces.
    fn columns(&self) -> &Columns;

    /// The sparse vector in `space` of the point at `offset`, if it has one.
    fn sparse_vector(&self, space: usize, offset: u32) -> Option<&SparseVector> {
        self.columns().sparse_vector(space, offset)
    }

    /// The multivector in `space` of the point at `offset`, if it has one.
    fn multi_vector(&self, space: usize, offset: u32) -> Option<&[f32]> {
        self.columns().multi_vector(space, offset)
    }

    /// The k best live points matching `filter` for a sparse query in `space` (weights
    /// already multiplied by any IDF).
    fn search_sparse(
        &self,
        space: usize,
        query: &SparseVector,
        k: usize,
        filter: Option<&Filter>,
    ) -> crate::Result<Vec<SegmentHit>> {
        self.columns()
            .search_sparse(space, query, k, &|o| self.matches(o, filter))
    }

    /// The k best live points matching `filter` by MaxSim with `rows` (prepared, back to
    /// back) in multivector space `space`.
    fn search_multi(
        &self,
        space: usize,
        rows: &[f32],
        k: usize,
        filter: Option<&Filter>,
    ) -> Vec<SegmentHit> {
        self.columns()
            .search_multi(space, rows, k, &|o| self.matches(o, filter))
    }

    /// Live points with a vector in sparse space `space` (among those `corpus` matches,
    /// when given), and how many hold each of `terms`.
    fn sparse_frequencies(
        &self,
        space: usize,
        terms: &[u32],
        corpus: Option<&Filter>,
    ) -> crate::Result<(u64, Vec<u64>)> {
        match corpus {
            // Counted from the column's totals less the deleted points, not point by point.
            None => self
                .columns()
                .sparse_frequencies_except(space, terms, &self.deleted()),
            Some(_) => self
                .columns()
                .sparse_frequencies(space, terms, &|o| self.matches(o, corpus)),
        }
    }

    /// The options of the text index of `key`, where the segment's payload indexes have one.
    fn text_index(&self, key: &KeyPath) -> Option<Arc<TextIndexParams>>;

    fn matches(&self, offset: u32, filter: Option<&Filter>) -> bool {
        self.is_live(offset)
            && filter.is_none_or(|f| {
                let (id, payload) = self.point(offset);
                let ctx = PointContext {
                    has_vector: &|name| self.has_named_vector(offset, name),
                    text_index: &|key| self.text_index(key),
                };
                f.matches_in(id, Some(&payload), &ctx)
            })
    }

    /// Whether the point at `offset` has a vector in the space named `name` (none in a
    /// space the collection does not have).
    fn has_named_vector(&self, offset: u32, name: &str) -> bool {
        use columns::NamedSpace;
        match self.columns().names().find(name) {
            Some(NamedSpace::Dense(i)) => self.has_vector(offset, SpaceRef::Dense(i)),
            Some(NamedSpace::Sparse(i)) => self.sparse_vector(i, offset).is_some(),
            Some(NamedSpace::Multi(i)) => self.multi_vector(i, offset).is_some(),
            None => false,
        }
    }

    /// Live offsets among the candidates that match (all live ones when the indexes
    /// answered exactly).
    fn matching_candidates(&self, c: &Candidates, filter: &Filter) -> Vec<u32> {
        c.offsets
            .iter()
            .filter(|&o| {
                if c.exact {
                    self.is_live(o)
                } else {
                    self.matches(o, Some(filter))
                }
            })
            .collect()
    }

    /// Live offsets matching `filter`, ascending.
    fn matching(&self, filter: Option<&Filter>) -> Vec<u32> {
        if let Some(f) = filter {
            if let Some(c) = self.candidates(f) {
                return self.matching_candidates(&c, f);
            }
        }
        (0..self.len() as u32)
            .filter(|&o| self.matches(o, filter))
            .collect()
    }

    /// The candidates of a filter the indexes narrow to at most `EXACT_LIMIT` points:
    /// those are searched exactly instead of through a graph.
    fn few_candidates(&self, filter: Option<&Filter>) -> Option<Vec<u32>> {
        let f = filter?;
        let c = self
            .candidates(f)
            .filter(|c| c.offsets.len() <= EXACT_LIMIT)?;
        Some(self.matching_candidates(&c, f))
    }
}

/// Keeps the `k` closest hits, closest first (ties by offset, so answers are repeatable).
pub(crate) fn closest(mut hits: Vec<SegmentHit>, k: usize) -> Vec<SegmentHit> {
    hits.sort_by(|a, b| {
        a.distance
            .total_cmp(&b.distance)
            .then(a.offset.cmp(&b.offset))
    });
    hits.truncate(k);
    hits
}

/// A point's payload and vectors, each when asked for.
pub(crate) type Details = (Option<Payload>, Option<PointVectors>);

/// One segment's search between `Segment::start_search` and `Segment::finish_search`.
pub(crate) enum PendingSearch {
    /// A sealed segment's, queued on its search threads (or answered at once), with the
    /// payload damage mark taken before it (`Sealed::payload_damage_mark`).
    Sealed(sealed::StartedSearch, u64),
    /// A growing segment's, run exactly in `finish_search`, under its lock.
    Growing,
}

/// A segment's hit with the id and version stored at its offset.
pub(crate) struct FoundPoint {
    pub hit: SegmentHit,
    pub id: PointId,
    pub version: u64,
}

/// A query vector in one space, as every segment is asked it.
#[derive(Clone, Copy)]
pub(crate) enum SpaceQuery<'a> {
    /// Prepared for the dense space's metric.
    Dense { space: usize, prepared: &'a [f32] },
    /// Sorted, its weights multiplied by any IDF.
    Sparse {
        space: usize,
        query: &'a SparseVector,
    },
    /// Rows back to back, each prepared for the space's metric.
    Multi { space: usize, rows: &'a [f32] },
}

/// What a search asks of every segment: a query in one space, the matches wanted, the
/// graph's search list, the filter.
#[derive(Clone, Copy)]
pub(crate) struct SegmentQuery<'a> {
    pub query: SpaceQuery<'a>,
    pub k: usize,
    pub search_list: usize,
    pub filter: Option<&'a Arc<Filter>>,
    /// Every matching point compared, no graph searched.
    pub exact: bool,
}

/// The read side every segment answers the same way, so the collection's searcher has one
/// loop over its segments instead of one per kind.
impl Segment {
    /// Points not deleted: what the segment's share of a collection is counted in.
    pub fn live_points(&self) -> usize {
        match self {
            Segment::Growing(g) => g.read().unwrap_or_else(|e| e.into_inner()).live(),
            Segment::Sealed(s) => s.len().saturating_sub(s.deleted_count()),
        }
    }

    /// Starts a search: a sealed segment queues its graph search, so that many segments'
    /// (and many queries') reads overlap; a growing one waits for `finish_search`.
    pub fn start_search(&self, q: &SegmentQuery) -> crate::Result<PendingSearch> {
        Ok(match (self, q.query) {
            (Segment::Sealed(s), SpaceQuery::Dense { space, prepared }) => {
                let mark = s.payload_damage_mark();
                PendingSearch::Sealed(
                    s.start_search(space, prepared, q.k, q.search_list, q.filter, q.exact)?,
                    mark,
                )
            }
            _ => PendingSearch::Growing,
        })
    }

    /// Finishes a search `start_search` began: its hits, closest first.
    pub fn finish_search(
        &self,
        q: &SegmentQuery,
        pending: PendingSearch,
    ) -> crate::Result<Vec<FoundPoint>> {
        let filter = q.filter.map(|f| &**f);
        match (self, pending) {
            (Segment::Sealed(s), pending) => {
                // Dense searches ran their filter since `start_search`; the others run here.
                let mark = match &pending {
                    PendingSearch::Sealed(_, mark) => *mark,
                    PendingSearch::Growing => s.payload_damage_mark(),
                };
                let hits = match (q.query, pending) {
                    (SpaceQuery::Dense { prepared, .. }, PendingSearch::Sealed(started, _)) => {
                        s.finish_search(prepared, started)?
                    }
                    (SpaceQuery::Sparse { space, query }, _) => {
                        s.search_sparse(space, query, q.k, filter)?
                    }
                    (SpaceQuery::Multi { space, rows }, _) => {
                        s.search_multi(space, rows, q.k, filter)
                    }
                    (SpaceQuery::Dense { .. }, PendingSearch::Growing) => {
                        unreachable!("a sealed segment's dense search is started as one")
                    }
                };
                s.check_payloads_since(mark)?;
                Ok(hits
                    .into_iter()
                    .map(|hit| FoundPoint {
                        hit,
                        id: s.id(hit.offset),
                        version: s.versions[hit.offset as usize],
                    })
                    .collect())
            }
            (Segment::Growing(g), _) => {
                let g = g.read().unwrap_or_else(|e| e.into_inner());
                let hits = match q.query {
                    SpaceQuery::Dense { space, prepared } => {
                        g.search_dense(space, prepared, q.k, q.search_list, filter, q.exact)
                    }
                    SpaceQuery::Sparse { space, query } => {
                        g.search_sparse(space, query, q.k, filter)?
                    }
                    SpaceQuery::Multi { space, rows } => g.search_multi(space, rows, q.k, filter),
                };
                Ok(hits
                    .into_iter()
                    .map(|hit| FoundPoint {
                        hit,
                        id: g.ids[hit.offset as usize],
                        version: g.versions[hit.offset as usize],
                    })
                    .collect())
            }
        }
    }

    /// Live points with a vector in sparse space `space`, and how many of them hold each of
    /// `terms` (what an IDF weighting sums over the segments).
    pub fn sparse_frequencies(
        &self,
        space: usize,
        terms: &[u32],
        corpus: Option<&Filter>,
    ) -> crate::Result<(u64, Vec<u64>)> {
        match self {
            Segment::Growing(g) => g
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .sparse_frequencies(space, terms, corpus),
            Segment::Sealed(s) => {
                s.checked_payloads(|| s.sparse_frequencies(space, terms, corpus))?
            }
        }
    }

    /// The payloads at `offsets`, and their vectors when asked for (a sealed segment reads
    /// them from its nodes, all in one batch).
    pub fn details(
        &self,
        offsets: &[u32],
        with_payload: bool,
        with_vector: bool,
    ) -> crate::Result<Vec<Details>> {
        match self {
            Segment::Growing(g) => {
                let g = g.read().unwrap_or_else(|e| e.into_inner());
                Ok(offsets
                    .iter()
                    .map(|&o| {
                        (
                            with_payload.then(|| g.payloads[o as usize].clone()),
                            with_vector.then(|| g.vectors(o)),
                        )
                    })
                    .collect())
            }
            Segment::Sealed(s) => {
                let mut vectors = if with_vector {
                    s.vectors(offsets)?.into_iter().map(Some).collect()
                } else {
                    vec![None; offsets.len()]
                };
                offsets
                    .iter()
                    .zip(vectors.iter_mut())
                    .map(|(&o, v)| {
                        let payload = match with_payload {
                            true => Some(s.payload(o)?.into_owned()),
                            false => None,
                        };
                        Ok((payload, v.take()))
                    })
                    .collect()
            }
        }
    }
}
