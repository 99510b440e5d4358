//! Runs a query tree over a collection. A leaf with a nearest query uses the segments'
//! indexes (graph or exact, as a search would); every other leaf scores the matching
//! points that have a vector in its space one by one (exact, a scan), and an inner node
//! re-scores or fuses its prefetches' candidates.

use std::collections::{HashMap, HashSet};

use diskvec_index::limits;
use diskvec_vector::{check_vectors, Metric};
use rand::seq::SliceRandom;

use super::{Collection, Hit, Inner, SearchRequest};
use crate::config::SparseModifier;
use crate::filter::Filter;
use crate::query::formula::Formula;
use crate::query::score;
use crate::query::{Fusion, OrderValue, Query, QueryRequest, RecommendStrategy, VectorInput};
use crate::vectors::{SparseVector, Vector};
use crate::{DbError, PointId, Result};

/// A node's answer: points with scores, best first. `ascending`: lower scores are better
/// (a nearest search in a Euclidean space, whose score is the distance). `ordered`: the
/// order is the answer (an order-by, a sample) and scores are 0.
struct Ranked {
    points: Vec<(PointId, f32)>,
    ascending: bool,
    ordered: bool,
}

impl Ranked {
    fn descending(points: Vec<(PointId, f32)>) -> Self {
        Self {
            points,
            ascending: false,
            ordered: false,
        }
    }

    fn in_order(ids: Vec<PointId>) -> Self {
        Self {
            points: ids.into_iter().map(|id| (id, 0.0)).collect(),
            ascending: false,
            ordered: true,
        }
    }

    /// Best first (ties by id; an ordered answer keeps its order), at most `limit`, and
    /// only those passing `threshold`.
    fn finish(mut self, limit: usize, threshold: Option<f32>) -> Self {
        let asc = self.ascending;
        if !self.ordered {
            self.points.sort_by(|a, b| {
                let by_score = if asc {
                    a.1.total_cmp(&b.1)
                } else {
                    b.1.total_cmp(&a.1)
                };
                by_score.then(a.0.cmp(&b.0))
            });
        }
        if let Some(t) = threshold {
            self.points
                .retain(|p| if asc { p.1 <= t } else { p.1 >= t });
        }
        self.points.truncate(limit);
        self
    }
}

/// A space a node compares in.
#[derive(Clone, Copy)]
enum Space {
    Dense {
        metric: Metric,
        dim: usize,
    },
    Sparse {
        index: usize,
        idf: bool,
    },
    Multi {
        index: usize,
        metric: Metric,
        dim: usize,
    },
}

impl Space {
    /// Whether a nearest query's scores improve downwards: Euclidean distances, of dense
    /// vectors and of multivectors (Qdrant's MaxSim score there).
    fn ascending(&self) -> bool {
        matches!(
            self,
            Space::Dense {
                metric: Metric::L2,
                ..
            } | Space::Multi {
                metric: Metric::L2,
                ..
            }
        )
    }
}

/// A query vector resolved and prepared for its space.
#[derive(Clone)]
enum Prepared {
    Dense(Vec<f32>),
    Sparse(SparseVector),
    /// Rows back to back.
    Multi(Vec<f32>),
}

/// Points the examples of a query name: left out of its results.
type Examples = HashSet<PointId>;

impl Inner {
    /// Runs `req` (the top node): its page, with payloads and vectors as asked.
    pub(crate) fn query(
        &self,
        req: &QueryRequest,
        with_payload: bool,
        with_vector: bool,
    ) -> Result<Vec<Hit>> {
        let ranked = self.run_node(req, true)?;
        let page: Vec<(PointId, f32)> = ranked.points.into_iter().skip(req.offset).collect();
        let ids: Vec<PointId> = page.iter().map(|p| p.0).collect();
        let records = self.records(&ids, with_payload, with_vector)?;
        // A point deleted since it was scored is left out; one listed twice (an order by
        // a key it has two values at) is shown twice.
        let by_id: std::collections::HashMap<PointId, _> =
            records.into_iter().map(|r| (r.id, r)).collect();
        Ok(page
            .into_iter()
            .filter_map(|(id, score)| {
                let r = by_id.get(&id)?.clone();
                Some(Hit {
                    id,
                    score,
                    distance: if ranked.ascending { score } else { -score },
                    version: r.version,
                    payload: r.payload,
                    vectors: r.vectors,
                })
            })
            .collect())
    }

