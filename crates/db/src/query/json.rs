//! Qdrant's universal query in its JSON form (`points/query`'s body) read into the query
//! tree: the server's route and the Python API's `query` take the same bodies.

use serde_json::Value;

use super::{Fusion, OrderValue, Query, QueryRequest, RecommendStrategy, VectorInput};
use crate::json::{self, dense_vector, opt_uint, point_id, sparse_vector};
use crate::{Database, DbError, Result, Vector};

/// Results a query or prefetch gives without a `limit`.
const DEFAULT_LIMIT: usize = 10;
/// Most examples of a relevance-feedback query.
const MAX_FEEDBACK: usize = 1_000;
/// Qdrant's constant of reciprocal rank fusion.
const RRF_K: usize = 2;

fn bad(message: impl Into<String>) -> DbError {
    DbError::BadRequest(message.into())
}

fn validation(message: impl Into<String>) -> DbError {
    DbError::Validation(message.into())
}

/// A vector of a query: a list of numbers, a sparse vector, or a point id.
fn vector_input(v: &Value, what: &str) -> Result<VectorInput> {
    match v {
        Value::Array(a) if a.first().is_some_and(Value::is_array) => {
            Ok(VectorInput::Multi(json::multi_rows(a, what)?))
        }
        Value::Array(_) => Ok(VectorInput::Dense(dense_vector(v, what)?)),
        Value::Object(m) if m.contains_key("indices") => {
            Ok(VectorInput::Sparse(sparse_vector(v, what)?))
        }
        Value::Number(_) | Value::String(_) => Ok(VectorInput::Point(point_id(v)?)),
        _ => Err(bad(format!(
            "{what} must be a vector, a sparse vector or a point id"
        ))),
    }
}

fn vector_list(v: Option<&Value>, what: &str) -> Result<Vec<VectorInput>> {
    match v {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(list)) => list
            .iter()
            .enumerate()
            .map(|(i, v)| vector_input(v, &format!("{what}[{i}]")))
            .collect(),
        Some(_) => Err(bad(format!("{what} must be a list"))),
    }
}

/// Context pairs: `[{"positive", "negative"}, ...]` or one such object.
fn pairs(v: &Value, what: &str) -> Result<Vec<(VectorInput, VectorInput)>> {
    let one = |p: &Value, at: &str| -> Result<(VectorInput, VectorInput)> {
        let side = |key: &str| {
            p.get(key)
                .ok_or_else(|| bad(format!("{at}.{key} is missing")))
                .and_then(|v| vector_input(v, &format!("{at}.{key}")))
        };
        Ok((side("positive")?, side("negative")?))
    };
    match v {
        Value::Array(list) => list
            .iter()
            .enumerate()
            .map(|(i, p)| one(p, &format!("{what}[{i}]")))
            .collect(),
        Value::Object(_) => Ok(vec![one(v, what)?]),
        Value::Null => Ok(Vec::new()),
        _ => Err(bad(format!(
            "{what} must be a list of {{positive, negative}} pairs"
        ))),
    }
}

