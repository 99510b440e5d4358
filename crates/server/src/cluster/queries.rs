//! Universal queries (`/points/query`, `/points/query/batch`) on a collection of several
//! shards, where the replicas' answers are not enough by themselves:
//! - examples named by point id (recommend, discover, context, relevance feedback, a nearest
//!   point) are on one shard only: the router finds their vectors and hands them to every
//!   shard in the node (`example_vectors`), which compares by them and leaves the points out
//!   of its results as it does its own;
//! - a fusion (RRF, DBSF) ranks what its prefetches found over the whole collection: each
//!   prefetch is answered from every shard (merged by score) and fused here;
//! - a query with no vector lists points by id, a sample picks among all shards' picks, an
//!   order_by merges by the key's values (`ordered.rs`), an mmr picks among every shard's
//!   nearest (`mmr.rs`).
//!
//! Everything else (a vector with or without prefetches to re-score, a formula) is answered
//! whole by each shard and merged by score, as Qdrant merges its shards' answers.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use axum::response::Response;
use diskvec_cluster::CollectionMap;
use diskvec_db::query::score::{dbsf, rrf};
use diskvec_db::query::{Fusion, Query, RecommendStrategy};
use diskvec_db::{DbError, PointId};
use rand::seq::SliceRandom;
use serde_json::{json, Map, Value};

use super::lookups::{self, points_of, vector_in};
use super::merge::{merge_scored, merge_scroll};
use super::reads::{self, higher_first, per_shard_search, reached, scored_list, usize_field};
use super::{ClusterState, Routed};
use crate::envelope::{ok, ApiError};

/// How the shards' answers to a query node make the collection's.
#[derive(Debug)]
pub(super) enum Step {
    /// Merged by score, higher first when `Some(true)`, lower when `Some(false)`.
    Scored(Option<bool>),
    /// Fused from its prefetches' answers, each merged over the shards.
    Fused(Fusion),
    /// Points by id (no query).
    Listed,
    /// Random points (`sample`).
    Sampled,
    /// By a payload key's values (`order_by`).
    Ordered,
    /// Picked for variety among every shard's nearest (`mmr`).
    Diverse,
}

fn is_set(v: Option<&Value>) -> bool {
    v.is_some_and(|v| !v.is_null())
}

/// The step above the shards a query node needs; what cannot be merged yet is refused.
pub(super) fn step_of(map: &CollectionMap, node: &Value) -> Result<Step, ApiError> {
    let has_prefetch = is_set(node.get("prefetch"));
    let Some(q) = node.get("query").filter(|q| !q.is_null()) else {
        // Prefetches without a query are the replica's to refuse.
        return Ok(if has_prefetch {
            Step::Scored(None)
        } else {
            Step::Listed
        });
    };
    let metric_order = higher_first(map, node, true);
    Ok(match diskvec_db::query::json::query(q)? {
        Query::Fusion(f) if has_prefetch => {
            if node.get("using").and_then(Value::as_str).is_some() {
                return Err(ApiError::from(DbError::BadRequest(
                    "Fusion queries cannot be combined with the 'using' field.".into(),
                )));
            }
            Step::Fused(f)
        }
        Query::Nearest(_)
        | Query::Recommend {
            strategy: RecommendStrategy::AverageVector,
            ..
        } => Step::Scored(metric_order),
        Query::Sample => Step::Sampled,
        Query::NearestMmr { .. } => Step::Diverse,
        Query::OrderBy { .. } => Step::Ordered,
        // Similarity-like scores (recommendation by best or summed scores, discovery,
        // context, feedback, formulas) are better higher; a fusion without prefetches is
        // the replica's to refuse.
        _ => Step::Scored(Some(true)),
    })
}

/// The prefetches of a query node (one or a list).
fn prefetches_mut(node: &mut Value) -> Vec<&mut Value> {
    match node.get_mut("prefetch") {
        Some(Value::Array(list)) => list.iter_mut().collect(),
        Some(one @ Value::Object(_)) => vec![one],
        _ => Vec::new(),
    }
}

/// The example ids of every node of a query body (the node, then its prefetches however
/// deep, depth first) that names them in this collection (no `lookup_from`), with the
/// space they are compared in.
fn examples_of(
    node: &mut Value,
    out: &mut Vec<Option<(Vec<PointId>, String)>>,
) -> Result<(), ApiError> {
    let ids = if is_set(node.get("lookup_from")) {
        Vec::new()
    } else {
        diskvec_db::query::json::lookup_point_ids(node)?
    };
    out.push((!ids.is_empty()).then(|| (ids, node["using"].as_str().unwrap_or("").to_string())));
    for p in prefetches_mut(node) {
        examples_of(p, out)?;
    }
    Ok(())
}

/// Sets, in the same order as `examples_of` walked, each node's `example_vectors`.
fn give_vectors(node: &mut Value, found: &mut std::vec::IntoIter<Option<Map<String, Value>>>) {
    if let Some(Some(vectors)) = found.next() {
        node["example_vectors"] = Value::Object(vectors);
    }
    for p in prefetches_mut(node) {
        give_vectors(p, found);
    }
}