    fn run_node(&self, req: &QueryRequest, top: bool) -> Result<Ranked> {
        limits::K.check(req.limit.max(1))?;
        let want = req.limit.saturating_add(if top { req.offset } else { 0 });
        if req.score_threshold.is_some() {
            match &req.query {
                None => {
                    return Err(DbError::BadRequest(
                        "A query is needed to use the score_threshold. Can't have \
                         score_threshold without defining a query."
                            .into(),
                    ))
                }
                Some(Query::OrderBy { .. }) => {
                    return Err(DbError::BadRequest(
                        "Can't use score_threshold with an order_by query.".into(),
                    ))
                }
                _ => {}
            }
        }
        if matches!(req.query, Some(Query::Fusion(_))) && !req.using.is_empty() {
            return Err(DbError::BadRequest(
                "Fusion queries cannot be combined with the 'using' field.".into(),
            ));
        }
        if req.idf_corpus.is_some()
            && !matches!(self.space(&req.using)?, Space::Sparse { idf: true, .. })
        {
            return Err(DbError::BadRequest(format!(
                "idf params apply to a sparse vector space with the idf modifier; {:?} is not \
                 one",
                req.using
            )));
        }
        let filter = req.filter.as_ref();
        let ranked = if req.prefetch.is_empty() {
            match &req.query {
                None => Ranked::descending(
                    self.matching_ids(filter, None, want)?
                        .into_iter()
                        .map(|id| (id, 0.0))
                        .collect(),
                ),
                Some(Query::Fusion(_)) => {
                    return Err(DbError::InvalidInput(
                        "a fusion query merges prefetches: give it some".into(),
                    ))
                }
                Some(Query::Formula(_)) => {
                    return Err(DbError::BadRequest(
                        "A formula query scores the points of its prefetches: give it some.".into(),
                    ))
                }
                Some(Query::Nearest(v)) => self.nearest(req, v, want)?,
                Some(Query::NearestMmr {
                    vector,
                    diversity,
                    candidates,
                }) => self.mmr(req, vector, *diversity, *candidates, None, want)?,
                Some(Query::OrderBy {
                    key,
                    descending,
                    start_from,
                }) => self.order_by(key, *descending, start_from.as_ref(), None, filter)?,
                Some(Query::Sample) => {
                    let mut ids = self.matching_ids(filter, None, usize::MAX)?;
                    ids.shuffle(&mut rand::rng());
                    Ranked::in_order(ids)
                }
                Some(q) => self.rescore(req, q, None)?,
            }
        } else {
            // A node's filter holds for its prefetches too (Qdrant's rule): their ranks are
            // among the points the node may return.
            let lists = req
                .prefetch
                .iter()
                .map(|p| match filter {
                    None => self.run_node(p, false),
                    Some(f) => {
                        let mut p = p.clone();
                        p.filter = Some(match &p.filter {
                            Some(own) => own.and(f),
                            None => f.clone(),
                        });
                        self.run_node(&p, false)
                    }
                })
                .collect::<Result<Vec<Ranked>>>()?;
            match &req.query {
                None => {
                    return Err(DbError::BadRequest(
                        "A query is needed to merge the prefetches. Can't have prefetches \
                         without defining a query."
                            .into(),
                    ))
                }
                Some(Query::Fusion(Fusion::Rrf { k, weights })) => {
                    let ids: Vec<Vec<PointId>> = lists
                        .iter()
                        .map(|l| l.points.iter().map(|p| p.0).collect())
                        .collect();
                    Ranked::descending(
                        self.only_matching(score::rrf(&ids, *k, weights.as_deref()), filter)?,
                    )
                }
                Some(Query::Fusion(Fusion::Dbsf)) => {
                    // Scores that improve downwards are negated so that higher is better.
                    let scored: Vec<Vec<(PointId, f32)>> = lists
                        .iter()
                        .map(|l| {
                            let sign = if l.ascending { -1.0 } else { 1.0 };
                            l.points.iter().map(|&(id, s)| (id, sign * s)).collect()
                        })
                        .collect();
                    Ranked::descending(self.only_matching(score::dbsf(&scored), filter)?)
                }
                Some(Query::OrderBy {
                    key,
                    descending,
                    start_from,
                }) => {
                    let candidates = union(&lists);
                    self.order_by(
                        key,
                        *descending,
                        start_from.as_ref(),
                        Some(&candidates),
                        filter,
                    )?
                }
                Some(Query::NearestMmr {
                    vector,
                    diversity,
                    candidates,
                }) => {
                    let pool = union(&lists);
                    self.mmr(req, vector, *diversity, *candidates, Some(pool), want)?
                }
                Some(Query::Sample) => {
                    let mut ids = union(&lists);
                    ids.shuffle(&mut rand::rng());
                    // Kept in the shuffled order (all scores are equal): an offset skips
                    // random points, not the lowest ids.
                    let kept =
                        self.only_matching(ids.into_iter().map(|id| (id, 0.0)).collect(), filter)?;
                    Ranked::in_order(kept.into_iter().map(|(id, _)| id).collect())
                }
                Some(Query::Formula(f)) => self.formula(f, &lists, filter)?,
                Some(q) => self.rescore(req, q, Some(union(&lists)))?,
            }
        };
        Ok(ranked.finish(want, req.score_threshold))
    }