/// Qdrant's `QueryInterface`.
pub fn query(v: &Value) -> Result<Query> {
    let Value::Object(m) = v else {
        return Ok(Query::Nearest(vector_input(v, "query")?));
    };
    if m.contains_key("indices") {
        return Ok(Query::Nearest(vector_input(v, "query")?));
    }
    if m.contains_key("formula") {
        return Ok(Query::Formula(super::formula::Formula::from_json(v)?));
    }
    if let (Some(nearest), Some(mmr), 2) = (m.get("nearest"), m.get("mmr"), m.len()) {
        let diversity = match mmr.get("diversity") {
            None | Some(Value::Null) => 0.5,
            Some(d) => d
                .as_f64()
                .filter(|d| (0.0..=1.0).contains(d))
                .ok_or_else(|| {
                    validation(format!(
                        "query.mmr.diversity: value {d} invalid, must be from 0.0 to 1.0"
                    ))
                })? as f32,
        };
        return Ok(Query::NearestMmr {
            vector: vector_input(nearest, "query.nearest")?,
            diversity,
            candidates: opt_uint(mmr.get("candidates_limit"), "query.mmr.candidates_limit")?,
        });
    }
    let (kind, body) = match (m.len(), m.iter().next()) {
        (1, Some(entry)) => entry,
        _ => {
            return Err(bad(
                "query must name one kind: nearest, recommend, discover, context, order_by, \
                 fusion, rrf or sample",
            ))
        }
    };
    Ok(match kind.as_str() {
        "nearest" => Query::Nearest(vector_input(body, "query.nearest")?),
        "recommend" => Query::Recommend {
            positive: vector_list(body.get("positive"), "query.recommend.positive")?,
            negative: {
                let negative = vector_list(body.get("negative"), "query.recommend.negative")?;
                let no_positive = body
                    .get("positive")
                    .and_then(Value::as_array)
                    .is_none_or(Vec::is_empty);
                if no_positive && negative.is_empty() {
                    // Qdrant's schema rule (422), before the query runs.
                    return Err(validation(
                        "query.recommend: At least one positive or negative example is \
                         required",
                    ));
                }
                negative
            },
            strategy: match body.get("strategy").and_then(Value::as_str) {
                None | Some("average_vector") => RecommendStrategy::AverageVector,
                Some("best_score") => RecommendStrategy::BestScore,
                Some("sum_scores") => RecommendStrategy::SumScores,
                Some(other) => {
                    return Err(bad(format!(
                        "query.recommend.strategy {other:?} is not one of average_vector, \
                         best_score, sum_scores"
                    )))
                }
            },
        },
        "discover" => Query::Discover {
            target: vector_input(
                body.get("target")
                    .ok_or_else(|| bad("query.discover.target is missing"))?,
                "query.discover.target",
            )?,
            context: pairs(
                body.get("context").unwrap_or(&Value::Null),
                "query.discover.context",
            )?,
        },
        "context" => Query::Context(pairs(body, "query.context")?),
        "order_by" => order_by(body, "query.order_by")?,
        "fusion" => match body.as_str() {
            Some("rrf") => Query::Fusion(Fusion::Rrf {
                k: RRF_K,
                weights: None,
            }),
            Some("dbsf") => Query::Fusion(Fusion::Dbsf),
            _ => return Err(bad("query.fusion must be \"rrf\" or \"dbsf\"")),
        },
        "rrf" => Query::Fusion(Fusion::Rrf {
            k: opt_uint(body.get("k"), "query.rrf.k")?.unwrap_or(RRF_K),
            weights: match body.get("weights") {
                None | Some(Value::Null) => None,
                Some(Value::Array(w)) => Some(
                    w.iter()
                        .map(|x| {
                            x.as_f64()
                                .map(|f| f as f32)
                                .ok_or_else(|| bad("query.rrf.weights must be numbers"))
                        })
                        .collect::<Result<Vec<f32>>>()?,
                ),
                Some(_) => return Err(bad("query.rrf.weights must be a list")),
            },
        }),
        "relevance_feedback" => relevance_feedback(body)?,
        "sample" => match body.as_str() {
            Some("random") => Query::Sample,
            _ => return Err(bad("query.sample must be \"random\"")),
        },
        other => return Err(bad(format!("query kind {other:?} is not supported"))),
    })
}

/// `{"target", "feedback": [{"example", "score"}], "strategy": {"naive": {"a", "b", "c"}}}`.
fn relevance_feedback(body: &Value) -> Result<Query> {
    let at = "query.relevance_feedback";
    let target = vector_input(
        body.get("target")
            .ok_or_else(|| bad(format!("{at}.target is missing")))?,
        &format!("{at}.target"),
    )?;
    let items = body
        .get("feedback")
        .and_then(Value::as_array)
        .ok_or_else(|| bad(format!("{at}.feedback must be a list")))?;
    if items.is_empty() {
        return Err(validation(format!(
            "{at}.feedback: feedback elements must be non-empty"
        )));
    }
    // Every pair of examples is weighed: their number is bounded.
    if items.len() > MAX_FEEDBACK {
        return Err(validation(format!(
            "{at}.feedback: at most {MAX_FEEDBACK} examples, got {}",
            items.len()
        )));
    }
    let feedback = items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let example = item
                .get("example")
                .ok_or_else(|| bad(format!("{at}.feedback[{i}].example is missing")))?;
            let score = item
                .get("score")
                .and_then(Value::as_f64)
                .ok_or_else(|| bad(format!("{at}.feedback[{i}].score must be a number")))?;
            Ok((
                vector_input(example, &format!("{at}.feedback[{i}].example"))?,
                score as f32,
            ))
        })
        .collect::<Result<Vec<_>>>()?;
    let naive = body
        .get("strategy")
        .and_then(|s| s.get("naive"))
        .ok_or_else(|| {
            bad(format!(
                "{at}.strategy must be {{\"naive\": {{\"a\", \"b\", \"c\"}}}}"
            ))
        })?;
    let coefficient = |name: &str| -> Result<f32> {
        let v = naive
            .get(name)
            .and_then(Value::as_f64)
            .ok_or_else(|| bad(format!("{at}.strategy.naive.{name} must be a number")))?;
        if name == "b" && v < 0.0 {
            // Qdrant's words, which its suite checks.
            return Err(validation(format!(
                "internal.{at}.strategy.naive.b: value {v:?} invalid, must be 0.0 or larger"
            )));
        }
        Ok(v as f32)
    };
    Ok(Query::RelevanceFeedback {
        target,
        feedback,
        a: coefficient("a")?,
        b: coefficient("b")?,
        c: coefficient("c")?,
    })
}

