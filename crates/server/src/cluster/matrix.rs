//! Distance matrices (`/points/search/matrix/pairs`, `/offsets`) on a collection of several
//! shards: the first `sample` points by id that have a vector in the space, over all shards
//! (a scroll merged by id: the sample one node takes), then the matrix computed here as one
//! node computes it (`crate::matrix::of_sample`).

use std::sync::Arc;

use axum::response::Response;
use diskvec_cluster::CollectionMap;
use diskvec_db::PointId;
use serde_json::{json, Value};

use super::lookups::vector_in;
use super::merge::merge_scroll;
use super::mmr::{dense_metric, floats};
use super::reads::{self, reached};
use super::{ClusterState, Routed};
use crate::envelope::{ok, ApiError};

pub async fn matrix(
    c: &Arc<ClusterState>,
    map: &CollectionMap,
    r: Routed,
) -> Result<Response, ApiError> {
    let (shards, body) = reached(map, &r.json()?)?;
    if shards.len() < 2 {
        return reads::forward_whole(c, map, r).await;
    }
    let using = body.get("using").and_then(Value::as_str).unwrap_or("");
    let metric = dense_metric(map, using).ok_or_else(|| {
        ApiError::bad_request(format!(
            "Wrong input: Not existing vector name error: {using}"
        ))
    })?;
    let (sample, limit) = crate::matrix::sizes(&body)?;
    let with_vector = json!({ "has_vector": using });
    let filter = super::reads::filter_and(&body, with_vector);
    let scroll = json!({
        "filter": filter,
        "limit": sample,
        "with_payload": false,
        "with_vector": if using.is_empty() { json!(true) } else { json!([using]) },
    });
    let pages = c
        .each_shard(
            map,
            &r,
            &shards,
            "/points/scroll",
            &scroll,
            super::reads::points_in,
        )
        .await?;
    let (points, _) = merge_scroll(pages, sample);
    let mut ids = Vec::with_capacity(points.len());
    let mut vectors = Vec::with_capacity(points.len());
    for p in &points {
        let (Ok(id), Some(v)) = (
            PointId::from_json(&p["id"]),
            vector_in(p, using).as_ref().and_then(floats),
        ) else {
            continue;
        };
        ids.push(id);
        vectors.push(v);
    }
    // Up to 2,000 squared distances: off the async threads.
    let m =
        tokio::task::spawn_blocking(move || crate::matrix::of_sample(ids, &vectors, metric, limit))
            .await
            .map_err(|e| ApiError::unavailable(format!("the matrix was not computed: {e}")))?;
    if r.tail.ends_with("/pairs") {
        Ok(ok(crate::matrix::pairs_of(&m), r.started))
    } else {
        Ok(ok(crate::matrix::offsets_of(m), r.started))
    }
}