    /// `points` that match `filter` (all without one), in their order.
    fn only_matching(
        &self,
        points: Vec<(PointId, f32)>,
        filter: Option<&Filter>,
    ) -> Result<Vec<(PointId, f32)>> {
        let Some(f) = filter else { return Ok(points) };
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        let mut kept = Vec::with_capacity(points.len());
        for (id, score) in points {
            if let Some(loc) = state.tracker.get(&id) {
                if state.point_matches(loc, f)? {
                    kept.push((id, score));
                }
            }
        }
        Ok(kept)
    }

    fn space(&self, using: &str) -> Result<Space> {
        if let Some(index) = self.config().dense_space(using) {
            let s = &self.config().dense[index];
            return Ok(Space::Dense {
                metric: s.metric,
                dim: s.dim,
            });
        }
        if let Some(index) = self.config().multi_space(using) {
            let s = &self.config().multi[index];
            return Ok(Space::Multi {
                index,
                metric: s.metric,
                dim: s.dim,
            });
        }
        match self.config().sparse_space(using) {
            Some(index) => Ok(Space::Sparse {
                index,
                idf: self.config().sparse[index].modifier == SparseModifier::Idf,
            }),
            None => Err(DbError::InvalidInput(format!(
                "Not existing vector name error: {using}"
            ))),
        }
    }

    /// A query vector in `space`: given (checked, prepared) or a stored point's (noted in
    /// `examples`).
    fn prepare(
        &self,
        v: &VectorInput,
        space: Space,
        using: &str,
        examples: &mut Examples,
    ) -> Result<Prepared> {
        let given = match v {
            VectorInput::Found { id, vector } => {
                examples.insert(*id);
                return self.prepare(vector, space, using, examples);
            }
            VectorInput::Point(id) => {
                examples.insert(*id);
                let record = self.records(&[*id], false, true)?;
                let vectors = record
                    .into_iter()
                    .next()
                    .ok_or(DbError::PointNotFound(*id))?
                    .vectors
                    .unwrap_or_default();
                return match vectors.get(using) {
                    Some(Vector::Dense(d)) => Ok(Prepared::Dense(d.clone())),
                    Some(Vector::Sparse(s)) => Ok(Prepared::Sparse(s.clone())),
                    Some(Vector::Multi(rows)) => Ok(Prepared::Multi(rows.concat())),
                    None => Err(DbError::InvalidInput(format!(
                        "point {id} has no vector in space {using:?}"
                    ))),
                };
            }
            VectorInput::Dense(d) => Vector::Dense(d.clone()),
            VectorInput::Sparse(s) => Vector::Sparse(s.clone()),
            VectorInput::Multi(rows) => Vector::Multi(rows.clone()),
        };
        match (given, space) {
            // One row, checked and prepared as a multivector's rows are.
            (Vector::Dense(d), Space::Dense { metric, dim, .. }) => {
                prepare_rows(vec![d], metric, dim, using).map(Prepared::Dense)
            }
            (Vector::Sparse(s), Space::Sparse { .. }) => {
                Ok(Prepared::Sparse(s.checked().map_err(|e| {
                    DbError::InvalidInput(format!("query: {e}"))
                })?))
            }
            // One vector in a multivector space is a multivector of one row.
            (Vector::Dense(d), Space::Multi { metric, dim, .. }) => {
                prepare_rows(vec![d], metric, dim, using).map(Prepared::Multi)
            }
            (Vector::Multi(rows), Space::Multi { metric, dim, .. }) => {
                prepare_rows(rows, metric, dim, using).map(Prepared::Multi)
            }
            (Vector::Dense(_) | Vector::Multi(_), Space::Sparse { .. }) => {
                Err(DbError::InvalidInput(format!(
                    "vector space {using:?} is sparse: query it with a sparse vector"
                )))
            }
            (Vector::Sparse(_) | Vector::Multi(_), Space::Dense { .. }) => {
                Err(DbError::InvalidInput(format!(
                    "vector space {using:?} is dense: query it with a dense vector"
                )))
            }
            (Vector::Sparse(_), Space::Multi { .. }) => Err(DbError::InvalidInput(format!(
                "vector space {using:?} holds multivectors: query it with dense vectors"
            ))),
        }
    }