/// Gives every node of `body` that names examples of this collection by point id (no
/// `lookup_from`) their vectors, as `example_vectors`, found on whichever shard holds them.
pub(super) async fn with_examples(
    c: &Arc<ClusterState>,
    r: &Routed,
    body: &mut Value,
) -> Result<(), ApiError> {
    let mut wanted = Vec::new();
    examples_of(body, &mut wanted)?;
    if wanted.iter().all(Option::is_none) {
        return Ok(());
    }
    let mut found = Vec::with_capacity(wanted.len());
    for node in wanted {
        let Some((ids, space)) = node else {
            found.push(None);
            continue;
        };
        let points = points_of(
            c,
            &r.name,
            &ids,
            json!(false),
            if space.is_empty() {
                json!(true)
            } else {
                json!([space])
            },
            r.query.clone(),
        )
        .await?;
        let mut vectors = Map::new();
        for id in &ids {
            let point = points
                .iter()
                .find(|p| PointId::from_json(&p["id"]).ok() == Some(*id))
                .ok_or(DbError::PointNotFound(*id))?;
            let vector = vector_in(point, &space).ok_or_else(|| {
                DbError::InvalidInput(format!("point {id} has no vector in space {space:?}"))
            })?;
            vectors.insert(id.to_string(), vector);
        }
        found.push(Some(vectors));
    }
    give_vectors(body, &mut found.into_iter());
    Ok(())
}

type Page<'a> = Pin<Box<dyn Future<Output = Result<Vec<Value>, ApiError>> + Send + 'a>>;

/// The page of query node `node` (examples already given their vectors) over `shards`.
pub(super) fn answer<'a>(
    c: &'a Arc<ClusterState>,
    map: &'a CollectionMap,
    r: &'a Routed,
    shards: &'a [u32],
    node: &'a Value,
) -> Page<'a> {
    Box::pin(async move {
        if node.get("limit").and_then(Value::as_u64) == Some(0) {
            // One node's words (its limit's check), before any shard is asked.
            return Err(ApiError::from(DbError::Validation(
                "internal.limit: value 0 invalid, must be 1 or larger".into(),
            )));
        }
        match step_of(map, node)? {
            Step::Fused(fusion) => fused(c, map, r, shards, node, fusion).await,
            Step::Scored(order) => {
                let (per_shard, offset, limit) = per_shard_search(node)?;
                let lists = ask(c, map, r, shards, &per_shard).await?;
                Ok(merge_scored(lists, offset, limit, order))
            }
            Step::Listed => {
                let (per_shard, offset, limit) = per_shard_search(node)?;
                let lists = ask(c, map, r, shards, &per_shard).await?;
                let (mut page, _) = merge_scroll(lists, offset + limit);
                Ok(page.split_off(offset.min(page.len())))
            }
            Step::Ordered => super::ordered::query(c, map, r, shards, node).await,
            Step::Diverse => super::mmr::query(c, map, r, shards, node).await,
            Step::Sampled => {
                let (per_shard, offset, limit) = per_shard_search(node)?;
                let mut all: Vec<Value> = ask(c, map, r, shards, &per_shard)
                    .await?
                    .into_iter()
                    .flatten()
                    .collect();
                all.shuffle(&mut rand::rng());
                Ok(all.into_iter().skip(offset).take(limit).collect())
            }
        }
    })
}

/// Each shard's scored list for query node `node`.
pub(super) async fn ask(
    c: &Arc<ClusterState>,
    map: &CollectionMap,
    r: &Routed,
    shards: &[u32],
    node: &Value,
) -> Result<Vec<Vec<Value>>, ApiError> {
    c.each_shard(map, r, shards, "/points/query", node, scored_list)
        .await
}

/// A node's prefetches as the router answers each over every shard: the node's filter holds
/// for them too (Qdrant's rule), and only ids and scores are asked.
pub(super) fn prefetches_under(node: &Value) -> Result<Vec<Value>, ApiError> {
    let prefetches: Vec<Value> = match &node["prefetch"] {
        Value::Array(list) => list.clone(),
        one @ Value::Object(_) => vec![one.clone()],
        _ => {
            return Err(ApiError::bad_request(
                "prefetch must be an object or a list",
            ))
        }
    };
    let filter = node.get("filter").filter(|f| !f.is_null());
    prefetches
        .into_iter()
        .map(|mut p| {
            if !p.is_object() {
                return Err(ApiError::bad_request("a prefetch must be a JSON object"));
            }
            if let Some(f) = filter {
                p["filter"] = reads::filter_and(&p, f.clone());
            }
            p["with_payload"] = json!(false);
            p["with_vector"] = json!(false);
            Ok(p)
        })
        .collect()
}

