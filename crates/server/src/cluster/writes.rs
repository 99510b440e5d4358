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
use diskvec_cluster::{CollectionMap, KeySelector, ShardingMethod};
use serde_json::{json, Value};

use super::calls::{Answer, Route};
use super::split::{replica_query, split_write, without_shard_key, LogMessage};
use super::{replicas, ClusterState, Routed};
use crate::envelope::{ok, ApiError};

/// How long a write waits for its replicas unless the request's `timeout` says otherwise.
const DEFAULT_WAIT: Duration = Duration::from_secs(30);
/// One long poll of a replica's applied sequence.
const POLL: Duration = Duration::from_millis(1000);
/// Once `write_consistency_factor` replicas applied a write, how long it still waits for
/// the other live ones (so a read right after sees it everywhere, unless one lags).
const GRACE: Duration = Duration::from_secs(2);
/// The largest message NATS takes (its default `max_payload`).
const LOG_MESSAGE_LIMIT: usize = 1024 * 1024;

pub(super) fn timeout_of(query: Option<&str>) -> Duration {
    crate::query_param(query, "timeout")
        .and_then(|t| t.parse::<u64>().ok())
        .filter(|&t| t > 0)
        .map_or(DEFAULT_WAIT, Duration::from_secs)
}

pub async fn write(
    c: &Arc<ClusterState>,
    map: &CollectionMap,
    r: Routed,
) -> Result<Response, ApiError> {
    let age = c.node.view_age();
    if age > Duration::from_secs(diskvec_cluster::node::LEASE_TTL_SECS) {
        return Err(ApiError::unavailable(format!(
            "this node has not reached the cluster's control plane for {:.0} s: it takes no writes until it does",
            age.as_secs_f64()
        )));
    }
    let body = r.json()?;
    if !body.is_object() {
        return Err(ApiError::bad_request("expected a JSON object"));
    }
    let query = replica_query(r.query.as_deref());
    let schema_change = super::is_schema_change(r.method.as_str(), &r.tail);
    if !schema_change {
        super::write_checks::check(map, r.method.as_str(), &r.tail, &body)?;
    }
    // A change of the collection itself is answered as Qdrant does, once applied.
    let always_waits = r.method == Method::PATCH && r.tail.is_empty();
    let strict_change = match always_waits {
        true => super::limits::change_of(map, &body)?,
        false => None,
    };
    // A change of a collection sharded by key is kept in its map first, for the shards of
    // keys made later (published after, so that no shard misses it).
    let recorded;
    let map = if schema_change && map.sharding_method == ShardingMethod::Custom {
        let change = LogMessage {
            method: r.method.to_string(),
            path: r.tail.clone(),
            query: query.clone(),
            body: without_shard_key(&body),
        };
        recorded = super::collections::record_change(c, &r.name, map.uid, change).await?;
        &recorded
    } else {
        map
    };
    let groups = |op: &Value| -> Result<Vec<Vec<u32>>, String> {
        if schema_change {
            return Ok(vec![map.active_shards()]);
        }
        map.groups(&KeySelector::of(op)?, true)
            .map_err(|e| e.to_string())
    };
    // Each message encoded once: checked against the log's limit, then published.
    let parts: Vec<Vec<Bytes>> = split_write(
        r.method.as_str(),
        &r.tail,
        &query,
        &body,
        map.shards.len(),
        &groups,
    )
    .map_err(ApiError::bad_request)?
    .into_iter()
    .map(|msgs| msgs.iter().map(|m| Bytes::from(m.to_bytes())).collect())
    .collect();
    for (shard, msgs) in parts.iter().enumerate() {
        if !msgs.is_empty() {
            enough_live(c, map, &r.name, shard as u32)?;
        }
        if let Some(m) = msgs.iter().find(|m| m.len() > LOG_MESSAGE_LIMIT) {
            return Err(ApiError {
                status: StatusCode::PAYLOAD_TOO_LARGE,
                message: format!(
                    "one point of this write takes {} bytes, over the log's {LOG_MESSAGE_LIMIT}-byte message limit",
                    m.len()
                ),
                retry_after: None,
            });
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
                    .publish(&stream, m)
                    .await
                    .map_err(|e| {
                        ApiError::unavailable(format!(
                            "{e} ({} earlier parts of this write on shard {shard} are in the log and will apply)",
                            seqs.len()
                        ))
                    })?;
                seqs.push(seq);
            }
            Ok::<_, ApiError>((shard as u32, seqs))
        }));
    }
    let mut appended = Vec::with_capacity(appends.len());
    for a in appends {
        appended.push(
            a.await
                .map_err(|e| ApiError::unavailable(format!("appending failed: {e}")))??,
        );
    }
    let last_seq = appended
        .iter()
        .filter_map(|(_, seqs)| seqs.last().copied())
        .max()
        .unwrap_or(0);
    // A batch is answered with one result per operation, as a single node answers it.
    let batch_of = (r.tail == "/points/batch").then(|| {
        body.get("operations")
            .and_then(Value::as_array)
            .map_or(0, Vec::len)
    });
    let answer = |status: &str| {
        let one = json!({"operation_id": last_seq, "status": status});
        match batch_of {
            Some(n) => Value::Array(vec![one; n]),
            None => one,
        }
    };
    if !r.waits() && !always_waits {
        return Ok(ok(answer("acknowledged"), r.started));
    }
    let deadline = Instant::now() + timeout_of(r.query.as_deref());
    let mut waits = Vec::with_capacity(appended.len());
    for (shard, seqs) in appended {
        let (c, map, name) = (Arc::clone(c), map.clone(), r.name.clone());
        waits.push(tokio::spawn(async move {
            wait_applied(&c, &map, &name, shard, &seqs, deadline).await
        }));
    }
    // PATCH answers `true` (kept so when no shard exists yet to answer it).
    let mut result = if always_waits {
        json!(true)
    } else {
        answer("completed")
    };
    let mut failed = None;
    for w in waits {
        match w
            .await
            .map_err(|e| ApiError::unavailable(format!("waiting failed: {e}")))
            .and_then(|outcome| outcome)
        {
            // A replica's own answer where it has the shape asked (PATCH's `true`, an
            // index's update result); a batch's list is the one made above.
            Ok(outcome) => {
                if let Some(v) = outcome.filter(|_| batch_of.is_none()) {
                    result = v;
                }
            }
            Err(e) => {
                failed.get_or_insert(e);
            }
        }
    }
    // Routers check requests against strict mode as the replicas hold it: recorded unless
    // the replicas refused the change (a wait that ran out does not stop it applying).
    if let Some(change) = strict_change {
        let refused =
            |e: &ApiError| e.status.is_client_error() && e.status != StatusCode::REQUEST_TIMEOUT;
        if !failed.as_ref().is_some_and(refused) {
            super::limits::keep_in_map(c, &r.name, map.uid, |m| super::limits::record(m, &change))
                .await?;
        }
    }
    match failed {
        Some(e) => Err(e),
        None => Ok(ok(result, r.started)),
    }
}