    /// A nearest search through the indexes, leaving out a point the query vector came from.
    fn nearest(&self, req: &QueryRequest, v: &VectorInput, want: usize) -> Result<Ranked> {
        let space = self.space(&req.using)?;
        let mut examples = Examples::new();
        let query = self.prepare(v, space, &req.using, &mut examples)?;
        let mut search = SearchRequest::new(want.saturating_add(examples.len()).max(1));
        search.filter = req.filter.clone();
        search.search_list = req.search_list;
        search.exact = req.exact;
        search.using = req.using.clone();
        search.idf_corpus = req.idf_corpus.clone();
        search.k = search.k.min(limits::K.max);
        let hits = match (query, space) {
            // Stored vectors are prepared already; preparing again is harmless (unit length
            // stays unit length, other metrics do nothing).
            (Prepared::Dense(d), _) => self.search(&d, &search)?,
            (Prepared::Sparse(s), _) => self.search_sparse(s, &search)?,
            (Prepared::Multi(rows), Space::Multi { index, .. }) => {
                self.search_multi(index, &rows, &search)?
            }
            (Prepared::Multi(_), _) => unreachable!("multivectors are prepared for multi spaces"),
        };
        let ascending = space.ascending();
        Ok(Ranked {
            points: hits
                .into_iter()
                .filter(|h| !examples.contains(&h.id))
                .map(|h| (h.id, h.score))
                .collect(),
            ascending,
            ordered: false,
        })
    }

