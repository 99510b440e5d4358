//! Reads on a cluster collection: by id to the shard holding the id; searches, counts and
//! scrolls to one live replica of every shard, merged.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::response::{IntoResponse, Response};
use diskvec_cluster::keys::shard_in;
use diskvec_cluster::{CollectionMap, KeySelector};
use diskvec_db::PointId;
use serde_json::{json, Value};

use super::merge::{merge_scored, merge_scroll};
use super::split::without_shard_key;
use super::{ClusterState, Routed};
use crate::envelope::{ok, ApiError};

pub(super) fn usize_field(body: &Value, field: &str, default: usize) -> Result<usize, ApiError> {
    match body.get(field) {
        None | Some(Value::Null) => Ok(default),
        Some(v) => v.as_u64().map(|n| n as usize).ok_or_else(|| {
            ApiError::bad_request(format!("{field} must be a whole number, got {v}"))
        }),
    }
}

/// The shards a read reaches (by its `shard_key`; every shard when it names none) and its
/// body as their replicas take it (without the key: a replica holds one shard).
pub(super) fn reached(map: &CollectionMap, body: &Value) -> Result<(Vec<u32>, Value), ApiError> {
    let selector = KeySelector::of(body).map_err(ApiError::bad_request)?;
    let shards = map
        .shards_reached(&selector)
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    Ok((shards, without_shard_key(body)))
}

/// The request as it is, to one live replica of `shard`, answered as that replica answers.
async fn forward_to(
    c: &Arc<ClusterState>,
    map: &CollectionMap,
    r: Routed,
    shard: u32,
) -> Result<Response, ApiError> {
    let a = c
        .read_shard(&r.name, map, shard, &r.shard_read(r.body.clone()))
        .await?;
    Ok((a.status, axum::Json(a.body)).into_response())
}

/// A read that reaches one shard: the request as it is (less its key), to one live replica.
pub async fn forward_whole(
    c: &Arc<ClusterState>,
    map: &CollectionMap,
    mut r: Routed,
) -> Result<Response, ApiError> {
    let (shards, body) = if r.method == axum::http::Method::POST {
        reached(map, &r.json()?)?
    } else {
        (map.active_shards(), Value::Null)
    };
    if shards.is_empty() {
        return Err(ApiError::bad_request(format!(
            "collection {} has no shard yet: it is sharded by key, and no key was made (PUT /collections/{}/shards)",
            r.name, r.name
        )));
    }
    let Some(&shard) = shards.first().filter(|_| shards.len() == 1) else {
        return Err(ApiError::bad_request(format!(
            "{} /collections/{}{} reaches {} shards: it is not supported on more than one yet",
            r.method,
            r.name,
            r.tail,
            shards.len()
        )));
    };
    if !body.is_null() {
        r.body = Bytes::from(body.to_string());
    }
    forward_to(c, map, r, shard).await
}

pub async fn get_one(
    c: &Arc<ClusterState>,
    map: &CollectionMap,
    r: Routed,
) -> Result<Response, ApiError> {
    let raw = r.tail.trim_start_matches("/points/");
    let id = match raw.parse::<u64>() {
        Ok(n) => PointId::Num(n),
        Err(_) => PointId::parse_uuid(raw)
            .map_err(|e| ApiError::bad_request(format!("point id {raw:?}: {e}")))?,
    };
    // One shard per key to ask (the id's within each key's shards); the first that has it.
    let groups = map
        .groups(&KeySelector::Unset, false)
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let mut last = None;
    for group in groups {
        let shard = shard_in(&group, id);
        let a = c
            .read_shard(&r.name, map, shard, &r.shard_read(r.body.clone()))
            .await?;
        if a.status != axum::http::StatusCode::NOT_FOUND {
            return Ok((a.status, axum::Json(a.body)).into_response());
        }
        last = Some(a);
    }
    match last {
        Some(a) => Ok((a.status, axum::Json(a.body)).into_response()),
        None => Err(ApiError::not_found(format!("No point with id {id} found"))),
    }
}

