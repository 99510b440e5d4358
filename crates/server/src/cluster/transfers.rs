//! `POST /collections/{name}/cluster`: Qdrant's shard operations on a cluster collection.
//! Each is one compare-and-swap of the collection's shard map; the nodes do the rest as they
//! read the map. A replica added to a shard is built by its node from the shard's log (every
//! message from the first: the log is never trimmed yet), and is read and waited for only once
//! it has caught up; a move is a replica added plus the old one dropped by the new replica's
//! node once it has caught up (so a move survives the death of the node that asked for it).

use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::Response;
use diskvec_cluster::map::{peer_id_of, COLLECTIONS_PREFIX};
use diskvec_cluster::{CollectionMap, Move};
use serde_json::{json, Value};

use super::collections::etcd_call;
use super::{replicas, ClusterState, Routed};
use crate::envelope::{ok, ApiError};

/// Compare-and-swap rounds before giving up on a map others keep changing.
const CAS_ROUNDS: usize = 8;

fn field_u64(op: &Value, field: &str) -> Result<u64, ApiError> {
    op.get(field)
        .and_then(Value::as_u64)
        .ok_or_else(|| ApiError::bad_request(format!("{field}: expected a whole number")))
}

/// The node id of a peer id among `candidates` (the live nodes and the shard's replicas).
fn node_of(map_nodes: &[String], peer: u64) -> Result<String, ApiError> {
    map_nodes
        .iter()
        .find(|n| peer_id_of(n) == peer)
        .cloned()
        .ok_or_else(|| ApiError::bad_request(format!("no peer {peer} in the cluster")))
}

/// One shard operation applied to a copy of the map; an error when it cannot apply.
fn apply(map: &mut CollectionMap, op: &Value, live: &[String]) -> Result<(), ApiError> {
    let (kind, args) = op
        .as_object()
        .filter(|o| o.len() == 1)
        .and_then(|o| o.iter().next())
        .ok_or_else(|| {
            ApiError::bad_request(
                "expected one operation: move_shard, replicate_shard, abort_transfer or drop_replica",
            )
        })?;
    let shard = field_u64(args, "shard_id")? as usize;
    let shards = map.shards.len();
    let s = map
        .shards
        .get_mut(shard)
        .filter(|s| !s.retired)
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "shard {shard}: no such shard (the collection has {shards} shard ids)"
            ))
        })?;
    let mut known: Vec<String> = live.to_vec();
    known.extend(s.replicas.iter().cloned());
    // A move's nodes too: a dead target can still be named to abort its move.
    known.extend(s.moves.iter().flat_map(|m| [m.from.clone(), m.to.clone()]));
    let peer =
        |field: &str| -> Result<String, ApiError> { node_of(&known, field_u64(args, field)?) };
    let in_transfer = |node: &str| s.moves.iter().any(|m| m.from == node || m.to == node);
    match kind.as_str() {
        "replicate_shard" | "move_shard" => {
            let to = peer("to_peer_id")?;
            let from_node = peer("from_peer_id")?;
            // One transfer at a time per replica (as Qdrant): a chain of moves could leave a
            // move whose target no longer holds the shard.
            if in_transfer(&to) || in_transfer(&from_node) {
                return Err(ApiError::bad_request(format!(
                    "a transfer of shard {shard} involving {from_node} or {to} is under way; wait for it or abort it"
                )));
            }
            if !live.contains(&to) {
                return Err(ApiError::bad_request(format!(
                    "peer of node {to} is not live"
                )));
            }
            if s.replicas.contains(&to) {
                return Err(ApiError::bad_request(format!(
                    "node {to} holds a replica of shard {shard} already"
                )));
            }
            let from = from_node;
            if !s.replicas.contains(&from) {
                return Err(ApiError::bad_request(format!(
                    "node {from} holds no replica of shard {shard}"
                )));
            }
            s.replicas.push(to.clone());
            if kind == "move_shard" {
                s.moves.push(Move { from, to });
            }
        }
        "abort_transfer" => {
            let (from, to) = (peer("from_peer_id")?, peer("to_peer_id")?);
            let at = s
                .moves
                .iter()
                .position(|m| m.from == from && m.to == to)
                .ok_or_else(|| {
                    ApiError::bad_request(format!(
                        "no transfer of shard {shard} from {from} to {to}"
                    ))
                })?;
            s.moves.remove(at);
            s.replicas.retain(|r| *r != to);
            s.moves.retain(|m| m.to != to && m.from != to);
        }
        "drop_replica" => {
            let node = peer("peer_id")?;
            if !s.replicas.contains(&node) {
                return Err(ApiError::bad_request(format!(
                    "node {node} holds no replica of shard {shard}"
                )));
            }
            if s.replicas.len() == 1 {
                return Err(ApiError::bad_request(format!(
                    "the replica on {node} is the last of shard {shard}: it cannot be dropped"
                )));
            }
            s.replicas.retain(|r| *r != node);
            s.moves.retain(|m| m.from != node && m.to != node);
        }
        other => {
            return Err(ApiError::bad_request(format!(
                "unknown shard operation {other:?}"
            )))
        }
    }
    Ok(())
}