/// `order_by`: a key, or `{"key", "direction": "asc" | "desc", "start_from"}`.
pub fn order_by(body: &Value, what: &str) -> Result<Query> {
    let (key, direction, start) = match body {
        Value::String(key) => (key.clone(), None, None),
        Value::Object(o) => (
            o.get("key")
                .and_then(Value::as_str)
                .ok_or_else(|| bad(format!("{what}.key is missing")))?
                .to_string(),
            o.get("direction").and_then(Value::as_str),
            o.get("start_from").filter(|v| !v.is_null()),
        ),
        _ => return Err(bad(format!("{what} must be a key"))),
    };
    let start_from = match start {
        None => None,
        Some(v) => Some(
            OrderValue::of(v)
                .ok_or_else(|| bad(format!("{what}.start_from must be a number or a date")))?,
        ),
    };
    Ok(Query::OrderBy {
        key,
        descending: match direction {
            None | Some("asc") => false,
            Some("desc") => true,
            Some(other) => {
                return Err(bad(format!(
                    "{what}.direction must be \"asc\" or \"desc\", got {other:?}"
                )))
            }
        },
        start_from,
    })
}

/// `params.idf`: `"global"` (every point, the default) or `{"corpus": filter}` (the points
/// IDF weights are counted over).
fn idf_corpus(v: Option<&Value>) -> Result<Option<crate::Filter>> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s == "global" => Ok(None),
        Some(Value::Object(m)) if m.contains_key("corpus") => json::filter(m.get("corpus")),
        Some(other) => Err(bad(format!(
            "params.idf must be \"global\" or {{\"corpus\": filter}}, got {other}"
        ))),
    }
}

/// One node of the tree: a body with `query`, `using`, `filter`, `limit`, `params`,
/// `score_threshold` and `prefetch` (one or a list).
fn node(body: &Value, top: bool, db: &Database) -> Result<QueryRequest> {
    let mut q = match body.get("query") {
        None | Some(Value::Null) => None,
        Some(v) => Some(query(v)?),
    };
    if let (Some(lookup), Some(q)) = (body.get("lookup_from").filter(|v| !v.is_null()), &mut q) {
        let using = body.get("using").and_then(Value::as_str).unwrap_or("");
        look_up(q, lookup, using, db)?;
    } else if let (Some(found), Some(q)) = (
        body.get("example_vectors").and_then(Value::as_object),
        &mut q,
    ) {
        with_found_vectors(q, found)?;
    }
    let limit = match body.get("limit") {
        None | Some(Value::Null) => DEFAULT_LIMIT,
        Some(v) => match v.as_u64() {
            // Qdrant's wording; a limit past what can be returned means all of them.
            Some(0) => {
                return Err(validation(
                    "internal.limit: value 0 invalid, must be 1 or larger",
                ))
            }
            Some(n) => usize::try_from(n)
                .unwrap_or(usize::MAX)
                .min(crate::MAX_RESULTS),
            None => return Err(bad("limit must be a positive integer")),
        },
    };
    let mut req = QueryRequest::new(q, limit);
    req.using = match body.get("using") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(u)) => u.clone(),
        Some(_) => return Err(bad("using must be a vector name")),
    };
    req.filter = json::filter(body.get("filter"))?;
    if top {
        req.offset = opt_uint(body.get("offset"), "offset")?.unwrap_or(0);
    }
    req.search_list = json::search_ef(body.get("params").and_then(|p| p.get("hnsw_ef")))?;
    req.idf_corpus = idf_corpus(body.get("params").and_then(|p| p.get("idf")))?;
    req.exact = json::search_exact(body.get("params"))?;
    req.score_threshold = match body.get("score_threshold") {
        None | Some(Value::Null) => None,
        Some(x) => Some(
            x.as_f64()
                .ok_or_else(|| bad("score_threshold must be a number"))? as f32,
        ),
    };
    req.prefetch = match body.get("prefetch") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(list)) => list
            .iter()
            .map(|p| node(p, false, db))
            .collect::<Result<_>>()?,
        Some(one @ Value::Object(_)) => vec![node(one, false, db)?],
        Some(_) => return Err(bad("prefetch must be an object or a list")),
    };
    Ok(req)
}

/// A query body in Qdrant's form (`points/query`), point ids of a `lookup_from`
/// resolved in `db`.
pub fn request(body: &Value, db: &Database) -> Result<QueryRequest> {
    node(body, true, db)
}