    /// Scores `candidates` (every matching point with a vector in the space, when `None`)
    /// with `query`, exactly.
    fn rescore(
        &self,
        req: &QueryRequest,
        query: &Query,
        candidates: Option<Vec<PointId>>,
    ) -> Result<Ranked> {
        let space = self.space(&req.using)?;
        let using = req.using.as_str();
        let mut examples = Examples::new();
        let mut prepare = |v: &VectorInput| self.prepare(v, space, using, &mut examples);
        let scorer: Scorer = match query {
            Query::Nearest(v) => Scorer::Nearest(prepare(v)?),
            Query::Recommend {
                positive,
                negative,
                strategy,
            } => {
                if positive.is_empty() && negative.is_empty() {
                    return Err(DbError::InvalidInput(
                        "a recommendation needs at least one example".into(),
                    ));
                }
                let pos = positive
                    .iter()
                    .map(&mut prepare)
                    .collect::<Result<Vec<_>>>()?;
                let neg = negative
                    .iter()
                    .map(&mut prepare)
                    .collect::<Result<Vec<_>>>()?;
                match strategy {
                    RecommendStrategy::AverageVector => {
                        Scorer::Nearest(average_target(&pos, &neg, using)?)
                    }
                    RecommendStrategy::BestScore => Scorer::BestScore(pos, neg),
                    RecommendStrategy::SumScores => Scorer::SumScores(pos, neg),
                }
            }
            Query::Discover { target, context } => {
                let target = prepare(target)?;
                let pairs = context
                    .iter()
                    .map(|(p, n)| Ok((prepare(p)?, prepare(n)?)))
                    .collect::<Result<Vec<_>>>()?;
                Scorer::Discover(target, pairs)
            }
            Query::Context(context) => Scorer::Context(
                context
                    .iter()
                    .map(|(p, n)| Ok((prepare(p)?, prepare(n)?)))
                    .collect::<Result<Vec<_>>>()?,
            ),
            Query::RelevanceFeedback {
                target,
                feedback,
                a,
                b,
                c,
            } => {
                let target = prepare(target)?;
                let scores: Vec<f32> = feedback.iter().map(|f| f.1).collect();
                let weights = score::feedback_weights(&scores, *b, *c);
                let examples = feedback
                    .iter()
                    .zip(weights)
                    .map(|((v, _), w)| Ok((prepare(v)?, w)))
                    .collect::<Result<Vec<_>>>()?;
                Scorer::Feedback(target, examples, *a)
            }
            Query::OrderBy { .. }
            | Query::Fusion(_)
            | Query::Formula(_)
            | Query::Sample
            | Query::NearestMmr { .. } => {
                unreachable!("run_node handles these")
            }
        };
        // A recommendation by average vector is a nearest search: through the indexes
        // when nothing was prefetched.
        if let (Scorer::Nearest(Prepared::Dense(target)), None, Query::Recommend { .. }) =
            (&scorer, &candidates, query)
        {
            let mut search = SearchRequest::new(req.limit.max(1).saturating_add(examples.len()));
            search.k = search.k.min(limits::K.max);
            search.filter = req.filter.clone();
            search.search_list = req.search_list;
            search.exact = req.exact;
            search.using = req.using.clone();
            let hits = self.search(target, &search)?;
            let ascending = space.ascending();
            return Ok(Ranked {
                points: hits
                    .into_iter()
                    .filter(|h| !examples.contains(&h.id))
                    .map(|h| (h.id, h.score))
                    .collect(),
                ascending,
                ordered: false,
            });
        }
        let ids = match candidates {
            Some(ids) => self
                .only_matching(
                    ids.into_iter().map(|id| (id, 0.0)).collect(),
                    req.filter.as_ref(),
                )?
                .into_iter()
                .map(|p| p.0)
                .collect(),
            None => self.matching_ids(req.filter.as_ref(), None, usize::MAX)?,
        };
        let idf = self.idf_weights(space, &scorer, req.idf_corpus.as_ref())?;
        let mut points = Vec::new();
        for chunk in ids.chunks(1024) {
            for r in self.records(chunk, false, true)? {
                if examples.contains(&r.id) {
                    continue;
                }
                let Some(v) = r.vectors.as_ref().and_then(|v| v.get(using)) else {
                    continue;
                };
                let sim = |q: &Prepared| similarity(space, q, v, idf.as_deref());
                let s = match &scorer {
                    Scorer::Nearest(q) => match space {
                        Space::Dense {
                            metric: Metric::L2, ..
                        } => -sim(q),
                        Space::Multi {
                            metric: Metric::L2, ..
                        } => crate::segment::multi_l2_score(sim(q)),
                        _ => sim(q),
                    },
                    Scorer::BestScore(p, n) => score::best_score(
                        &p.iter().map(sim).collect::<Vec<_>>(),
                        &n.iter().map(sim).collect::<Vec<_>>(),
                    ),
                    Scorer::SumScores(p, n) => score::sum_scores(
                        &p.iter().map(sim).collect::<Vec<_>>(),
                        &n.iter().map(sim).collect::<Vec<_>>(),
                    ),
                    Scorer::Discover(t, pairs) => score::discover(
                        sim(t),
                        &pairs
                            .iter()
                            .map(|(p, n)| (sim(p), sim(n)))
                            .collect::<Vec<_>>(),
                    ),
                    Scorer::Context(pairs) => score::context(
                        &pairs
                            .iter()
                            .map(|(p, n)| (sim(p), sim(n)))
                            .collect::<Vec<_>>(),
                    ),
                    Scorer::Feedback(t, examples, a) => examples
                        .iter()
                        .filter(|(_, w)| *w != 0.0)
                        .fold(a * sim(t), |s, (e, w)| s + w * sim(e)),
                };
                points.push((r.id, s));
            }
        }
        let ascending = matches!(scorer, Scorer::Nearest(_)) && space.ascending();
        Ok(Ranked {
            points,
            ascending,
            ordered: false,
        })
    }

