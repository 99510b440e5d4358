//! The cluster's collections: created with a shard map placed over the live nodes (written to
//! etcd only if the name is free), dropped, listed, described; and Qdrant's cluster pages.

use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::Method;
use axum::response::Response;
use diskvec_cluster::map::{place, replica_name, COLLECTIONS_PREFIX, ROOT_PREFIX};
use diskvec_cluster::{
    ClusterError, ClusterView, CollectionMap, ShardKey, ShardMap, ShardingMethod,
};
use diskvec_db::DbError;
use serde_json::{json, Map, Value};

use super::calls::Route;
use super::calls::ShardRead;
use super::split::LogMessage;
use super::{replicas, ClusterState, Routed};
use crate::envelope::{ok, ApiError};

/// The creation fields that describe the cluster's layout, not a replica's configuration.
const LAYOUT_FIELDS: &[&str] = &[
    "shard_number",
    "replication_factor",
    "write_consistency_factor",
    "sharding_method",
];

/// Compare-and-swap rounds before giving up on a map others keep changing.
pub(super) const CAS_ROUNDS: usize = 8;

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

/// The most shards (per key, for a collection sharded by key) or replicas a collection
/// takes: each shard is a log and a collection per replica.
const MOST_SHARDS: u64 = 1024;

fn layout_field(body: &Value, field: &str) -> Result<u32, ApiError> {
    whole_number(body, &[field], 1)
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
    let sharding_method =
        ShardingMethod::from_json(body.get("sharding_method")).map_err(ApiError::bad_request)?;
    let shard_number = layout_field(&body, "shard_number")?;
    let replication_factor = layout_field(&body, "replication_factor")?;
    let write_consistency_factor = layout_field(&body, "write_consistency_factor")?;
    if write_consistency_factor > replication_factor {
        return Err(ApiError::bad_request(format!(
            "write_consistency_factor {write_consistency_factor} is more than replication_factor {replication_factor}"
        )));
    }
    // Placed by a fresh read of the cluster, not the view a few hundred ms old (a node that
    // just joined gets its share).
    let (keys, revision) = etcd_call(c, |e| e.range_prefix(ROOT_PREFIX)).await?;
    let view = ClusterView::from_keys(&keys, revision);
    if view.aliases.contains_key(&r.name) {
        // The database's own refusal, as one node gives it.
        return Err(DbError::InvalidInput(format!(
            "Can't create collection with name {}. Alias with the same name already exists",
            r.name
        ))
        .into());
    }
    if view.collection(&r.name).is_some() {
        return Err(DbError::CollectionExists(r.name.clone()).into());
    }
    // Sharded by key: no shard until a key is made.
    let shards = match sharding_method {
        ShardingMethod::Auto => placed(
            &view,
            shard_number,
            replication_factor,
            write_consistency_factor,
        )?,
        ShardingMethod::Custom => Vec::new(),
    };
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
        sharding_method,
        changes: Vec::new(),
        strict_mode: None,
        shards,
    };
    // The logs first: a replica that sees the map finds its log there.
    for shard in map.active_shards() {
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

/// `shards` shards of `replication` replicas placed over the view's nodes; refused when too
/// few nodes are live for the write consistency asked.
fn placed(
    view: &ClusterView,
    shards: u32,
    replication: u32,
    write_consistency_factor: u32,
) -> Result<Vec<ShardMap>, ApiError> {
    let out = place(view, shards, replication);
    let least = out.iter().map(|s| s.replicas.len()).min().unwrap_or(0);
    if least < write_consistency_factor.max(1) as usize {
        return Err(ApiError::unavailable(format!(
            "{} live nodes: too few to place replicas for write_consistency_factor {write_consistency_factor}",
            view.nodes.len()
        )));
    }
    Ok(out)
}

/// A collection's map as etcd holds it now, with its key's mod revision (the
/// compare-and-swap token).
async fn read_map(c: &ClusterState, name: &str) -> Result<(CollectionMap, i64), ApiError> {
    let key = format!("{COLLECTIONS_PREFIX}{name}");
    let current = etcd_call(c, move |e| e.get(&key))
        .await?
        .ok_or_else(|| DbError::UnknownCollection(name.to_string()))?;
    let map = serde_json::from_slice(&current.value).map_err(|e| {
        ApiError::unavailable(format!("the shard map of {name} does not parse: {e}"))
    })?;
    Ok((map, current.mod_revision))
}

/// Stores `map` as `name`'s map if the key is still at `revision`; false when another node
/// changed it first.
async fn swap_map(
    c: &ClusterState,
    name: &str,
    revision: i64,
    map: &CollectionMap,
) -> Result<bool, ApiError> {
    let key = format!("{COLLECTIONS_PREFIX}{name}");
    let value = serde_json::to_vec(map).expect("a shard map serializes");
    etcd_call(c, move |e| e.compare_and_swap(&key, revision, &value)).await
}

fn kept_changing() -> ApiError {
    ApiError {
        status: axum::http::StatusCode::CONFLICT,
        message: "the shard map kept changing under this operation; try again".into(),
        retry_after: Some(1),
    }
}

/// Changes the map of `name` (of incarnation `uid`) by compare-and-swap: `change` applied to
/// the map as stored, again on a fresh read when another node changed it first. The map as
/// stored after.
pub(super) async fn update_map(
    c: &ClusterState,
    name: &str,
    uid: u64,
    mut change: impl FnMut(&mut CollectionMap) -> Result<(), ApiError>,
) -> Result<CollectionMap, ApiError> {
    for _ in 0..CAS_ROUNDS {
        let (mut map, revision) = read_map(c, name).await?;
        if map.uid != uid {
            return Err(DbError::UnknownCollection(name.to_string()).into());
        }
        change(&mut map)?;
        if swap_map(c, name, revision, &map).await? {
            return Ok(map);
        }
    }
    Err(kept_changing())
}

/// Waits until this node's view of `name` satisfies `seen` (its reader polls etcd every
/// quarter second), so the requests it routes next see a change just stored; gives up after
/// two seconds (another change may have come between).
pub(super) async fn until_seen(
    c: &ClusterState,
    name: &str,
    seen: impl Fn(&CollectionMap) -> bool,
) {
    let mut changes = c.node.watch();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(2);
    while !c.node.view().collection(name).is_some_and(&seen) {
        if !matches!(
            tokio::time::timeout_at(deadline, changes.changed()).await,
            Ok(Ok(()))
        ) {
            return;
        }
    }
}

/// Records a change of the collection itself in the map of a collection sharded by key
/// (`CollectionMap::changes`); the map as stored after, which the change is then published
/// to every shard of.
pub(super) async fn record_change(
    c: &ClusterState,
    name: &str,
    uid: u64,
    change: LogMessage,
) -> Result<CollectionMap, ApiError> {
    let change = serde_json::to_value(&change).expect("a log message serializes");
    update_map(c, name, uid, |map| {
        map.changes.push(change.clone());
        Ok(())
    })
    .await
}

fn whole_number(args: &Value, fields: &[&str], default: u32) -> Result<u32, ApiError> {
    for f in fields {
        match args.get(*f) {
            None | Some(Value::Null) => continue,
            Some(v) => {
                return v
                    .as_u64()
                    .filter(|n| (1..=MOST_SHARDS).contains(n))
                    .map(|n| n as u32)
                    .ok_or_else(|| {
                        ApiError::bad_request(format!(
                            "{f}: expected a whole number from 1 to {MOST_SHARDS}, got {v}"
                        ))
                    })
            }
        }
    }
    Ok(default)
}

/// The `shard_key` of a key's creation or drop.
fn shard_key_arg(args: &Value) -> Result<ShardKey, ApiError> {
    let key = args
        .get("shard_key")
        .ok_or_else(|| ApiError::bad_request("shard_key is missing"))?;
    ShardKey::from_json(key).map_err(|e| ApiError::bad_request(format!("shard_key: {e}")))
}

/// `PUT /collections/{c}/shards` (or the `create_sharding_key` shard operation): makes the
/// shards of a new key, placed over the live nodes (or the peers of `placement`), their logs
/// first.
pub async fn create_key(
    c: &Arc<ClusterState>,
    name: &str,
    args: &Value,
    started: Instant,
) -> Result<Response, ApiError> {
    let key = shard_key_arg(args)?;
    let placement: Option<Vec<u64>> = match args.get("placement") {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            serde_json::from_value(v.clone())
                .map_err(|_| ApiError::bad_request("placement: expected a list of peer ids"))?,
        ),
    };
    for _ in 0..CAS_ROUNDS {
        let (mut map, revision) = read_map(c, name).await?;
        if map.sharding_method != ShardingMethod::Custom {
            return Err(ApiError::bad_request(format!(
                "collection {name} is sharded by point id (sharding_method auto): it has no shard keys"
            )));
        }
        if !map.shards_of_key(&key).is_empty() {
            return Err(ApiError::bad_request(format!(
                "shard key {key} already exists"
            )));
        }
        let number = whole_number(args, &["shards_number", "shard_number"], map.shard_number)?;
        let replication = whole_number(args, &["replication_factor"], map.replication_factor)?;
        let (keys, at) = etcd_call(c, |e| e.range_prefix(ROOT_PREFIX)).await?;
        let mut view = ClusterView::from_keys(&keys, at);
        if let Some(peers) = &placement {
            view.nodes.retain(|_, n| peers.contains(&n.peer_id()));
            if view.nodes.is_empty() {
                return Err(ApiError::bad_request(format!(
                    "placement: none of the peers {peers:?} is live"
                )));
            }
        }
        let first = map.shards.len() as u32;
        if map.write_consistency_factor > replication {
            return Err(ApiError::bad_request(format!(
                "replication_factor {replication} is below the collection's write_consistency_factor {}",
                map.write_consistency_factor
            )));
        }
        for mut shard in placed(&view, number, replication, map.write_consistency_factor)? {
            shard.key = Some(key.clone());
            shard.changes_before = map.changes.len();
            map.shards.push(shard);
        }
        // The logs first, as at creation. Should another node take these shard ids first,
        // its shards use the logs made here (a log is empty until its map names it).
        for shard in first..map.shards.len() as u32 {
            c.log
                .ensure_stream(&map.stream_name(name, shard))
                .await
                .map_err(control_plane)?;
        }
        if swap_map(c, name, revision, &map).await? {
            wait_for_replicas(c, name, &map).await;
            return Ok(ok(json!(true), started));
        }
    }
    Err(kept_changing())
}

