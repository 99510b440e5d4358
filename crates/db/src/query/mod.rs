//! The universal query (Qdrant's `points/query`): a tree of requests whose leaves search
//! one vector space (or list points) and whose inner nodes re-score or fuse what their
//! prefetches found. `search`, recommend, discover and context are all one of its nodes;
//! `collection/query.rs` runs the tree, `score.rs` holds the scoring rules.

pub mod formula;
pub mod json;
pub mod score;

use crate::filter::Filter;
use crate::vectors::SparseVector;
use crate::PointId;

/// A vector a query compares points with: given, or the stored vector of a point (in the
/// space the query searches), which then is left out of the results.
#[derive(Clone, Debug, PartialEq)]
pub enum VectorInput {
    Dense(Vec<f32>),
    Sparse(SparseVector),
    /// Several vectors, for a multivector space.
    Multi(Vec<Vec<f32>>),
    Point(PointId),
    /// A point of this collection whose vector a cluster router found on another shard
    /// (`example_vectors`): compared by that vector, left out of the results as `Point` is.
    Found {
        id: PointId,
        vector: Box<VectorInput>,
    },
}

/// How a recommendation turns its examples into scores.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RecommendStrategy {
    /// One search for avg(positive) + (avg(positive) - avg(negative)).
    #[default]
    AverageVector,
    /// Each point scored by its best example: sigmoid(best positive similarity) when that
    /// beats the best negative one, else -sigmoid(best negative similarity).
    BestScore,
    /// Each point scored by the sum of its similarities to the positives minus the sum to
    /// the negatives.
    SumScores,
}

/// How a node merges its prefetches' results.
#[derive(Clone, Debug, PartialEq)]
pub enum Fusion {
    /// Reciprocal rank fusion: a point scores the sum over lists of
    /// 1 / ((rank + 1) / weight + k - 1) (rank from 0; weight 1 unless given).
    Rrf { k: usize, weights: Option<Vec<f32>> },
    /// Distribution-based score fusion: each list's scores normalized by its mean +- 3
    /// standard deviations, then summed per point.
    Dbsf,
}

/// What a node of a query does.
#[derive(Clone, Debug, PartialEq)]
pub enum Query {
    /// The closest points to a vector.
    Nearest(VectorInput),
    /// The closest points to a vector, picked for variety (maximal marginal relevance):
    /// from the `candidates` nearest (the request's limit when `None`), each next pick the
    /// best by `(1 - diversity) * similarity to the query - diversity * its greatest
    /// similarity to a point already picked`. Points keep their similarity to the query as
    /// their score.
    NearestMmr {
        vector: VectorInput,
        diversity: f32,
        candidates: Option<usize>,
    },
    Recommend {
        positive: Vec<VectorInput>,
        negative: Vec<VectorInput>,
        strategy: RecommendStrategy,
    },
    /// Points near `target` within the region the context pairs mark out: a point scores
    /// the number of pairs it is on the positive side of (minus those it is not), plus
    /// sigmoid(similarity to the target).
    Discover {
        target: VectorInput,
        context: Vec<(VectorInput, VectorInput)>,
    },
    /// Points on the positive side of every pair: a point scores the sum over pairs of
    /// min(0, sigmoid(similarity to positive) - sigmoid(similarity to negative)).
    Context(Vec<(VectorInput, VectorInput)>),
    /// Points ordered by a payload value (numbers, then strings in their order: RFC 3339
    /// dates sort as they read), from `start_from` on. A point with several values at the
    /// key is listed once per value.
    OrderBy {
        key: String,
        descending: bool,
        start_from: Option<OrderValue>,
    },
    Fusion(Fusion),
    /// The prefetches' points scored by a formula over their scores and payloads.
    Formula(formula::Formula),
    /// Relevance feedback (Qdrant's naive strategy): a point scores `a` x its similarity to
    /// `target`, plus, for every ordered pair of examples whose feedback scores differ by
    /// more than 0, (that difference)^`b` x `c` x (its similarity to the better example -
    /// to the worse one).
    RelevanceFeedback {
        target: VectorInput,
        feedback: Vec<(VectorInput, f32)>,
        a: f32,
        b: f32,
        c: f32,
    },
    /// Matching points in random order.
    Sample,
}

/// A payload value as an order-by key: numbers before strings.
#[derive(Clone, Debug)]
pub enum OrderValue {
    Number(f64),
    Text(String),
}

impl OrderValue {
    /// The key of a JSON value (numbers and strings have one).
    pub fn of(v: &serde_json::Value) -> Option<Self> {
        match v {
            serde_json::Value::Number(n) => n.as_f64().map(OrderValue::Number),
            serde_json::Value::String(s) => Some(OrderValue::Text(s.clone())),
            _ => None,
        }
    }

    /// Every value a payload has at `key` (`a.b`, `a[].b`) to order by, the elements of an
    /// array each: an order-by lists the point once per value.
    pub fn all_at(payload: &crate::Payload, key: &str) -> crate::Result<Vec<Self>> {
        let path = crate::filter::KeyPath::parse(key)
            .map_err(|e| crate::DbError::InvalidInput(format!("order_by: {e}")))?;
        let mut out = Vec::new();
        path.any_value(payload, &mut |v| {
            match v {
                serde_json::Value::Array(items) => out.extend(items.iter().filter_map(Self::of)),
                v => out.extend(Self::of(v)),
            }
            false
        });
        Ok(out)
    }
}

impl PartialEq for OrderValue {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}

impl Eq for OrderValue {}

impl PartialOrd for OrderValue {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for OrderValue {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        use std::cmp::Ordering;
        match (self, other) {
            (OrderValue::Number(a), OrderValue::Number(b)) => a.total_cmp(b),
            (OrderValue::Text(a), OrderValue::Text(b)) => a.cmp(b),
            (OrderValue::Number(_), OrderValue::Text(_)) => Ordering::Less,
            (OrderValue::Text(_), OrderValue::Number(_)) => Ordering::Greater,
        }
    }
}

/// One node of a query: its prefetches (run first; their results are this node's
/// candidates), what it does, the space it compares in, a filter, and its page.
#[derive(Clone, Debug)]
pub struct QueryRequest {
    pub prefetch: Vec<QueryRequest>,
    /// `None`: the points in id order (no prefetch), or an error (with prefetches).
    pub query: Option<Query>,
    /// The vector space compared in (`""`: the unnamed one).
    pub using: String,
    pub filter: Option<Filter>,
    pub limit: usize,
    /// Results skipped first (the top node's only).
    pub offset: usize,
    pub score_threshold: Option<f32>,
    /// Search list of graph searches; `None`: the collection's.
    pub search_list: Option<usize>,
    /// The points a sparse space's IDF weights are counted over (`None`: all).
    pub idf_corpus: Option<Filter>,
    /// Every matching point compared, no index searched (Qdrant's `params.exact`).
    pub exact: bool,
}

impl QueryRequest {
    pub fn new(query: Option<Query>, limit: usize) -> Self {
        Self {
            prefetch: Vec::new(),
            query,
            using: String::new(),
            filter: None,
            limit,
            offset: 0,
            score_threshold: None,
            search_list: None,
            idf_corpus: None,
            exact: false,
        }
    }
}