pub async fn retrieve(
    c: &Arc<ClusterState>,
    map: &CollectionMap,
    r: Routed,
) -> Result<Response, ApiError> {
    let body = r.json()?;
    let selector = KeySelector::of(&body).map_err(ApiError::bad_request)?;
    let groups = map
        .groups(&selector, false)
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    if groups.len() == 1 && groups[0].len() == 1 {
        return forward_whole(c, map, r).await;
    }
    let body = without_shard_key(&body);
    let ids = body
        .get("ids")
        .and_then(Value::as_array)
        .ok_or_else(|| ApiError::bad_request("ids: expected a list of point ids"))?;
    let mut parsed = Vec::with_capacity(ids.len());
    // Each id to its shard within each key's shards.
    let mut per_shard: Vec<Vec<Value>> = vec![Vec::new(); map.shards.len()];
    for (i, id) in ids.iter().enumerate() {
        let p =
            PointId::from_json(id).map_err(|e| ApiError::bad_request(format!("ids[{i}]: {e}")))?;
        for group in &groups {
            per_shard[shard_in(group, p) as usize].push(id.clone());
        }
        parsed.push(p);
    }
    let mut found: HashMap<PointId, Value> = HashMap::new();
    for (shard, ids) in per_shard.into_iter().enumerate() {
        if ids.is_empty() {
            continue;
        }
        let mut b = body.clone();
        b["ids"] = Value::Array(ids);
        let a = c
            .read_shard(
                &r.name,
                map,
                shard as u32,
                &r.shard_read(Bytes::from(b.to_string())),
            )
            .await?;
        if !a.status.is_success() {
            return Err(a.error());
        }
        for p in a.result().as_array().into_iter().flatten() {
            if let Ok(id) = PointId::from_json(&p["id"]) {
                found.insert(id, p.clone());
            }
        }
    }
    // In the order asked, each id once.
    let mut out = Vec::with_capacity(found.len());
    for id in parsed {
        if let Some(p) = found.remove(&id) {
            out.push(p);
        }
    }
    Ok(ok(out, r.started))
}

pub async fn count(
    c: &Arc<ClusterState>,
    map: &CollectionMap,
    r: Routed,
) -> Result<Response, ApiError> {
    let (shards, body) = reached(map, &r.json()?)?;
    let count_of = |a: &Value| a["count"].as_u64().unwrap_or(0);
    let counts = c
        .each_shard(map, &r, &shards, &r.tail, &body, count_of)
        .await?;
    let total: u64 = counts.into_iter().sum();
    Ok(ok(json!({ "count": total }), r.started))
}

pub async fn scroll(
    c: &Arc<ClusterState>,
    map: &CollectionMap,
    r: Routed,
) -> Result<Response, ApiError> {
    let body = r.json()?;
    if !body.is_object() {
        return Err(ApiError::bad_request("expected a JSON object"));
    }
    let (shards, mut body) = reached(map, &body)?;
    if shards.len() == 1 {
        return forward_whole(c, map, r).await;
    }
    if body.get("order_by").is_some_and(|o| !o.is_null()) {
        let points = super::ordered::scroll(c, map, &r, &shards, &body).await?;
        return Ok(ok(
            json!({ "points": points, "next_page_offset": null }),
            r.started,
        ));
    }
    let limit = usize_field(&body, "limit", 10)?;
    // One more than asked from each shard: the first id past the page is the next offset.
    body["limit"] = json!(limit + 1);
    let pages = c
        .each_shard(map, &r, &shards, &r.tail, &body, points_in)
        .await?;
    let (points, next) = merge_scroll(pages, limit);
    Ok(ok(
        json!({ "points": points, "next_page_offset": next }),
        r.started,
    ))
}

/// Whether a query's answer can be merged from the shards' answers by score: a vector (dense
/// or sparse) to search by, with no prefetch to fuse. Queries by a point's id, recommend,
/// discover, fusion and order_by need a step above the shards that is not built yet.
pub(super) fn merges_by_score(search: &Value, is_query: bool) -> bool {
    if !is_query {
        return true;
    }
    if search.get("prefetch").is_some_and(|p| !p.is_null()) {
        return false;
    }
    let vector = |v: &Value| v.is_array() || v.get("indices").is_some();
    match search.get("query") {
        Some(q) if vector(q) => true,
        Some(Value::Object(o)) => o.get("nearest").is_some_and(vector),
        _ => false,
    }
}

/// Whether the metric of the space a search runs in ranks higher scores first (similarities)
/// or lower (Euclid and Manhattan distances); `None` when the configuration does not say
/// (a sparse space: higher first, as the merge then reads from the lists).
pub(super) fn higher_first(map: &CollectionMap, search: &Value, is_query: bool) -> Option<bool> {
    let vectors = map.config.get("vectors")?;
    let space = if is_query {
        search.get("using").and_then(Value::as_str).unwrap_or("")
    } else {
        search
            .get("vector")
            .and_then(|v| v.get("name"))
            .and_then(Value::as_str)
            .unwrap_or("")
    };
    // The unnamed space's parameters are `vectors` itself; any other name there is sparse.
    let params = if vectors.get("distance").is_some() {
        space.is_empty().then_some(vectors)?
    } else {
        vectors.get(space)?
    };
    let distance = params.get("distance")?.as_str()?.to_ascii_lowercase();
    Some(!matches!(distance.as_str(), "euclid" | "manhattan"))
}