/// Every vector of `q` given as input (each may be a point id).
fn inputs_mut(q: &mut Query) -> Vec<&mut VectorInput> {
    match q {
        Query::Nearest(v) | Query::NearestMmr { vector: v, .. } => vec![v],
        Query::Recommend {
            positive, negative, ..
        } => positive.iter_mut().chain(negative.iter_mut()).collect(),
        Query::Discover { target, context } => std::iter::once(target)
            .chain(context.iter_mut().flat_map(|(p, n)| [p, n]))
            .collect(),
        Query::Context(pairs) => pairs.iter_mut().flat_map(|(p, n)| [p, n]).collect(),
        Query::RelevanceFeedback {
            target, feedback, ..
        } => std::iter::once(target)
            .chain(feedback.iter_mut().map(|(example, _)| example))
            .collect(),
        Query::OrderBy { .. } | Query::Fusion(_) | Query::Formula(_) | Query::Sample => Vec::new(),
    }
}

/// The point ids a node of a query body (`query` with `lookup_from`) names as examples: what
/// a router finds in the `lookup_from` collection and gives the node as
/// `lookup_from.points` (`{"<id>": vector}`) when that collection is elsewhere.
pub fn lookup_point_ids(node: &Value) -> Result<Vec<crate::PointId>> {
    let Some(mut q) = node
        .get("query")
        .filter(|v| !v.is_null())
        .map(query)
        .transpose()?
    else {
        return Ok(Vec::new());
    };
    Ok(inputs_mut(&mut q)
        .into_iter()
        .filter_map(|v| match v {
            VectorInput::Point(id) => Some(*id),
            _ => None,
        })
        .collect())
}

/// Gives each point id of `q` the vector a router found for it on another shard
/// (`"example_vectors": {"<id>": vector}` in a node of a query on a collection of several
/// shards); ids it did not find are looked up here.
fn with_found_vectors(q: &mut Query, found: &serde_json::Map<String, Value>) -> Result<()> {
    for v in inputs_mut(q) {
        let VectorInput::Point(id) = v else { continue };
        let Some(given) = found.get(&id.to_string()) else {
            continue;
        };
        let vector = match vector_input(given, "example_vectors")? {
            VectorInput::Point(_) => {
                return Err(bad("example_vectors must hold vectors, not point ids"))
            }
            vector => Box::new(vector),
        };
        *v = VectorInput::Found { id: *id, vector };
    }
    Ok(())
}

/// Replaces the point ids of `q` by their vectors in another collection (`lookup_from`:
/// `{"collection", "vector"}`; the vector space defaults to the node's `using`), or in the
/// vectors a router found there (`"points": {"<id>": vector}`). Such points are examples from
/// elsewhere, so they are not left out of the results.
fn look_up(q: &mut Query, lookup: &Value, using: &str, db: &Database) -> Result<()> {
    let name = lookup
        .get("collection")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("lookup_from.collection must be a name"))?;
    let space = lookup
        .get("vector")
        .and_then(Value::as_str)
        .unwrap_or(using);
    if let Some(given) = lookup.get("points").and_then(Value::as_object) {
        for v in inputs_mut(q) {
            let VectorInput::Point(id) = v else { continue };
            let found = given
                .get(&id.to_string())
                .ok_or(DbError::PointNotFound(*id))?;
            *v = match vector_input(found, "lookup_from.points")? {
                VectorInput::Point(_) => {
                    return Err(bad("lookup_from.points must hold vectors, not point ids"))
                }
                vector => vector,
            };
        }
        return Ok(());
    }
    let col = db
        .collection(name)
        .map_err(|_| DbError::NotFound(format!("Collection {name} not found")))?;
    let config = col.config();
    let known = config.dense_space(space).is_some()
        || config.sparse_space(space).is_some()
        || config.multi_space(space).is_some();
    for v in inputs_mut(q) {
        let VectorInput::Point(id) = v else { continue };
        let record = col
            .get(&[*id], false, true)?
            .pop()
            .ok_or(DbError::PointNotFound(*id))?;
        // Qdrant looks the point up first (404), then the space (400).
        if !known {
            return Err(DbError::InvalidInput(format!(
                "Not existing vector name error: {space}"
            )));
        }
        *v = match record.vectors.unwrap_or_default().remove(space) {
            Some(Vector::Dense(d)) => VectorInput::Dense(d),
            Some(Vector::Sparse(s)) => VectorInput::Sparse(s),
            Some(Vector::Multi(m)) => VectorInput::Multi(m),
            None => {
                return Err(bad(format!(
                    "point {id} of collection {name:?} has no vector in space {space:?}"
                )))
            }
        };
    }
    Ok(())
}
