//! Maximal marginal relevance (`{"nearest": v, "mmr": {"diversity", "candidates_limit"}}`)
//! on a collection of several shards, as Qdrant's collection layer does it: each shard
//! answers its `candidates` nearest with their vectors, and the router picks among all of
//! them by the same rule a replica uses (`diskvec_db::query::score::mmr_pick`). Over
//! prefetches, the candidates are the nearest among the points the prefetches found over
//! the whole collection. Candidates compare as the database compares them
//! (`score::Likeness`): by the metric in a dense space, by the dot product in a sparse one,
//! by MaxSim in a multivector one.

use std::sync::Arc;

use diskvec_cluster::CollectionMap;
use diskvec_db::query::score::{mmr_pick, Likeness};
use diskvec_db::query::{Query, VectorInput};
use diskvec_db::{DbError, Metric, Vector};
use serde_json::{json, Value};

use super::lookups::vector_in;
use super::merge::merge_scored;
use super::reads::{higher_first, usize_field};
use super::{ClusterState, Routed};
use crate::envelope::ApiError;

/// The metric of dense space `using`, from the collection's configuration; `None` when it
/// is no dense space of it (missing, sparse, or of multivectors).
pub(super) fn dense_metric(map: &CollectionMap, using: &str) -> Option<Metric> {
    match likeness_of(map, using)? {
        Likeness::Dense(metric) => Some(metric),
        _ => None,
    }
}

pub(super) fn floats(v: &Value) -> Option<Vec<f32>> {
    v.as_array()?
        .iter()
        .map(|x| x.as_f64().map(|f| f as f32))
        .collect()
}

/// How the vectors of space `using` compare, from the collection's configuration at its
/// creation; `None` when it names no such space.
fn likeness_of(map: &CollectionMap, using: &str) -> Option<Likeness> {
    let config = crate::convert::collection_config(&map.config).ok()?;
    if let Some(i) = config.dense_space(using) {
        return Some(Likeness::Dense(config.dense[i].metric));
    }
    if let Some(i) = config.multi_space(using) {
        let space = &config.multi[i];
        return Some(Likeness::Multi {
            metric: space.metric,
            dim: space.dim,
        });
    }
    config.sparse_space(using).map(|_| Likeness::Sparse)
}

/// The query vector of an mmr node: given, or the vector the router found for the point it
/// names (`example_vectors`, `lookup_from.points`).
fn query_vector(node: &Value, input: &VectorInput) -> Result<Vector, ApiError> {
    Ok(match input {
        VectorInput::Dense(v) => Vector::Dense(v.clone()),
        VectorInput::Sparse(v) => Vector::Sparse(v.clone()),
        VectorInput::Multi(rows) => Vector::Multi(rows.clone()),
        VectorInput::Found { vector, .. } => return query_vector(node, vector),
        VectorInput::Point(id) => {
            let key = id.to_string();
            let found = node["example_vectors"]
                .get(&key)
                .or_else(|| node["lookup_from"]["points"].get(&key))
                .ok_or(DbError::PointNotFound(*id))?;
            crate::convert::one_vector(found, "the example's vector")?
        }
    })
}

/// The vectors the request asks its answer to show (`with_vector`, or `with_vectors`).
fn vectors_wanted(node: &Value) -> Value {
    node.get("with_vector")
        .or_else(|| node.get("with_vectors"))
        .cloned()
        .unwrap_or(Value::Null)
}

/// What each shard is asked to show of its candidates' vectors (the space compared in,
/// always); `shown` then shows them as the request asked.
fn vectors_asked(node: &Value, using: &str) -> Value {
    match vectors_wanted(node) {
        Value::Bool(true) => json!(true),
        Value::Array(mut names) if !using.is_empty() => {
            if !names.iter().any(|n| n == using) {
                names.push(json!(using));
            }
            Value::Array(names)
        }
        _ if using.is_empty() => json!(true),
        _ => json!([using]),
    }
}

fn shown(node: &Value, using: &str, mut point: Value) -> Value {
    match vectors_wanted(node) {
        Value::Bool(true) => {}
        Value::Array(names) if !names.iter().any(|n| n == using) => {
            if let Some(map) = point["vector"].as_object_mut() {
                map.remove(using);
            }
        }
        Value::Array(_) => {}
        _ => point["vector"] = Value::Null,
    }
    point
}

