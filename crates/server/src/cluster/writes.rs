//! Writes on a cluster collection: split by shard, appended to each shard's log, and (with
//! `wait=true`) answered once every live replica of each shard applied them, and at least
//! `write_consistency_factor` did. An acknowledged write is in the log: stored on a quorum
//! of the log's servers, applied by every replica in the log's order.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use diskvec_cluster::map::replica_name;
use diskvec_cluster::CollectionMap;
use serde_json::{json, Value};

use super::calls::Answer;
use super::split::{replica_query, split_write};
use super::{replicas, ClusterState, Routed};
use crate::envelope::{ok, ApiError};

/// How long a write waits for its replicas unless the request's `timeout` says otherwise.
const DEFAULT_WAIT: Duration = Duration::from_secs(30);
/// One long poll of a replica's applied sequence.
const POLL: Duration = Duration::from_millis(1000);

fn unavailable(message: String) -> ApiError {
    ApiError {
        status: StatusCode::SERVICE_UNAVAILABLE,
        message,
        retry_after: Some(1),
    }
}

fn timeout_of(query: Option<&str>) -> Duration {
    query
        .unwrap_or("")
        .split('&')
        .find_map(|kv| kv.strip_prefix("timeout="))
        .and_then(|t| t.parse::<u64>().ok())
        .filter(|&t| t > 0)
        .map_or(DEFAULT_WAIT, Duration::from_secs)
}

pub async fn write(
    c: &Arc<ClusterState>,
    map: &CollectionMap,
    r: Routed,
) -> Result<Response, ApiError> {
    let body = r.json()?;
    let query = replica_query(r.query.as_deref());
    let parts = split_write(r.method.as_str(), &r.tail, &query, &body, map.shard_number)
        .map_err(ApiError::bad_request)?;
    let view = c.node.view();
    for (shard, msgs) in parts.iter().enumerate() {
        let live = map.shards[shard]
            .replicas
            .iter()
            .filter(|n| view.is_alive(n))
            .count();
        if !msgs.is_empty() && live < map.write_consistency_factor as usize {
            return Err(unavailable(format!(
                "shard {shard} of {} has {live} live replicas, fewer than its write_consistency_factor {}",
                r.name, map.write_consistency_factor
            )));
        }
    }
    // Each shard's messages in order; the shards side by side.
    let mut appends = Vec::new();
    for (shard, msgs) in parts.into_iter().enumerate() {
        if msgs.is_empty() {
            continue;
        }
        let c = Arc::clone(c);
        let stream = map.stream_name(&r.name, shard as u32);
        appends.push(tokio::spawn(async move {
            let mut seqs = Vec::with_capacity(msgs.len());
            for m in msgs {
                let seq = c
                    .log
                    .publish(&stream, Bytes::from(m.to_bytes()))
                    .await
                    .map_err(|e| {
                        unavailable(format!(
                            "{e} ({} earlier parts of this write are in the log and will apply)",
                            seqs.len()
                        ))
                    })?;
                seqs.push(seq);
            }
            Ok::<_, ApiError>((shard as u32, seqs[0], *seqs.last().expect("one message")))
        }));
    }
    let mut appended = Vec::with_capacity(appends.len());
    for a in appends {
        appended.push(
            a.await
                .map_err(|e| unavailable(format!("appending failed: {e}")))??,
        );
    }
    let last_seq = appended.iter().map(|a| a.2).max().unwrap_or(0);
    if !r.waits() {
        return Ok(ok(
            json!({"operation_id": last_seq, "status": "acknowledged"}),
            r.started,
        ));
    }
    let deadline = Instant::now() + timeout_of(r.query.as_deref());
    let mut waits = Vec::with_capacity(appended.len());
    for (shard, first, last) in appended {
        let (c, map, name) = (Arc::clone(c), map.clone(), r.name.clone());
        waits.push(tokio::spawn(async move {
            wait_applied(&c, &map, &name, shard, first, last, deadline).await
        }));
    }
    let mut result = json!({"operation_id": last_seq, "status": "completed"});
    for w in waits {
        let outcome = w
            .await
            .map_err(|e| unavailable(format!("waiting failed: {e}")))??;
        if let Some(v) = outcome {
            result = v;
        }
    }
    Ok(ok(result, r.started))
}