/// `POST /collections/{name}/cluster`.
pub async fn update(c: &Arc<ClusterState>, r: Routed) -> Result<Response, ApiError> {
    let op = r.json()?;
    let key = format!("{COLLECTIONS_PREFIX}{}", r.name);
    for _ in 0..CAS_ROUNDS {
        let k = key.clone();
        let current = etcd_call(c, move |e| e.get(&k))
            .await?
            .ok_or_else(|| diskvec_db::DbError::UnknownCollection(r.name.clone()))?;
        let mut map: CollectionMap = serde_json::from_slice(&current.value).map_err(|e| {
            ApiError::bad_request(format!("the collection's shard map does not parse: {e}"))
        })?;
        let live: Vec<String> = c.node.view().nodes.keys().cloned().collect();
        let before = map.clone();
        apply(&mut map, &op, &live)?;
        if op.get("drop_replica").is_some() {
            keeps_a_caught_up_replica(c, &r.name, &before, &map).await?;
        }
        let value = serde_json::to_vec(&map).expect("a shard map serializes");
        let (k, revision) = (key.clone(), current.mod_revision);
        if etcd_call(c, move |e| e.compare_and_swap(&k, revision, &value)).await? {
            return Ok(ok(json!(true), r.started));
        }
    }
    Err(ApiError {
        status: StatusCode::CONFLICT,
        message: "the shard map kept changing under this operation; try again".into(),
        retry_after: Some(1),
    })
}

/// Refuses a drop that would leave a shard without a replica that has caught up with its log
/// (one still replaying would answer nothing and hold every write back).
async fn keeps_a_caught_up_replica(
    c: &Arc<ClusterState>,
    name: &str,
    before: &CollectionMap,
    after: &CollectionMap,
) -> Result<(), ApiError> {
    for (shard, (was, now)) in before.shards.iter().zip(&after.shards).enumerate() {
        if was.replicas == now.replicas {
            continue;
        }
        let local = diskvec_cluster::map::replica_name(name, shard as u32);
        let mut ready = false;
        for node in now.replicas.iter().filter(|n| c.node.view().is_alive(n)) {
            let answer = super::writes::applied_now(c, node, &local, before.uid).await;
            if answer.is_ok_and(|a| a.result()["ready"] == json!(true)) {
                ready = true;
                break;
            }
        }
        if !ready {
            return Err(ApiError::bad_request(format!(
                "no other replica of shard {shard} is live and caught up with its log: the drop would leave it unanswered"
            )));
        }
    }
    Ok(())
}

/// Completes the moves to this node whose new replica has caught up: drops the old replica
/// from the map (its node then drops its copy). Run by every node as it keeps its replicas.
pub async fn finish_moves(c: &Arc<ClusterState>) -> Result<(), String> {
    let me = c.node.me.id.clone();
    let view = c.node.view();
    for (name, (map, _)) in &view.collections {
        // The shards moving here whose replica has applied its log to the log's end now.
        let mut finished_shards = Vec::new();
        for (shard, s) in map.shards.iter().enumerate() {
            if !s.moves.iter().any(|m| m.to == me) {
                continue;
            }
            let local = diskvec_cluster::map::replica_name(name, shard as u32);
            let stream = map.stream_name(name, shard as u32);
            if replicas::caught_up(c, &local, map.uid, &stream).await {
                finished_shards.push(shard);
            }
        }
        if finished_shards.is_empty() {
            continue;
        }
        if let Err(e) = finish_in_map(c, name, map.uid, &finished_shards).await {
            // Tried again at the next round of keeping replicas.
            log::warn!("cluster: finishing moves of {name}: {e}");
        }
    }
    Ok(())
}