/// A fusion node: each prefetch answered over every shard (the node's filter holds for its
/// prefetches too), fused, then the page's points read with what the node shows of them.
async fn fused(
    c: &Arc<ClusterState>,
    map: &CollectionMap,
    r: &Routed,
    shards: &[u32],
    node: &Value,
    fusion: Fusion,
) -> Result<Vec<Value>, ApiError> {
    let prefetches = prefetches_under(node)?;
    let mut lists: Vec<Vec<(PointId, f32)>> = Vec::with_capacity(prefetches.len());
    let mut versions: Map<String, Value> = Map::new();
    for p in prefetches {
        // Lower-is-better scores (distances) are negated for DBSF, as the replica does.
        let sign = match step_of(map, &p)? {
            Step::Scored(Some(false)) => -1.0,
            _ => 1.0,
        };
        let hits = answer(c, map, r, shards, &p).await?;
        let mut list = Vec::with_capacity(hits.len());
        for h in hits {
            let id = PointId::from_json(&h["id"]).map_err(|e| {
                ApiError::unavailable(format!("a shard answered a bad point id: {e}"))
            })?;
            versions
                .entry(id.to_string())
                .or_insert_with(|| h["version"].clone());
            list.push((id, sign * h["score"].as_f64().unwrap_or(0.0) as f32));
        }
        lists.push(list);
    }
    let mut ranked = match fusion {
        Fusion::Rrf { k, weights } => {
            let ids: Vec<Vec<PointId>> = lists
                .iter()
                .map(|l| l.iter().map(|p| p.0).collect())
                .collect();
            rrf(&ids, k, weights.as_deref())
        }
        Fusion::Dbsf => dbsf(&lists),
    };
    if let Some(t) = node.get("score_threshold").and_then(Value::as_f64) {
        ranked.retain(|p| f64::from(p.1) >= t);
    }
    let offset = usize_field(node, "offset", 0)?;
    let limit = usize_field(node, "limit", 10)?;
    let page: Vec<(PointId, f32)> = ranked.into_iter().skip(offset).take(limit).collect();
    if page.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<PointId> = page.iter().map(|p| p.0).collect();
    let with_payload = node.get("with_payload").cloned().unwrap_or(json!(false));
    let with_vector = node
        .get("with_vector")
        .or_else(|| node.get("with_vectors"))
        .cloned()
        .unwrap_or(json!(false));
    let records = points_of(c, &r.name, &ids, with_payload, with_vector, r.query.clone()).await?;
    // A point deleted since a prefetch found it is left out.
    Ok(page
        .into_iter()
        .filter_map(|(id, score)| {
            let rec = records
                .iter()
                .find(|p| PointId::from_json(&p["id"]).ok() == Some(id))?;
            Some(json!({
                "id": rec["id"],
                "version": versions.get(&id.to_string()).cloned().unwrap_or(json!(0)),
                "score": score,
                "payload": rec.get("payload").cloned().unwrap_or(Value::Null),
                "vector": rec.get("vector").cloned().unwrap_or(Value::Null),
            }))
        })
        .collect())
}

/// `/points/query`.
pub async fn query(
    c: &Arc<ClusterState>,
    map: &CollectionMap,
    mut r: Routed,
) -> Result<Response, ApiError> {
    lookups::inline(c, &mut r).await?;
    let (shards, mut body) = reached(map, &r.json()?)?;
    if shards.len() < 2 {
        return reads::forward_whole(c, map, r).await;
    }
    if !body.is_object() {
        return Err(ApiError::bad_request("expected a JSON object"));
    }
    with_examples(c, &r, &mut body).await?;
    let points = answer(c, map, &r, &shards, &body).await?;
    Ok(ok(json!({ "points": points }), r.started))
}

/// `/points/query/batch`: searches a vector merges whole go to the shards as one batch
/// each; a batch with any other is answered one query at a time.
pub async fn batch(
    c: &Arc<ClusterState>,
    map: &CollectionMap,
    mut r: Routed,
) -> Result<Response, ApiError> {
    lookups::inline(c, &mut r).await?;
    let body = r.json()?;
    let searches = body
        .get("searches")
        .and_then(Value::as_array)
        .cloned()
        .ok_or_else(|| ApiError::bad_request("searches: expected a list"))?;
    let plain = searches.iter().all(|s| reads::merges_by_score(s, true));
    let several = searches
        .iter()
        .map(|s| reached(map, s).map(|(shards, _)| shards.len() > 1))
        .collect::<Result<Vec<bool>, ApiError>>()?;
    if plain || !several.iter().any(|&s| s) {
        return reads::scored_batch(c, map, r).await;
    }
    let mut out = Vec::with_capacity(searches.len());
    for s in &searches {
        let (shards, mut s) = reached(map, s)?;
        if !s.is_object() {
            return Err(ApiError::bad_request("a search must be a JSON object"));
        }
        with_examples(c, &r, &mut s).await?;
        out.push(json!({ "points": answer(c, map, &r, &shards, &s).await? }));
    }
    Ok(ok(out, r.started))
}
