//! The cluster's collections: created with a shard map placed over the live nodes (written to
//! etcd only if the name is free), dropped, listed, described; and Qdrant's cluster pages.

use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::Method;
use axum::response::Response;
use diskvec_cluster::map::{place, replica_name, COLLECTIONS_PREFIX, ROOT_PREFIX};
use diskvec_cluster::{ClusterError, ClusterView, CollectionMap};
use diskvec_db::DbError;
use serde_json::{json, Map, Value};

use super::calls::Route;
use super::calls::ShardRead;
use super::{replicas, ClusterState, Routed};
use crate::envelope::{ok, ApiError};

/// The creation fields that describe the cluster's layout, not a replica's configuration.
const LAYOUT_FIELDS: &[&str] = &[
    "shard_number",
    "replication_factor",
    "write_consistency_factor",
    "sharding_method",
];

/// How long a creation waits for every replica to exist before it answers.
const CREATE_WAIT: Duration = Duration::from_secs(30);

fn control_plane(e: ClusterError) -> ApiError {
    ApiError::unavailable(format!("the cluster's control plane: {e}"))
}

pub(super) async fn etcd_call<T: Send + 'static>(
    c: &ClusterState,
    work: impl FnOnce(&diskvec_cluster::Etcd) -> Result<T, ClusterError> + Send + 'static,
) -> Result<T, ApiError> {
    let etcd = Arc::clone(&c.node.etcd);
    tokio::task::spawn_blocking(move || work(&etcd))
        .await
        .map_err(|e| control_plane(ClusterError::Unavailable(e.to_string())))?
        .map_err(control_plane)
}

fn layout_field(body: &Value, field: &str) -> u32 {
    body.get(field)
        .and_then(Value::as_u64)
        .map_or(1, |n| n.min(u64::from(u32::MAX)) as u32)
}

pub async fn create(c: &Arc<ClusterState>, r: Routed) -> Result<Response, ApiError> {
    let body = r.json()?;
    if r.name.contains('@') {
        return Err(ApiError::bad_request(format!(
            "collection name {:?}: '@' is kept for the cluster's replicas",
            r.name
        )));
    }
    diskvec_db::check_name(&r.name)?;
    // The whole configuration is checked here, as a node would check it.
    crate::convert::collection_config(&body)?;
    if body.get("sharding_method").and_then(Value::as_str) == Some("custom") {
        return Err(ApiError::bad_request(
            "sharding_method custom (shard keys) is not supported yet; shards are chosen by point id",
        ));
    }
    let shard_number = layout_field(&body, "shard_number");
    let replication_factor = layout_field(&body, "replication_factor");
    let write_consistency_factor = layout_field(&body, "write_consistency_factor");
    if write_consistency_factor > replication_factor {
        return Err(ApiError::bad_request(format!(
            "write_consistency_factor {write_consistency_factor} is more than replication_factor {replication_factor}"
        )));
    }
    // Placed by a fresh read of the cluster, not the view a few hundred ms old (a node that
    // just joined gets its share).
    let (keys, revision) = etcd_call(c, |e| e.range_prefix(ROOT_PREFIX)).await?;
    let view = ClusterView::from_keys(&keys, revision);
    if view.collection(&r.name).is_some() {
        return Err(DbError::CollectionExists(r.name.clone()).into());
    }
    let shards = place(&view, shard_number, replication_factor);
    let placed = shards.iter().map(|s| s.replicas.len()).min().unwrap_or(0);
    if placed < write_consistency_factor.max(1) as usize {
        return Err(ApiError::unavailable(format!(
            "{} live nodes: too few to place replicas for write_consistency_factor {write_consistency_factor}",
            view.nodes.len()
        )));
    }
    let mut config: Map<String, Value> = body.as_object().cloned().unwrap_or_default();
    for f in LAYOUT_FIELDS {
        config.remove(*f);
    }
    let map = CollectionMap {
        uid: std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish(),
        config: Value::Object(config),
        shard_number,
        replication_factor,
        write_consistency_factor,
        shards,
    };
    // The logs first: a replica that sees the map finds its log there.
    for shard in 0..shard_number {
        c.log
            .ensure_stream(&map.stream_name(&r.name, shard))
            .await
            .map_err(control_plane)?;
    }
    let key = format!("{COLLECTIONS_PREFIX}{}", r.name);
    let value = serde_json::to_vec(&map).expect("a shard map serializes");
    if !etcd_call(c, move |e| e.create(&key, &value)).await? {
        return Err(DbError::CollectionExists(r.name.clone()).into());
    }
    wait_for_replicas(c, &r.name, &map).await;
    Ok(ok(json!(true), r.started))
}