/// Drops, in the stored map, the source of each move to this node of `shards`.
async fn finish_in_map(
    c: &Arc<ClusterState>,
    name: &str,
    uid: u64,
    shards: &[usize],
) -> Result<(), String> {
    let me = c.node.me.id.clone();
    let key = format!("{COLLECTIONS_PREFIX}{name}");
    let k = key.clone();
    let Some(current) = etcd_call(c, move |e| e.get(&k))
        .await
        .map_err(|e| e.message)?
    else {
        return Ok(());
    };
    let mut map =
        serde_json::from_slice::<CollectionMap>(&current.value).map_err(|e| e.to_string())?;
    if map.uid != uid {
        return Ok(());
    }
    let mut changed = false;
    for &shard in shards {
        let Some(s) = map.shards.get_mut(shard) else {
            continue;
        };
        let finished: Vec<Move> = s.moves.iter().filter(|m| m.to == me).cloned().collect();
        for m in finished {
            s.replicas.retain(|r| *r != m.from);
            // The move, and any other naming the dropped replica.
            s.moves
                .retain(|x| x.from != m.from && x.to != m.from && *x != m);
            changed = true;
            log::info!(
                "cluster: shard {shard} of {name} moved from {} to {}",
                m.from,
                m.to
            );
        }
    }
    if !changed {
        return Ok(());
    }
    let value = serde_json::to_vec(&map).expect("a shard map serializes");
    let revision = current.mod_revision;
    etcd_call(c, move |e| e.compare_and_swap(&key, revision, &value))
        .await
        .map(|_| ())
        .map_err(|e| e.message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use diskvec_cluster::ShardMap;

    fn map() -> CollectionMap {
        CollectionMap {
            uid: 1,
            config: Value::Null,
            shard_number: 2,
            replication_factor: 1,
            write_consistency_factor: 1,
            shards: vec![
                ShardMap {
                    replicas: vec!["a".into()],
                    moves: vec![],
                    key: None,
                    retired: false,
                    changes_before: 0,
                },
                ShardMap {
                    replicas: vec!["b".into()],
                    moves: vec![],
                    key: None,
                    retired: false,
                    changes_before: 0,
                },
            ],
            sharding_method: Default::default(),
            changes: vec![],
            strict_mode: None,
        }
    }

    #[test]
    fn shard_operations_change_the_map_or_say_why_not() {
        let live: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
        let (a, b, c) = (peer_id_of("a"), peer_id_of("b"), peer_id_of("c"));
        let mut m = map();
        let mv = json!({"move_shard": {"shard_id": 0, "from_peer_id": a, "to_peer_id": c}});
        apply(&mut m, &mv, &live).unwrap();
        assert_eq!(m.shards[0].replicas, ["a", "c"]);
        assert_eq!(
            m.shards[0].moves,
            [Move {
                from: "a".into(),
                to: "c".into()
            }]
        );
        // The same move again: c holds it already; a chained move while it runs is refused.
        assert!(apply(&mut m, &mv, &live).is_err());
        let chained = json!({"move_shard": {"shard_id": 0, "from_peer_id": c, "to_peer_id": b}});
        assert!(apply(&mut m, &chained, &live).is_err());
        let abort = json!({"abort_transfer": {"shard_id": 0, "from_peer_id": a, "to_peer_id": c}});
        apply(&mut m, &abort, &live).unwrap();
        assert_eq!(m, map());
        let rep = json!({"replicate_shard": {"shard_id": 1, "from_peer_id": b, "to_peer_id": a}});
        apply(&mut m, &rep, &live).unwrap();
        assert_eq!(m.shards[1].replicas, ["b", "a"]);
        assert!(m.shards[1].moves.is_empty());
        apply(
            &mut m,
            &json!({"drop_replica": {"shard_id": 1, "peer_id": b}}),
            &live,
        )
        .unwrap();
        assert_eq!(m.shards[1].replicas, ["a"]);
        // The last replica stays; unknown shards, peers and operations are refused.
        for bad in [
            json!({"drop_replica": {"shard_id": 1, "peer_id": a}}),
            json!({"drop_replica": {"shard_id": 9, "peer_id": a}}),
            json!({"replicate_shard": {"shard_id": 0, "from_peer_id": a, "to_peer_id": 12345}}),
            json!({"create_sharding_key": {"shard_key": "x"}}),
            json!([]),
        ] {
            let before = m.clone();
            assert!(apply(&mut m, &bad, &live).is_err(), "{bad}");
            assert_eq!(m, before);
        }
    }
}