/// `POST /collections/{c}/shards/delete` (or `drop_sharding_key`): retires the key's shards
/// (their nodes drop their replicas as they see the map) and deletes their logs.
pub async fn drop_key(
    c: &Arc<ClusterState>,
    name: &str,
    args: &Value,
    started: Instant,
) -> Result<Response, ApiError> {
    let key = shard_key_arg(args)?;
    let uid = c.collection(name)?.uid;
    let mut retired = Vec::new();
    let map = update_map(c, name, uid, |map| {
        retired = map.shards_of_key(&key);
        if retired.is_empty() {
            return Err(ApiError::not_found(format!("shard key {key} not found")));
        }
        for &s in &retired {
            let shard = &mut map.shards[s as usize];
            shard.retired = true;
            shard.replicas.clear();
            shard.moves.clear();
        }
        Ok(())
    })
    .await?;
    for shard in retired {
        if let Err(e) = c.log.delete_stream(&map.stream_name(name, shard)).await {
            log::warn!("cluster: {e}");
        }
    }
    if let Ok((_, revision)) = read_map(c, name).await {
        wait_seen_everywhere(c, revision, Instant::now() + CREATE_WAIT).await;
    }
    Ok(ok(json!(true), started))
}

/// `GET /collections/{c}/shards`: the keys of a collection sharded by key.
pub fn list_keys(map: &CollectionMap, started: Instant) -> Response {
    let keys = match map.sharding_method {
        ShardingMethod::Auto => Value::Null,
        ShardingMethod::Custom => map
            .keys()
            .iter()
            .map(|k| json!({ "key": k.to_json() }))
            .collect(),
    };
    ok(json!({ "shard_keys": keys }), started)
}