/// Waits until every live replica of `shard` applied `last` (and at least the write
/// consistency factor did); the error of the first message in `first..=last` a replica
/// refused, else the last message's result as a replica answered it.
async fn wait_applied(
    c: &Arc<ClusterState>,
    map: &CollectionMap,
    name: &str,
    shard: u32,
    first: u64,
    last: u64,
    deadline: Instant,
) -> Result<Option<Value>, ApiError> {
    let local = replica_name(name, shard);
    let mut done: Vec<String> = Vec::new();
    let mut outcome: Option<Value> = None;
    loop {
        let view = c.node.view();
        let pending: Vec<String> = map.shards[shard as usize]
            .replicas
            .iter()
            .filter(|n| view.is_alive(n) && !done.contains(n))
            .cloned()
            .collect();
        if done.len() >= map.write_consistency_factor as usize && pending.is_empty() {
            return Ok(outcome);
        }
        if Instant::now() >= deadline {
            if done.len() >= map.write_consistency_factor as usize {
                return Ok(outcome);
            }
            return Err(ApiError {
                status: StatusCode::REQUEST_TIMEOUT,
                message: format!(
                    "Timeout error: {} of {} replicas of shard {shard} applied the write in time (it is in the log and will apply)",
                    done.len(),
                    map.write_consistency_factor
                ),
                retry_after: None,
            });
        }
        let asks = pending.iter().map(|node| {
            let path = format!(
                "/cluster/applied/{local}?from={first}&seq={last}&wait_ms={}",
                POLL.as_millis()
            );
            async move {
                (
                    node.clone(),
                    c.call(node, &Method::GET, &path, Bytes::new(), POLL * 3).await,
                )
            }
        });
        let answers = futures_util::future::join_all(asks).await;
        let mut progressed = false;
        for (node, answer) in answers {
            let Ok(Answer { status, body }) = answer else {
                continue;
            };
            if !status.is_success() {
                continue;
            }
            let result = body.get("result").cloned().unwrap_or(Value::Null);
            if result["applied"].as_u64().unwrap_or(0) < last {
                continue;
            }
            if let Some(failure) = result.get("failure").filter(|f| !f.is_null()) {
                let status = failure["status"]
                    .as_u64()
                    .and_then(|s| StatusCode::from_u16(s as u16).ok())
                    .unwrap_or(StatusCode::BAD_REQUEST);
                let message = failure["body"]["status"]["error"]
                    .as_str()
                    .map_or_else(|| failure["body"].to_string(), str::to_string);
                return Err(ApiError {
                    status,
                    message,
                    retry_after: None,
                });
            }
            if outcome.is_none() {
                outcome = result.get("result").cloned().filter(|v| !v.is_null());
            }
            done.push(node);
            progressed = true;
        }
        if !progressed && pending.is_empty() {
            // No live replica to wait on: the view will change, or the deadline come.
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// `GET /cluster/applied/<replica>?from=A&seq=B&wait_ms=T`: waits up to T ms until the
/// local replica applied B, then tells how far it is, the first refused message in A..=B
/// (status and answer), and B's result.
pub async fn applied_endpoint(c: &ClusterState, local: &str, query: Option<&str>) -> Response {
    let started = Instant::now();
    let param = |name: &str| -> u64 {
        query
            .unwrap_or("")
            .split('&')
            .find_map(|kv| kv.strip_prefix(name).and_then(|v| v.strip_prefix('=')))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    let (from, seq, wait_ms) = (param("from"), param("seq"), param("wait_ms").min(10_000));
    let Some(replica) = replicas::replica(c, local) else {
        return ApiError::not_found(format!("no replica {local} on this node")).into_response();
    };
    let mut rx = replica.applied.subscribe();
    let _ = tokio::time::timeout(
        Duration::from_millis(wait_ms),
        rx.wait_for(|&applied| applied >= seq),
    )
    .await;
    let applied = *rx.borrow();
    let kept = replica.outcomes.lock().unwrap_or_else(|p| p.into_inner());
    let failure = kept
        .iter()
        .find(|o| o.seq >= from && o.seq <= seq && o.status >= 400)
        .map(|o| json!({"seq": o.seq, "status": o.status, "body": o.body}));
    let result = kept
        .iter()
        .rev()
        .find(|o| o.seq == seq)
        .and_then(|o| o.body.get("result").cloned());
    ok(
        json!({"applied": applied, "failure": failure, "result": result}),
        started,
    )
}