    /// Maximal marginal relevance (`Query::NearestMmr`): the nearest `candidates` (among
    /// `pool` when prefetched), then picked one by one, trading similarity to the query
    /// against similarity to the points already picked.
    fn mmr(
        &self,
        req: &QueryRequest,
        vector: &VectorInput,
        diversity: f32,
        candidates: Option<usize>,
        pool: Option<Vec<PointId>>,
        want: usize,
    ) -> Result<Ranked> {
        if !(0.0..=1.0).contains(&diversity) {
            return Err(DbError::InvalidInput(format!(
                "mmr.diversity must be from 0 to 1, got {diversity}"
            )));
        }
        let size = candidates.unwrap_or(req.limit).max(want).max(1);
        let nearest = Query::Nearest(vector.clone());
        let found = match pool {
            None => self.nearest(req, vector, size)?,
            Some(pool) => self.rescore(req, &nearest, Some(pool))?,
        }
        .finish(size, None);
        let space = self.space(&req.using)?;
        let mut examples = Examples::default();
        let query = self.prepare(vector, space, &req.using, &mut examples)?;
        let ids: Vec<PointId> = found.points.iter().map(|p| p.0).collect();
        let records = self.records(&ids, false, true)?;
        let mut picked_from: Vec<((PointId, f32), Vector)> = Vec::with_capacity(ids.len());
        for (point, record) in found.points.iter().zip(&records) {
            let v = record.vectors.as_ref().and_then(|v| v.get(&req.using));
            if let Some(v) = v {
                picked_from.push((*point, v.clone()));
            }
        }
        let relevance: Vec<f32> = picked_from
            .iter()
            .map(|(_, v)| similarity(space, &query, v, None))
            .collect();
        let as_query = |v: &Vector| match v {
            Vector::Dense(d) => Prepared::Dense(d.clone()),
            Vector::Sparse(s) => Prepared::Sparse(s.clone()),
            Vector::Multi(rows) => Prepared::Multi(rows.concat()),
        };
        let as_queries: Vec<Prepared> = picked_from.iter().map(|(_, v)| as_query(v)).collect();
        let picked = score::mmr_pick(
            &relevance,
            |best, i| similarity(space, &as_queries[best], &picked_from[i].1, None),
            diversity,
            want,
        );
        Ok(Ranked {
            points: picked.into_iter().map(|i| picked_from[i].0).collect(),
            ascending: found.ascending,
            ordered: true,
        })
    }

    /// IDF weights of a sparse space's query terms (by term), when the space asks for them.
    fn idf_weights(
        &self,
        space: Space,
        scorer: &Scorer,
        corpus: Option<&Filter>,
    ) -> Result<Option<Vec<(u32, f32)>>> {
        let Space::Sparse { index, idf: true } = space else {
            return Ok(None);
        };
        let mut terms: Vec<u32> = scorer
            .vectors()
            .into_iter()
            .filter_map(|p| match p {
                Prepared::Sparse(s) => Some(s.indices.clone()),
                Prepared::Dense(_) | Prepared::Multi(_) => None,
            })
            .flatten()
            .collect();
        terms.sort_unstable();
        terms.dedup();
        let (points, df) = self.sparse_frequencies(index, &terms, corpus)?;
        Ok(Some(
            terms
                .into_iter()
                .zip(df)
                .map(|(t, d)| (t, super::read::idf(points, d)))
                .collect(),
        ))
    }