/// Waits (bounded) until every live replica of the new collection exists on its node, so
/// that a write right after the creation is applied at once.
async fn wait_for_replicas(c: &Arc<ClusterState>, name: &str, map: &CollectionMap) {
    let deadline = Instant::now() + CREATE_WAIT;
    // Every node routes by the new map first (a request through any of them right after
    // finds the collection, or the key), then each replica exists.
    let key = format!("{COLLECTIONS_PREFIX}{name}");
    if let Ok(Some(kv)) = etcd_call(c, move |e| e.get(&key)).await {
        wait_seen_everywhere(c, kv.mod_revision, deadline).await;
    }
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

/// Waits (bounded) until every live node has read the cluster as it is now (after a change
/// this node made: the next request through any node finds it).
pub(super) async fn wait_settled(c: &Arc<ClusterState>) {
    if let Ok((_, now)) = etcd_call(c, |e| e.range_prefix(ROOT_PREFIX)).await {
        wait_seen_everywhere(c, now, Instant::now() + CREATE_WAIT).await;
    }
}

/// Waits (bounded) until every live node has read the cluster at etcd revision `revision`
/// or later (its `GET /cluster` says which it read last).
async fn wait_seen_everywhere(c: &Arc<ClusterState>, revision: i64, deadline: Instant) {
    let nodes: Vec<String> = c.node.view().nodes.keys().cloned().collect();
    for node in nodes {
        while Instant::now() < deadline && c.node.view().is_alive(&node) {
            let seen = c
                .call(
                    &node,
                    &Method::GET,
                    "/cluster",
                    Bytes::new(),
                    Duration::from_secs(2),
                    Route::of(0),
                )
                .await
                .ok()
                .and_then(|a| a.result()["raft_info"]["commit"].as_i64())
                .is_some_and(|seen| seen >= revision);
            if seen {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
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
    let k = key.clone();
    let dropped = etcd_call(c, move |e| e.delete_if(&k, revision)).await?;
    if dropped {
        // Answered once every node routes without it (a request through any node right after
        // finds it gone), as a creation is.
        wait_settled(c).await;
        super::aliases::forget_collection(c, &r.name).await;
        // Replicas are dropped by their nodes as they see the map go; the logs go now.
        if let Some(map) = map {
            // Retired shards' too (deleting one may have failed when its key was dropped).
            for shard in 0..map.shards.len() as u32 {
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
    let shards = map.active_shards();
    if shards.is_empty() {
        return Ok(ok(info_without_shards(map, &r.name)?, r.started));
    }
    let answers = c
        .read_all_shards(
            &r.name,
            map,
            &shards,
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
    if map.sharding_method == ShardingMethod::Custom {
        params["sharding_method"] = json!("custom");
    }
    Ok(ok(out, r.started))
}

/// The description of a collection sharded by key before its first key: empty, with the
/// configuration it was created with.
fn info_without_shards(map: &CollectionMap, name: &str) -> Result<Value, ApiError> {
    let config = crate::convert::collection_config(&map.config)?;
    let info = diskvec_db::CollectionInfo::empty(name.to_string(), config);
    let mut out = crate::convert::collection_info(&info, &[]);
    let params = &mut out["config"]["params"];
    params["shard_number"] = json!(map.shard_number);
    params["replication_factor"] = json!(map.replication_factor);
    params["write_consistency_factor"] = json!(map.write_consistency_factor);
    params["sharding_method"] = json!("custom");
    Ok(out)
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
            // Messages of the shards' logs this node's replicas passed over: not appended by
            // a node of the cluster (no tag, another secret) or replayed.
            "log": {
                "refused_messages": c.refused_log_messages.load(std::sync::atomic::Ordering::Relaxed),
            },
            "node_id": c.node.me.id,
        }),
        started,
    )
}

/// `GET /collections/{name}/cluster`: which shards this node holds and where the others are.
pub async fn collection_cluster(c: &ClusterState, map: &CollectionMap, r: &Routed) -> Response {
    let view = c.node.view();
    let me = &c.node.me.id;
    let mut local = Vec::new();
    let mut remote = Vec::new();
    let mut transfers = Vec::new();
    for (shard, s) in map.shards.iter().enumerate().filter(|(_, s)| !s.retired) {
        let key = s.key.as_ref().map(diskvec_cluster::ShardKey::to_json);
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
                local.push(json!({"shard_id": shard, "shard_key": key, "points_count": points, "state": state}));
            } else {
                remote.push(json!({
                    "shard_id": shard,
                    "shard_key": key,
                    "peer_id": diskvec_cluster::map::peer_id_of(node),
                    "state": state,
                }));
            }
        }
    }
    // diskvec's own: which messages each shard's log still holds (trimmed below its first).
    let mut logs = Vec::new();
    for shard in map.active_shards() {
        if let Ok((first, last)) = c.log.bounds(&map.stream_name(&r.name, shard)).await {
            logs.push(json!({"shard_id": shard, "first": first, "last": last}));
        }
    }
    ok(
        json!({
            "peer_id": c.node.me.peer_id(),
            "shard_count": map.active_shards().len(),
            "logs": logs,
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