/// Waits until at least `write_consistency_factor` replicas of `shard` applied the
/// messages `seqs` (and the other live ones did, or `GRACE` passed); the error of the first
/// of them a replica refused, else the last one's result as a replica answered it.
pub(super) async fn wait_applied(
    c: &Arc<ClusterState>,
    map: &CollectionMap,
    name: &str,
    shard: u32,
    seqs: &[u64],
    deadline: Instant,
) -> Result<Option<Value>, ApiError> {
    let local = replica_name(name, shard);
    let wanted = map.write_consistency_factor.max(1) as usize;
    let list = seqs
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let last = seqs.iter().copied().max().unwrap_or(0);
    let mut done: Vec<String> = Vec::new();
    // Of those, the replicas that kept what applying the messages gave.
    let mut knowing = 0usize;
    // Replicas replaying their log (new, rebuilt, restarted): still asked, since they may
    // be needed for the count, but not waited for beyond it.
    let mut replaying: Vec<String> = Vec::new();
    let mut outcome: Option<Value> = None;
    let mut enough_at: Option<Instant> = None;
    loop {
        let view = c.node.view();
        // The shard's replicas as the map has them now (a move may finish while waiting).
        let replicas = view
            .collection(name)
            .filter(|m| m.uid == map.uid)
            .unwrap_or(map)
            .shards
            .get(shard as usize)
            .map(|s| s.replicas.clone())
            .unwrap_or_default();
        let pending: Vec<String> = replicas
            .iter()
            .filter(|n| view.is_alive(n) && !done.contains(n))
            .cloned()
            .collect();
        if done.len() >= wanted {
            let since = *enough_at.get_or_insert_with(Instant::now);
            // Replicas still replaying their log are not waited for beyond the count.
            let waiting = pending.iter().filter(|n| !replaying.contains(n)).count();
            // A refusal is known only from a replica that applied the messages itself (not
            // restored from a snapshot past them, nor restarted since): one is waited for
            // while another replica may still tell.
            let told = knowing > 0 || waiting == 0;
            if told && (waiting == 0 || since.elapsed() >= GRACE) {
                return Ok(outcome);
            }
        }
        if Instant::now() >= deadline {
            if done.len() >= wanted {
                return Ok(outcome);
            }
            if done.len() + pending.len() < wanted {
                return Err(ApiError::unavailable(format!(
                    "only {} replicas of shard {shard} are live, fewer than write_consistency_factor {wanted} (the write is in the log and will apply)",
                    done.len() + pending.len()
                )));
            }
            return Err(ApiError {
                status: StatusCode::REQUEST_TIMEOUT,
                message: format!(
                    "Timeout error: {} of {wanted} replicas of shard {shard} applied the write in time (it is in the log and will apply)",
                    done.len()
                ),
                retry_after: None,
            });
        }
        let path = format!(
            "/cluster/applied/{local}?uid={}&seqs={list}&wait_ms={}",
            map.uid,
            POLL.as_millis()
        );
        let asks = pending.iter().map(|node| {
            let path = path.clone();
            async move {
                let answer = c
                    .call(
                        node,
                        &Method::GET,
                        &path,
                        Bytes::new(),
                        POLL * 3,
                        Route::of(map.uid),
                    )
                    .await;
                (node.clone(), answer)
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
                let is_replaying = result["ready"] == json!(false);
                replaying.retain(|n| *n != node);
                if is_replaying {
                    replaying.push(node);
                }
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
            if result["known"] != json!(false) {
                knowing += 1;
                if outcome.is_none() {
                    outcome = result.get("result").cloned().filter(|v| !v.is_null());
                }
            }
            done.push(node);
            progressed = true;
        }
        if !progressed {
            // Nobody answered with progress (a node gone, a replica opening): do not spin.
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// Refuses a write to `shard` while it has fewer live replicas than its
/// `write_consistency_factor` (it could not be acknowledged).
pub(super) fn enough_live(
    c: &ClusterState,
    map: &CollectionMap,
    name: &str,
    shard: u32,
) -> Result<(), ApiError> {
    let live = c.placed_live(map, shard).len();
    if live < map.write_consistency_factor as usize {
        return Err(ApiError::unavailable(format!(
            "shard {shard} of {name} has {live} live replicas, fewer than its write_consistency_factor {}",
            map.write_consistency_factor
        )));
    }
    Ok(())
}

/// The lowest message the live replicas of `shard` have applied (`u64::MAX` when none is
/// live), or why one of them did not say.
pub(super) async fn lowest_applied(
    c: &ClusterState,
    map: &CollectionMap,
    name: &str,
    shard: u32,
) -> Result<u64, String> {
    let local = replica_name(name, shard);
    let mut lowest = u64::MAX;
    for node in c.placed_live(map, shard) {
        let answer = applied_now(c, &node, &local, map.uid)
            .await
            .map_err(|e| e.message)?;
        let applied = answer
            .result()
            .get("applied")
            .and_then(Value::as_u64)
            .ok_or_else(|| format!("{node} does not say where its replica is: {}", answer.body))?;
        lowest = lowest.min(applied);
    }
    Ok(lowest)
}

/// What node `node`'s replica `local` of incarnation `uid` says of itself now (`applied`,
/// `ready`: the applied endpoint's answer, without waiting).
pub async fn applied_now(
    c: &ClusterState,
    node: &str,
    local: &str,
    uid: u64,
) -> Result<Answer, ApiError> {
    c.call(
        node,
        &Method::GET,
        &format!("/cluster/applied/{local}?uid={uid}&seqs=0&wait_ms=0"),
        Bytes::new(),
        Duration::from_secs(2),
        Route::of(uid),
    )
    .await
}

/// `GET /cluster/applied/<replica>?uid=U&seqs=A,B,...&wait_ms=T`: waits up to T ms until the
/// local replica of incarnation U applied the greatest of the messages, then tells how far
/// it is, the first of them it refused (status and answer), and the last one's result.
pub async fn applied_endpoint(c: &ClusterState, local: &str, query: Option<&str>) -> Response {
    let started = Instant::now();
    let param = |name: &str| crate::query_param(query, name);
    let uid = param("uid").and_then(|v| v.parse::<u64>().ok());
    let wait_ms = param("wait_ms")
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0)
        .min(10_000);
    let seqs: Vec<u64> = param("seqs")
        .unwrap_or("")
        .split(',')
        .filter_map(|v| v.parse().ok())
        .collect();
    let last = seqs.iter().copied().max().unwrap_or(0);
    let Some(replica) = replicas::replica(c, local).filter(|r| Some(r.uid) == uid) else {
        return ApiError::not_found(format!("no replica {local} of that collection here"))
            .into_response();
    };
    let mut rx = replica.applied.subscribe();
    let _ = tokio::time::timeout(
        Duration::from_millis(wait_ms),
        rx.wait_for(|&applied| applied >= last),
    )
    .await;
    let applied = *rx.borrow();
    let known_from = replica
        .known_from
        .load(std::sync::atomic::Ordering::Acquire);
    let kept = replica.outcomes.lock().unwrap_or_else(|p| p.into_inner());
    let failure = kept
        .iter()
        .find(|o| o.status >= 400 && seqs.contains(&o.seq))
        .map(|o| json!({"seq": o.seq, "status": o.status, "body": o.body}));
    let result = kept
        .iter()
        .rev()
        .find(|o| o.seq == last)
        .and_then(|o| o.body.get("result").cloned());
    ok(
        json!({
            "applied": applied,
            "ready": replica.ready.load(std::sync::atomic::Ordering::Acquire),
            // Whether the outcomes of these messages are kept here (a replica restored past
            // them, restarted since, or that let them go, cannot tell a refusal).
            "known": seqs.iter().all(|&q| q >= known_from),
            "failure": failure,
            "result": result,
        }),
        started,
    )
}