    /// The prefetched points that match `filter`, scored by formula `f` (each point's
    /// score in prefetch i is its `$score[i]`).
    fn formula(&self, f: &Formula, lists: &[Ranked], filter: Option<&Filter>) -> Result<Ranked> {
        let candidates = union(lists).into_iter().map(|id| (id, 0.0)).collect();
        let candidates = self.only_matching(candidates, filter)?;
        let per_list: Vec<HashMap<PointId, f32>> = lists
            .iter()
            .map(|l| l.points.iter().copied().collect())
            .collect();
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        let mut scored = Vec::with_capacity(candidates.len());
        for (id, _) in candidates {
            let Some(loc) = state.tracker.get(&id) else {
                continue;
            };
            let payload = state.payload(loc)?;
            let scores: Vec<Option<f32>> = per_list.iter().map(|m| m.get(&id).copied()).collect();
            // A condition answers yes or no: a payload that could not be read is kept
            // aside and answered after the score.
            let damage = std::cell::RefCell::new(None);
            let score = f.score(&payload, &scores, &|c| {
                state.point_matches(loc, c).unwrap_or_else(|e| {
                    damage.borrow_mut().get_or_insert(e);
                    false
                })
            })?;
            if let Some(e) = damage.into_inner() {
                return Err(e);
            }
            scored.push((id, score));
        }
        Ok(Ranked::descending(scored))
    }

    /// Points ordered by the payload value at `key` (numbers by value, then strings), from
    /// `start_from` on; a point is listed once per value it has there, and not at all
    /// without one. Among `candidates` when given.
    fn order_by(
        &self,
        key: &str,
        descending: bool,
        start_from: Option<&OrderValue>,
        candidates: Option<&[PointId]>,
        filter: Option<&Filter>,
    ) -> Result<Ranked> {
        let ids = match candidates {
            Some(c) => self
                .only_matching(c.iter().map(|&id| (id, 0.0)).collect(), filter)?
                .into_iter()
                .map(|p| p.0)
                .collect(),
            None => self.matching_ids(filter, None, usize::MAX)?,
        };
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        let mut keyed: Vec<(OrderValue, PointId)> = Vec::new();
        for id in ids {
            let Some(loc) = state.tracker.get(&id) else {
                continue;
            };
            let payload = state.payload(loc)?;
            keyed.extend(
                OrderValue::all_at(&payload, key)?
                    .into_iter()
                    .map(|k| (k, id)),
            );
        }
        drop(state);
        if let Some(from) = start_from {
            keyed.retain(|(k, _)| if descending { k <= from } else { k >= from });
        }
        keyed.sort_by(|a, b| {
            let by_value = a.0.cmp(&b.0);
            if descending {
                by_value.reverse()
            } else {
                by_value
            }
            .then(a.1.cmp(&b.1))
        });
        Ok(Ranked::in_order(
            keyed.into_iter().map(|(_, id)| id).collect(),
        ))
    }
}

/// What a re-scoring node computes per point.
enum Scorer {
    Nearest(Prepared),
    BestScore(Vec<Prepared>, Vec<Prepared>),
    SumScores(Vec<Prepared>, Vec<Prepared>),
    Discover(Prepared, Vec<(Prepared, Prepared)>),
    Context(Vec<(Prepared, Prepared)>),
    /// Relevance feedback: the target, each example with its weight, and `a`.
    Feedback(Prepared, Vec<(Prepared, f32)>, f32),
}

impl Scorer {
    fn vectors(&self) -> Vec<&Prepared> {
        match self {
            Scorer::Nearest(q) => vec![q],
            Scorer::BestScore(p, n) | Scorer::SumScores(p, n) => p.iter().chain(n).collect(),
            Scorer::Discover(t, pairs) => std::iter::once(t)
                .chain(pairs.iter().flat_map(|(p, n)| [p, n]))
                .collect(),
            Scorer::Context(pairs) => pairs.iter().flat_map(|(p, n)| [p, n]).collect(),
            Scorer::Feedback(t, examples, _) => std::iter::once(t)
                .chain(examples.iter().map(|(e, _)| e))
                .collect(),
        }
    }
}

/// The points of several lists, each once, in first-seen order.
fn union(lists: &[Ranked]) -> Vec<PointId> {
    let mut seen = HashSet::new();
    lists
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.0))
        .filter(|id| seen.insert(*id))
        .collect()
}