/// A search asked of every shard for its best `limit + offset`.
pub(super) fn per_shard_search(search: &Value) -> Result<(Value, usize, usize), ApiError> {
    if !search.is_object() {
        return Err(ApiError::bad_request("a search must be a JSON object"));
    }
    let limit = usize_field(search, "limit", 10)?;
    let offset = usize_field(search, "offset", 0)?;
    let mut s = search.clone();
    s["limit"] = json!(limit + offset);
    s["offset"] = json!(0);
    Ok((s, offset, limit))
}

/// The scored list of one answer: `search` answers a list, `query` an object with `points`.
pub(super) fn scored_list(result: &Value) -> Vec<Value> {
    match result {
        Value::Array(list) => list.clone(),
        other => other["points"].as_array().cloned().unwrap_or_default(),
    }
}

/// The filter of a read's `node` with `condition` added: both must hold.
pub(super) fn filter_and(node: &Value, condition: Value) -> Value {
    match node.get("filter").filter(|f| !f.is_null()) {
        Some(f) => json!({ "must": [f, condition] }),
        None => json!({ "must": [condition] }),
    }
}

/// The points of a scroll's answer.
pub(super) fn points_in(result: &Value) -> Vec<Value> {
    result["points"].as_array().cloned().unwrap_or_default()
}

fn shaped(is_query: bool, points: Vec<Value>) -> Value {
    if is_query {
        json!({ "points": points })
    } else {
        Value::Array(points)
    }
}

pub async fn scored(
    c: &Arc<ClusterState>,
    map: &CollectionMap,
    r: Routed,
) -> Result<Response, ApiError> {
    let is_query = r.tail.ends_with("/query");
    let (shards, body) = reached(map, &r.json()?)?;
    if shards.len() == 1 {
        return forward_whole(c, map, r).await;
    }
    if !merges_by_score(&body, is_query) {
        return Err(ApiError::bad_request(
            "this query (by point id, recommend, discover, fusion or order_by) is not supported on a collection of several shards yet; query by a vector",
        ));
    }
    let (per_shard, offset, limit) = per_shard_search(&body)?;
    let lists = c
        .each_shard(map, &r, &shards, &r.tail, &per_shard, scored_list)
        .await?;
    let order = higher_first(map, &body, is_query);
    Ok(ok(
        shaped(is_query, merge_scored(lists, offset, limit, order)),
        r.started,
    ))
}

pub async fn scored_batch(
    c: &Arc<ClusterState>,
    map: &CollectionMap,
    r: Routed,
) -> Result<Response, ApiError> {
    let is_query = r.tail.ends_with("/query/batch");
    let mut body = r.json()?;
    if !body.is_object() {
        return Err(ApiError::bad_request("expected a JSON object"));
    }
    let searches = body
        .get("searches")
        .and_then(Value::as_array)
        .cloned()
        .ok_or_else(|| ApiError::bad_request("searches: expected a list"))?;
    // Every search of the batch asks the same shards, once: the shards of their keys.
    let mut reached_by = searches.iter().map(|s| reached(map, s));
    let shards = match reached_by.next() {
        Some(first) => first?.0,
        None => map.active_shards(),
    };
    for other in reached_by {
        if other?.0 != shards {
            return Err(ApiError::bad_request(
                "the searches of a batch on a collection of several shards must name the same shard keys",
            ));
        }
    }
    let searches: Vec<Value> = searches.iter().map(without_shard_key).collect();
    if shards.len() == 1 {
        body["searches"] = Value::Array(searches);
        let mut r = r;
        r.body = Bytes::from(body.to_string());
        return forward_to(c, map, r, shards[0]).await;
    }
    let mut pages = Vec::with_capacity(searches.len());
    let orders: Vec<Option<bool>> = searches
        .iter()
        .map(|s| higher_first(map, s, is_query))
        .collect();
    let mut per_shard = Vec::with_capacity(searches.len());
    for s in &searches {
        if !merges_by_score(s, is_query) {
            return Err(ApiError::bad_request(
                "a query of this batch (by point id, recommend, discover, fusion or order_by) is not supported on a collection of several shards yet",
            ));
        }
        let (one, offset, limit) = per_shard_search(s)?;
        per_shard.push(one);
        pages.push((offset, limit));
    }
    body["searches"] = Value::Array(per_shard);
    let answers = c
        .read_all_shards(
            &r.name,
            map,
            &shards,
            r.shard_read(Bytes::from(body.to_string())),
        )
        .await?;
    let mut out = Vec::with_capacity(pages.len());
    for (i, (offset, limit)) in pages.into_iter().enumerate() {
        let lists = answers
            .iter()
            .map(|a| scored_list(&a.result()[i]))
            .collect();
        out.push(shaped(
            is_query,
            merge_scored(lists, offset, limit, orders[i]),
        ));
    }
    Ok(ok(out, r.started))
}