/// Waits (bounded) until every live replica of the new collection exists on its node, so
/// that a write right after the creation is applied at once.
async fn wait_for_replicas(c: &Arc<ClusterState>, name: &str, map: &CollectionMap) {
    let deadline = Instant::now() + CREATE_WAIT;
    for (shard, s) in map.shards.iter().enumerate() {
        let path = format!("/collections/{}/exists", replica_name(name, shard as u32));
        for node in &s.replicas {
            while Instant::now() < deadline && c.node.view().is_alive(node) {
                let exists = c
                    .call(
                        node,
                        &Method::GET,
                        &path,
                        Bytes::new(),
                        Duration::from_secs(2),
                        Route::of(map.uid),
                    )
                    .await
                    .is_ok_and(|a| a.result()["exists"] == json!(true));
                if exists {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

pub async fn delete(c: &Arc<ClusterState>, r: Routed) -> Result<Response, ApiError> {
    let key = format!("{COLLECTIONS_PREFIX}{}", r.name);
    let k = key.clone();
    let Some(current) = etcd_call(c, move |e| e.get(&k)).await? else {
        return Ok(ok(json!(false), r.started));
    };
    let map: Option<CollectionMap> = serde_json::from_slice(&current.value).ok();
    let revision = current.mod_revision;
    let dropped = etcd_call(c, move |e| e.delete_if(&key, revision)).await?;
    if dropped {
        super::aliases::forget_collection(c, &r.name).await;
        // Replicas are dropped by their nodes as they see the map go; the logs go now.
        if let Some(map) = map {
            for shard in 0..map.shard_number {
                if let Err(e) = c.log.delete_stream(&map.stream_name(&r.name, shard)).await {
                    log::warn!("cluster: {e}");
                }
            }
        }
    }
    Ok(ok(json!(dropped), r.started))
}

pub fn exists(c: &ClusterState, r: &Routed) -> Response {
    let exists = c.node.view().collection(&r.name).is_some();
    ok(json!({ "exists": exists }), r.started)
}

pub fn list(c: &ClusterState, started: Instant) -> Response {
    let names: Vec<Value> = c
        .node
        .view()
        .collections
        .keys()
        .map(|n| json!({ "name": n }))
        .collect();
    ok(json!({ "collections": names }), started)
}

/// A collection's description: one replica of each shard asked, counts summed, the layout
/// as the map has it.
pub async fn info(
    c: &Arc<ClusterState>,
    map: &CollectionMap,
    r: Routed,
) -> Result<Response, ApiError> {
    let answers = c
        .read_all_shards(
            &r.name,
            map,
            ShardRead {
                method: Method::GET.clone(),
                tail: "".to_string(),
                body: Bytes::new(),
                fresh: false,
            },
        )
        .await?;
    let mut out = answers[0].result().clone();
    for field in ["points_count", "indexed_vectors_count", "segments_count"] {
        let total: u64 = answers
            .iter()
            .map(|a| a.result()[field].as_u64().unwrap_or(0))
            .sum();
        out[field] = json!(total);
    }
    if let Some(a) = answers
        .iter()
        .find(|a| a.result()["status"] != json!("green"))
    {
        out["status"] = a.result()["status"].clone();
    }
    let params = &mut out["config"]["params"];
    params["shard_number"] = json!(map.shard_number);
    params["replication_factor"] = json!(map.replication_factor);
    params["write_consistency_factor"] = json!(map.write_consistency_factor);
    Ok(ok(out, r.started))
}

/// `GET /cluster`: Qdrant's cluster status, with the live nodes as its peers.
pub async fn cluster_info(c: &ClusterState, started: Instant) -> Response {
    let view = c.node.view();
    let etcd = Arc::clone(&c.node.etcd);
    let healthy = tokio::task::spawn_blocking(move || etcd.health())
        .await
        .unwrap_or_default();
    let peers: Map<String, Value> = view
        .nodes
        .values()
        .map(|n| (n.peer_id().to_string(), json!({ "uri": n.url })))
        .collect();
    ok(
        json!({
            "status": "enabled",
            "peer_id": c.node.me.peer_id(),
            "peers": peers,
            "raft_info": {
                // The control plane is etcd's Raft, not one of diskvec's own.
                "term": 0,
                "commit": view.revision,
                "pending_operations": 0,
                "leader": null,
                "role": null,
                "is_voter": false,
            },
            "consensus_thread_status": {
                "consensus_thread_status": "working",
                "last_update": now_rfc3339(),
            },
            "message_send_failures": {},
            "control_plane": {
                "etcd": healthy.iter().map(|(e, ok)| json!({"endpoint": e, "healthy": ok})).collect::<Vec<_>>(),
                "revision": view.revision,
            },
            "node_id": c.node.me.id,
        }),
        started,
    )
}

/// `GET /collections/{name}/cluster`: which shards this node holds and where the others are.
pub fn collection_cluster(c: &ClusterState, map: &CollectionMap, r: &Routed) -> Response {
    let view = c.node.view();
    let me = &c.node.me.id;
    let mut local = Vec::new();
    let mut remote = Vec::new();
    let mut transfers = Vec::new();
    for (shard, s) in map.shards.iter().enumerate() {
        for m in &s.moves {
            transfers.push(json!({
                "shard_id": shard,
                "from": diskvec_cluster::map::peer_id_of(&m.from),
                "to": diskvec_cluster::map::peer_id_of(&m.to),
                "sync": false,
                "method": "stream_records",
            }));
        }
        for node in &s.replicas {
            let state = if !view.is_alive(node) {
                "Dead"
            } else if node == me
                && replicas::local_state(c, &replica_name(&r.name, shard as u32)) != Some(true)
            {
                "Partial"
            } else {
                "Active"
            };
            if node == me {
                let points = replicas::local_points(c, &r.name, shard as u32);
                local.push(json!({"shard_id": shard, "points_count": points, "state": state}));
            } else {
                remote.push(json!({
                    "shard_id": shard,
                    "peer_id": diskvec_cluster::map::peer_id_of(node),
                    "state": state,
                }));
            }
        }
    }
    ok(
        json!({
            "peer_id": c.node.me.peer_id(),
            "shard_count": map.shard_number,
            "local_shards": local,
            "remote_shards": remote,
            "shard_transfers": transfers,
        }),
        r.started,
    )
}

/// The current time as RFC 3339 (`Z`), as Qdrant's cluster status carries it.
fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format!("{}Z", diskvec_db::UtcTime::from_unix(secs).iso())
}
