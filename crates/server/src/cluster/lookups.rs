//! `lookup_from` and `with_lookup` on a cluster collection. The collection they name is a
//! cluster collection too, whose points are on other replicas than the one answering, so the
//! router finds them itself: the example points of a `lookup_from` are handed to the replica
//! in the body (`lookup_from.points`, which the database reads instead of a local
//! collection), and a groups request's `with_lookup` is taken out and answered after, from
//! the groups' ids.

use std::sync::Arc;

use axum::body::Bytes;
use axum::http::Method;
use axum::response::{IntoResponse, Response};
use diskvec_db::{DbError, PointId};
use serde_json::{json, Map, Value};

use super::{reads, ClusterState, Routed};
use crate::envelope::ApiError;

/// The points of a cluster collection `name` (an alias is followed) with these ids, as a
/// retrieve through the router answers them: `{"id", "payload"?, "vector"?}` each. `query`:
/// the query string of the request they serve (its `consistency` holds for them too).
pub(super) async fn points_of(
    c: &Arc<ClusterState>,
    name: &str,
    ids: &[PointId],
    with_payload: Value,
    with_vector: Value,
    query: Option<String>,
) -> Result<Vec<Value>, ApiError> {
    let name = c.node.view().resolve(name).to_string();
    let map = c
        .collection(&name)
        .map_err(|_| ApiError::from(DbError::NotFound(format!("Collection {name} not found"))))?;
    let body = json!({
        "ids": ids.iter().map(|id| id.to_json()).collect::<Vec<_>>(),
        "with_payload": with_payload,
        "with_vector": with_vector,
    });
    let r = Routed {
        method: Method::POST,
        name,
        tail: "/points".into(),
        query,
        body: Bytes::from(body.to_string()),
        started: std::time::Instant::now(),
    };
    let answer = reads::retrieve(c, &map, r).await?;
    let (status, value) = decode(answer).await?;
    if !status.is_success() {
        return Err(ApiError {
            status,
            message: value["status"]["error"]
                .as_str()
                .map_or_else(|| value.to_string(), str::to_string),
            retry_after: None,
        });
    }
    Ok(value["result"].as_array().cloned().unwrap_or_default())
}

async fn decode(answer: Response) -> Result<(axum::http::StatusCode, Value), ApiError> {
    let status = answer.status();
    let bytes = axum::body::to_bytes(answer.into_body(), usize::MAX)
        .await
        .map_err(|e| ApiError::unavailable(format!("reading an answer: {e}")))?;
    let value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    Ok((status, value))
}

/// The vector of `space` in a retrieved point's `vector` (the unnamed space's is the value
/// itself).
pub(super) fn vector_in(point: &Value, space: &str) -> Option<Value> {
    match &point["vector"] {
        Value::Object(named) if !named.contains_key("indices") => named.get(space).cloned(),
        v @ (Value::Array(_) | Value::Object(_)) if space.is_empty() => Some(v.clone()),
        _ => None,
    }
}

/// Gives one node of a query body (a `query` with a `lookup_from`) the vectors of the points
/// it names, as `lookup_from.points`.
async fn resolve_node(c: &Arc<ClusterState>, node: &mut Value) -> Result<(), ApiError> {
    let Some(lookup) = node.get("lookup_from").filter(|v| v.is_object()) else {
        return Ok(());
    };
    let collection = lookup["collection"]
        .as_str()
        .ok_or_else(|| ApiError::bad_request("lookup_from.collection must be a name"))?
        .to_string();
    let space = lookup["vector"]
        .as_str()
        .or_else(|| node["using"].as_str())
        .unwrap_or("")
        .to_string();
    let ids = diskvec_db::query::json::lookup_point_ids(node)?;
    if ids.is_empty() {
        return Ok(());
    }
    let found = points_of(c, &collection, &ids, json!(false), json!(true), None).await?;
    let mut points = Map::new();
    for id in &ids {
        let point = found
            .iter()
            .find(|p| PointId::from_json(&p["id"]).ok() == Some(*id))
            .ok_or(DbError::PointNotFound(*id))?;
        let vector = vector_in(point, &space).ok_or_else(|| {
            // Qdrant looks the point up first (404), then the space (400).
            DbError::InvalidInput(format!("Not existing vector name error: {space}"))
        })?;
        points.insert(id.to_string(), vector);
    }
    node["lookup_from"]["points"] = Value::Object(points);
    Ok(())
}