/// The page of an mmr query node over `shards`.
pub(super) async fn query(
    c: &Arc<ClusterState>,
    map: &CollectionMap,
    r: &Routed,
    shards: &[u32],
    node: &Value,
) -> Result<Vec<Value>, ApiError> {
    let Query::NearestMmr {
        vector,
        diversity,
        candidates,
    } = diskvec_db::query::json::query(&node["query"])?
    else {
        return Err(ApiError::bad_request("expected a nearest query with mmr"));
    };
    if !(0.0..=1.0).contains(&diversity) {
        return Err(ApiError::from(DbError::InvalidInput(format!(
            "mmr.diversity must be from 0 to 1, got {diversity}"
        ))));
    }
    let using = node["using"].as_str().unwrap_or("").to_string();
    let likeness = likeness_of(map, &using).ok_or_else(|| {
        ApiError::bad_request(format!(
            "Wrong input: Not existing vector name error: {using}"
        ))
    })?;
    let mut target = query_vector(node, &vector)?;
    likeness.prepare(&mut target);
    let offset = usize_field(node, "offset", 0)?;
    let limit = usize_field(node, "limit", 10)?;
    let want = offset + limit;
    let size = candidates.unwrap_or(limit).max(want).max(1);

    let mut nearest = node.clone();
    nearest["query"] = json!({ "nearest": node["query"]["nearest"] });
    nearest["limit"] = json!(size);
    nearest["offset"] = json!(0);
    nearest["with_vector"] = vectors_asked(node, &using);
    if let Some(n) = nearest.as_object_mut() {
        n.remove("with_vectors");
        if n.remove("prefetch").is_some_and(|p| !p.is_null()) {
            // The candidates are the nearest among what the prefetches found over the
            // whole collection, as one node takes them: each shard lists those it holds
            // and scores them exactly (a search filtered to a few ids would walk the graph
            // far for them).
            let pool = pool_of(c, map, r, shards, node).await?;
            let listed = pool.len().max(1);
            nearest["prefetch"] = json!({
                "filter": { "must": [{ "has_id": pool }] },
                "limit": listed,
            });
        }
    }
    let lists = super::queries::ask(c, map, r, shards, &nearest).await?;
    let found = merge_scored(lists, 0, size, higher_first(map, node, true));
    let mut pool = Vec::with_capacity(found.len());
    for point in found {
        let stored = vector_in(&point, &using);
        if let Some(v) = stored.and_then(|v| crate::convert::one_vector(&v, "a vector").ok()) {
            pool.push((point, v));
        }
    }
    let vectors: Vec<Vector> = pool.iter().map(|(_, v)| v.clone()).collect();
    // Candidates squared similarities: off the async threads.
    let picked = tokio::task::spawn_blocking(move || {
        let relevance: Vec<f32> = vectors
            .iter()
            .map(|v| likeness.between(&target, v))
            .collect();
        mmr_pick(
            &relevance,
            |best, i| likeness.between(&vectors[best], &vectors[i]),
            diversity,
            want,
        )
    })
    .await
    .map_err(|e| ApiError::unavailable(format!("mmr was not computed: {e}")))?;
    Ok(picked
        .into_iter()
        .skip(offset)
        .map(|i| shown(node, &using, pool[i].0.clone()))
        .collect())
}

/// The points an mmr node's prefetches found, each prefetch answered over every shard (side
/// by side), in first-found order without repeats.
async fn pool_of(
    c: &Arc<ClusterState>,
    map: &CollectionMap,
    r: &Routed,
    shards: &[u32],
    node: &Value,
) -> Result<Vec<Value>, ApiError> {
    let prefetches = super::queries::prefetches_under(node)?;
    let asks = prefetches
        .iter()
        .map(|p| super::queries::answer(c, map, r, shards, p));
    let (mut pool, mut seen) = (Vec::new(), std::collections::HashSet::new());
    for hits in futures_util::future::join_all(asks).await {
        for hit in hits? {
            if seen.insert(hit["id"].to_string()) {
                pool.push(hit["id"].clone());
            }
        }
    }
    Ok(pool)
}