/// Query rows checked (at least one, each of `dim` finite numbers) and prepared, back to
/// back.
fn prepare_rows(rows: Vec<Vec<f32>>, metric: Metric, dim: usize, using: &str) -> Result<Vec<f32>> {
    if rows.is_empty() {
        return Err(DbError::InvalidInput(
            "query: a multivector needs a vector".into(),
        ));
    }
    let mut out = Vec::with_capacity(rows.len() * dim);
    for mut row in rows {
        if row.len() != dim {
            return Err(DbError::InvalidInput(crate::config::dimension_error(
                dim,
                row.len(),
                &format!(" (query, vector space {using:?})"),
            )));
        }
        check_vectors(&row, dim).map_err(|e| DbError::InvalidInput(format!("query: {e}")))?;
        metric.prepare(&mut row);
        out.extend_from_slice(&row);
    }
    Ok(out)
}

/// avg(positive) + (avg(positive) - avg(negative)) (avg(positive) without negatives).
fn average_target(pos: &[Prepared], neg: &[Prepared], using: &str) -> Result<Prepared> {
    // Multivectors (Qdrant's rule): the positive examples' rows together, then the
    // negative examples' rows negated.
    if pos
        .iter()
        .chain(neg)
        .all(|p| matches!(p, Prepared::Multi(_)))
    {
        if pos.is_empty() {
            return Err(DbError::InvalidInput(
                "Positive vectors should not be empty with `average` strategy".into(),
            ));
        }
        let mut rows: Vec<f32> = Vec::new();
        for p in pos {
            if let Prepared::Multi(r) = p {
                rows.extend_from_slice(r);
            }
        }
        for n in neg {
            if let Prepared::Multi(r) = n {
                rows.extend(r.iter().map(|x| -x));
            }
        }
        return Ok(Prepared::Multi(rows));
    }
    let dense = |list: &[Prepared]| -> Result<Vec<Vec<f32>>> {
        list.iter()
            .map(|p| match p {
                Prepared::Dense(d) => Ok(d.clone()),
                Prepared::Sparse(_) | Prepared::Multi(_) => Err(DbError::InvalidInput(format!(
                    "the average_vector strategy needs a dense space; {using:?} is not one \
                     (use best_score)"
                ))),
            })
            .collect()
    };
    let (pos, neg) = (dense(pos)?, dense(neg)?);
    let avg = |list: &[Vec<f32>]| -> Option<Vec<f32>> {
        let first = list.first()?;
        let mut sum = vec![0.0f32; first.len()];
        for v in list {
            sum.iter_mut().zip(v).for_each(|(s, x)| *s += x);
        }
        Some(sum.into_iter().map(|s| s / list.len() as f32).collect())
    };
    match (avg(&pos), avg(&neg)) {
        (Some(p), None) => Ok(Prepared::Dense(p)),
        (Some(p), Some(n)) => Ok(Prepared::Dense(
            p.iter().zip(&n).map(|(a, b)| a + a - b).collect(),
        )),
        (None, Some(n)) => Ok(Prepared::Dense(n.into_iter().map(|x| -x).collect())),
        (None, None) => Err(DbError::InvalidInput(
            "a recommendation needs at least one example".into(),
        )),
    }
}

/// "Higher is closer" similarity of a query vector and a stored one: cosine similarity or
/// dot product, the negated Euclidean distance, or a sparse dot product (each query term
/// times its IDF when given).
fn similarity(space: Space, q: &Prepared, v: &Vector, idf: Option<&[(u32, f32)]>) -> f32 {
    match (space, q, v) {
        (Space::Dense { metric, .. }, Prepared::Dense(q), Vector::Dense(v)) => {
            score::dense_similarity(metric, q, v)
        }
        (Space::Multi { metric, dim, .. }, Prepared::Multi(q), Vector::Multi(rows)) => {
            crate::segment::max_sim(metric, dim, q, &rows.concat())
        }
        (Space::Sparse { .. }, Prepared::Sparse(q), Vector::Sparse(v)) => {
            score::sparse_dot(q, v, idf)
        }
        _ => f32::NEG_INFINITY,
    }
}

impl Collection {
    /// Runs a universal query (Qdrant's `points/query`): prefetches, fusion, recommend,
    /// discover, context, order-by and sample, by vector or by point id. Returns the top
    /// node's page with payloads and vectors as asked.
    pub fn query(
        &self,
        req: &QueryRequest,
        with_payload: bool,
        with_vector: bool,
    ) -> Result<Vec<Hit>> {
        self.inner.query(req, with_payload, with_vector)
    }
}