/// Every node of a query body: the body itself and its prefetches, however deep.
fn resolve_tree<'a>(
    c: &'a Arc<ClusterState>,
    node: &'a mut Value,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), ApiError>> + Send + 'a>> {
    Box::pin(async move {
        resolve_node(c, node).await?;
        match node.get_mut("prefetch") {
            Some(Value::Array(list)) => {
                for p in list {
                    resolve_tree(c, p).await?;
                }
            }
            Some(one @ Value::Object(_)) => resolve_tree(c, one).await?,
            _ => {}
        }
        Ok(())
    })
}

/// A query or a batch of them (`/points/query`, `/points/query/batch`) with the points of
/// every `lookup_from` in the body; unchanged without any.
pub async fn inline(c: &Arc<ClusterState>, r: &mut Routed) -> Result<(), ApiError> {
    if !r.body.windows(11).any(|w| w == b"lookup_from") {
        return Ok(());
    }
    let mut body = r.json()?;
    if let Some(Value::Array(searches)) = body.get_mut("searches") {
        for s in searches {
            resolve_tree(c, s).await?;
        }
    } else {
        resolve_tree(c, &mut body).await?;
    }
    r.body = Bytes::from(body.to_string());
    Ok(())
}

/// What a groups request's `with_lookup` asks: the collection, and what of its points is
/// shown (`with_payload`, `with_vectors`); `None` without one.
pub(super) type LookupSpec = (String, Value, Value);

pub(super) fn lookup_spec(with_lookup: &Value) -> Result<Option<LookupSpec>, ApiError> {
    match with_lookup {
        Value::Null => Ok(None),
        Value::String(name) => Ok(Some((name.clone(), json!(true), json!(false)))),
        Value::Object(o) => Ok(Some((
            o.get("collection")
                .and_then(Value::as_str)
                .ok_or_else(|| ApiError::bad_request("with_lookup.collection is missing"))?
                .to_string(),
            o.get("with_payload").cloned().unwrap_or(json!(true)),
            o.get("with_vectors")
                .or_else(|| o.get("with_vector"))
                .cloned()
                .unwrap_or(json!(false)),
        ))),
        _ => Err(ApiError::bad_request(
            "with_lookup must be a collection name or {collection, with_payload, with_vectors}",
        )),
    }
}

/// Each group with its `lookup`: the point of the group's id in the lookup collection.
pub(super) async fn attach(
    c: &Arc<ClusterState>,
    spec: LookupSpec,
    groups: Vec<Value>,
) -> Result<Vec<Value>, ApiError> {
    let (collection, with_payload, with_vector) = spec;
    // A group's id names the point looked up (ids that cannot be point ids find none).
    let ids: Vec<PointId> = groups
        .iter()
        .filter_map(|g| PointId::from_json(&g["id"]).ok())
        .collect();
    let found = if ids.is_empty() {
        Vec::new()
    } else {
        points_of(c, &collection, &ids, with_payload, with_vector, None).await?
    };
    Ok(groups
        .into_iter()
        .map(|mut g| {
            let id = PointId::from_json(&g["id"]).ok();
            if let Some(p) = found
                .iter()
                .find(|p| id.is_some() && PointId::from_json(&p["id"]).ok() == id)
            {
                g["lookup"] = p.clone();
            }
            g
        })
        .collect())
}

/// `/points/query/groups`, `/points/search/groups` on a collection of one shard: the
/// replica groups the hits, and each group gets its `lookup` here.
pub async fn groups(
    c: &Arc<ClusterState>,
    map: &diskvec_cluster::CollectionMap,
    mut r: Routed,
) -> Result<Response, ApiError> {
    inline(c, &mut r).await?;
    let mut body = r.json()?;
    let with_lookup = body
        .as_object_mut()
        .and_then(|b| b.remove("with_lookup"))
        .unwrap_or(Value::Null);
    let Some(spec) = lookup_spec(&with_lookup)? else {
        return reads::forward_whole(c, map, r).await;
    };
    r.body = Bytes::from(body.to_string());
    let (status, mut answer) = decode(reads::forward_whole(c, map, r).await?).await?;
    if !status.is_success() {
        return Ok((status, axum::Json(answer)).into_response());
    }
    let groups = answer["result"]["groups"]
        .as_array_mut()
        .map(std::mem::take)
        .unwrap_or_default();
    answer["result"]["groups"] = Value::Array(attach(c, spec, groups).await?);
    Ok((status, axum::Json(answer)).into_response())
}
