//! A write to a sharded collection as the messages each shard's log receives: the points of
//! an upsert (either of Qdrant's two shapes), the ids of a delete or payload change, go to
//! the shard each id belongs to; a write by filter, and a change of the collection itself
//! (a payload index, a vector space, settings), goes to every shard. A batch becomes one
//! message per operation, so every message is one operation: applying the last one twice
//! (a crash between applying it and recording so) leaves the same state as applying it once.

use diskvec_cluster::keys::shard_in;
use diskvec_db::PointId;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// NATS refuses messages over 1 MiB by default; an upsert larger than this is cut in parts
/// (points are independent, so the parts may be applied one after another).
pub const MAX_MESSAGE_BYTES: usize = 900 * 1024;

/// One operation as a shard's log holds it: the request a replica applies to its local
/// collection (`/collections/<collection>@<shard>/<path>?<query>`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LogMessage {
    pub method: String,
    /// After `/collections/<name>`: empty for the collection itself, else e.g.
    /// `/points/payload`.
    pub path: String,
    /// The request's query string without `wait` and `timeout` (the replica waits itself).
    pub query: String,
    pub body: Value,
}

/// The method of a message that changes nothing: a read appends one to learn where the log
/// ends (`consistency`); replicas pass over it.
pub const BARRIER: &str = "BARRIER";

impl LogMessage {
    pub fn barrier() -> Self {
        LogMessage {
            method: BARRIER.into(),
            path: String::new(),
            query: String::new(),
            body: Value::Null,
        }
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a log message serializes")
    }
}

/// The query string a replica applies with: the request's, less `wait` and `timeout`.
pub fn replica_query(query: Option<&str>) -> String {
    query
        .unwrap_or("")
        .split('&')
        .filter(|kv| {
            !kv.is_empty()
                && *kv != "wait"
                && !kv.starts_with("wait=")
                && !kv.starts_with("timeout=")
        })
        .collect::<Vec<_>>()
        .join("&")
}

/// The batch endpoint's operations by name, with (method, path) of the single operation's
/// endpoint.
const BATCH_OPERATIONS: &[(&str, (&str, &str))] = &[
    ("upsert", ("PUT", "/points")),
    ("delete", ("POST", "/points/delete")),
    ("set_payload", ("POST", "/points/payload")),
    ("overwrite_payload", ("PUT", "/points/payload")),
    ("delete_payload", ("POST", "/points/payload/delete")),
    ("clear_payload", ("POST", "/points/payload/clear")),
    ("update_vectors", ("PUT", "/points/vectors")),
    ("delete_vectors", ("POST", "/points/vectors/delete")),
];

/// The batch endpoint's operation `name` as (method, path) of its own endpoint.
pub(super) fn batch_operation(name: &str) -> Option<(&'static str, &'static str)> {
    BATCH_OPERATIONS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, route)| *route)
}

/// The name of the batch operation whose own endpoint is `method path`.
pub(super) fn operation_at(method: &str, path: &str) -> Option<&'static str> {
    BATCH_OPERATIONS
        .iter()
        .find(|(_, route)| *route == (method, path))
        .map(|(name, _)| *name)
}

/// Where one operation goes, from its body (its `shard_key`): the groups of shards its point
/// ids hash within (`CollectionMap::groups`).
pub type Groups<'a> = &'a dyn Fn(&Value) -> Result<Vec<Vec<u32>>, String>;

/// The messages of a write, per shard (index = shard id, `shards` of them), in the order they
/// must apply.
pub fn split_write(
    method: &str,
    path: &str,
    query: &str,
    body: &Value,
    shards: usize,
    groups: Groups,
) -> Result<Vec<Vec<LogMessage>>, String> {
    let mut out = vec![Vec::new(); shards];
    if path == "/points/batch" {
        let ops = body
            .get("operations")
            .and_then(Value::as_array)
            .ok_or("a batch needs \"operations\": a list")?;
        for (i, op) in ops.iter().enumerate() {
            let (name, inner) = op
                .as_object()
                .filter(|o| o.len() == 1)
                .and_then(|o| o.iter().next())
                .ok_or_else(|| {
                    format!("operations[{i}]: expected one operation, as {{\"upsert\": {{...}}}}")
                })?;
            let (m, p) = batch_operation(name)
                .ok_or_else(|| format!("operations[{i}]: unknown operation {name:?}"))?;
            // The operation's own fields beside the batch's (`shard_key` and such).
            let mut one = inner.clone();
            if name == "clear_payload" && inner.is_array() {
                one = serde_json::json!({ "points": inner });
            }
            let groups = groups(&one).map_err(|e| format!("operations[{i}]: {e}"))?;
            split_one(m, p, query, &one, &groups, &mut out)?;
        }
        return Ok(out);
    }
    split_one(method, path, query, body, &groups(body)?, &mut out)?;
    Ok(out)
}

/// A request body as a replica applies it: a replica holds one shard, so its key is not
/// passed on.
pub fn without_shard_key(body: &Value) -> Value {
    let mut body = body.clone();
    if let Some(o) = body.as_object_mut() {
        o.remove("shard_key");
    }
    body
}

fn message(method: &str, path: &str, query: &str, body: Value) -> LogMessage {
    LogMessage {
        method: method.into(),
        path: path.into(),
        query: query.into(),
        body,
    }
}

fn id_of(v: &Value, at: &str) -> Result<PointId, String> {
    let id = v.get("id").unwrap_or(v);
    PointId::from_json(id).map_err(|e| format!("{at}: {e}"))
}

/// One operation into the messages of the shards it reaches (its groups'), appended to `out`.
fn split_one(
    method: &str,
    path: &str,
    query: &str,
    body: &Value,
    groups: &[Vec<u32>],
    out: &mut [Vec<LogMessage>],
) -> Result<(), String> {
    let body = without_shard_key(body);
    for group in groups {
        split_in_group(method, path, query, &body, group, out)?;
    }
    Ok(())
}

fn split_in_group(
    method: &str,
    path: &str,
    query: &str,
    body: &Value,
    group: &[u32],
    out: &mut [Vec<LogMessage>],
) -> Result<(), String> {
    let by_id = body.get("points").and_then(Value::as_array);
    if let Some(points) = by_id.filter(|_| group.len() > 1) {
        let mut parts: Vec<(u32, Vec<Value>)> = group.iter().map(|&s| (s, Vec::new())).collect();
        for (i, p) in points.iter().enumerate() {
            let id = id_of(p, &format!("points[{i}]"))?;
            let shard = shard_in(group, id);
            parts[group
                .iter()
                .position(|&s| s == shard)
                .expect("in its group")]
            .1
            .push(p.clone());
        }
        for (shard, part) in parts {
            if part.is_empty() {
                continue;
            }
            let mut b = body.clone();
            b["points"] = Value::Array(part);
            out[shard as usize].extend(chunked(message(method, path, query, b)));
        }
        return Ok(());
    }
    if let Some(batch) = body.get("batch").and_then(Value::as_object) {
        let ids = batch
            .get("ids")
            .and_then(Value::as_array)
            .ok_or("batch.ids: expected a list of point ids")?;
        let mut rows: Vec<(u32, Vec<usize>)> = group.iter().map(|&s| (s, Vec::new())).collect();
        for (i, id) in ids.iter().enumerate() {
            let id = id_of(id, &format!("batch.ids[{i}]"))?;
            let shard = shard_in(group, id);
            rows[group
                .iter()
                .position(|&s| s == shard)
                .expect("in its group")]
            .1
            .push(i);
        }
        for (shard, rows) in rows {
            if rows.is_empty() {
                continue;
            }
            let mut b = body.clone();
            b["batch"] = Value::Object(pick_rows(batch, &rows));
            out[shard as usize].extend(chunked(message(method, path, query, b)));
        }
        return Ok(());
    }
    // By filter, or the collection itself: every shard of the group.
    for &shard in group {
        out[shard as usize].extend(chunked(message(method, path, query, body.clone())));
    }
    Ok(())
}

/// The rows `rows` of a batch's parallel lists (`ids`, `payloads`, `vectors` as a list or
/// as lists by space name).
fn pick_rows(batch: &Map<String, Value>, rows: &[usize]) -> Map<String, Value> {
    let pick = |list: &Value| -> Value {
        match list.as_array() {
            Some(items) => Value::Array(
                rows.iter()
                    .map(|&r| items.get(r).cloned().unwrap_or(Value::Null))
                    .collect(),
            ),
            None => list.clone(),
        }
    };
    batch
        .iter()
        .map(|(k, v)| {
            let picked = match v {
                Value::Object(by_space) if k == "vectors" => {
                    Value::Object(by_space.iter().map(|(s, l)| (s.clone(), pick(l))).collect())
                }
                v => pick(v),
            };
            (k.clone(), picked)
        })
        .collect()
}

/// A message over [`MAX_MESSAGE_BYTES`] cut into halves by its points (or batch rows) until
/// each fits; one point too large stays one message (the log refuses it with its reason).
fn chunked(msg: LogMessage) -> Vec<LogMessage> {
    if msg.to_bytes().len() <= MAX_MESSAGE_BYTES {
        return vec![msg];
    }
    if let Some(points) = msg.body.get("points").and_then(Value::as_array) {
        if points.len() >= 2 {
            let (a, b) = points.split_at(points.len() / 2);
            let mut out = Vec::new();
            for half in [a, b] {
                let mut m = msg.clone();
                m.body["points"] = Value::Array(half.to_vec());
                out.extend(chunked(m));
            }
            return out;
        }
    }
    if let Some(batch) = msg.body.get("batch").and_then(Value::as_object) {
        let n = batch
            .get("ids")
            .and_then(Value::as_array)
            .map_or(0, Vec::len);
        if n >= 2 {
            let all: Vec<usize> = (0..n).collect();
            let (a, b) = all.split_at(n / 2);
            let mut out = Vec::new();
            for half in [a, b] {
                let mut m = msg.clone();
                m.body["batch"] = Value::Object(pick_rows(batch, half));
                out.extend(chunked(m));
            }
            return out;
        }
    }
    vec![msg]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn shard(id: u64, n: u32) -> usize {
        diskvec_db::shard_of(PointId::Num(id), n) as usize
    }

    /// Every operation to one group of `n` shards (a collection sharded by point id).
    fn split(
        path: &str,
        query: &str,
        body: &Value,
        n: u32,
    ) -> Result<Vec<Vec<LogMessage>>, String> {
        let method = if path == "/points" { "PUT" } else { "POST" };
        split_write(method, path, query, body, n as usize, &|_| {
            Ok(vec![(0..n).collect()])
        })
    }

    #[test]
    fn points_go_to_their_shards_and_filters_to_every_shard() {
        let body = json!({"points": (0..40).map(|i| json!({"id": i, "vector": [i as f32]})).collect::<Vec<_>>()});
        let parts = split("/points", "", &body, 3).unwrap();
        let mut seen = 0;
        for (s, msgs) in parts.iter().enumerate() {
            for m in msgs {
                for p in m.body["points"].as_array().unwrap() {
                    assert_eq!(shard(p["id"].as_u64().unwrap(), 3), s);
                    seen += 1;
                }
            }
        }
        assert_eq!(seen, 40);
        let by_filter = json!({"filter": {"must": []}});
        let parts = split("/points/delete", "", &by_filter, 3).unwrap();
        assert!(parts.iter().all(|m| m.len() == 1 && m[0].body == by_filter));
        // Ids of a payload change.
        let ids = json!({"payload": {"a": 1}, "points": [1, 2, 3, 4, 5, 6]});
        let parts = split("/points/payload", "", &ids, 2).unwrap();
        for (s, msgs) in parts.iter().enumerate() {
            for id in msgs
                .iter()
                .flat_map(|m| m.body["points"].as_array().unwrap())
            {
                assert_eq!(shard(id.as_u64().unwrap(), 2), s);
            }
        }
        assert!(split("/points", "", &json!({"points": [{"id": -1}]}), 2).is_err());
    }

    #[test]
    fn a_batch_shape_upsert_keeps_its_rows_together() {
        let body = json!({"batch": {
            "ids": [0, 1, 2, 3, 4, 5, 6, 7],
            "vectors": {"a": [[0.0], [1.0], [2.0], [3.0], [4.0], [5.0], [6.0], [7.0]]},
            "payloads": [{"n": 0}, {"n": 1}, {"n": 2}, {"n": 3}, {"n": 4}, {"n": 5}, {"n": 6}, {"n": 7}]
        }});
        let parts = split("/points", "wait=true", &body, 3).unwrap();
        let mut seen = 0;
        for (s, msgs) in parts.iter().enumerate() {
            for m in msgs {
                let b = &m.body["batch"];
                for (k, id) in b["ids"].as_array().unwrap().iter().enumerate() {
                    let id = id.as_u64().unwrap();
                    assert_eq!(shard(id, 3), s);
                    assert_eq!(b["vectors"]["a"][k][0].as_f64().unwrap() as u64, id);
                    assert_eq!(b["payloads"][k]["n"].as_u64().unwrap(), id);
                    seen += 1;
                }
            }
        }
        assert_eq!(seen, 8);
    }

    #[test]
    fn a_batch_is_one_message_per_operation_in_order() {
        let body = json!({"operations": [
            {"upsert": {"points": [{"id": 1, "vector": [1.0]}, {"id": 2, "vector": [2.0]}]}},
            {"delete": {"filter": {"must": []}}},
            {"clear_payload": {"points": [1]}},
        ]});
        let parts = split("/points/batch", "", &body, 1).unwrap();
        let paths: Vec<&str> = parts[0].iter().map(|m| m.path.as_str()).collect();
        assert_eq!(
            paths,
            ["/points", "/points/delete", "/points/payload/clear"]
        );
        assert!(split(
            "/points/batch",
            "",
            &json!({"operations": [{"nope": {}}]}),
            1
        )
        .is_err());
    }

    #[test]
    fn each_operation_goes_to_the_shards_of_its_own_keys() {
        // Shards 0-1 hold key "a", shard 2 key "b" (as CollectionMap::groups routes them).
        let groups = |op: &Value| -> Result<Vec<Vec<u32>>, String> {
            match op.get("shard_key").and_then(Value::as_str) {
                Some("a") => Ok(vec![vec![0, 1]]),
                Some("b") => Ok(vec![vec![2]]),
                _ => Err("shard key not specified".into()),
            }
        };
        let body = json!({"operations": [
            {"upsert": {"shard_key": "a", "points": (0..20).map(|i| json!({"id": i, "vector": [1.0]})).collect::<Vec<_>>()}},
            {"upsert": {"shard_key": "b", "points": [{"id": 1, "vector": [2.0]}]}},
            {"delete": {"shard_key": "b", "filter": {"must": []}}},
        ]});
        let parts = split_write("POST", "/points/batch", "", &body, 3, &groups).unwrap();
        let ids = |s: usize| -> Vec<u64> {
            parts[s]
                .iter()
                .filter_map(|m| m.body.get("points"))
                .flat_map(|p| {
                    p.as_array()
                        .unwrap()
                        .iter()
                        .map(|p| p["id"].as_u64().unwrap())
                })
                .collect()
        };
        let (a0, a1) = (ids(0), ids(1));
        assert_eq!(a0.len() + a1.len(), 20);
        assert!(a0.iter().all(|&i| shard(i, 2) == 0) && a1.iter().all(|&i| shard(i, 2) == 1));
        assert_eq!(ids(2), vec![1]);
        assert_eq!(parts[2].len(), 2);
        // A replica holds one shard: the key is not passed on.
        assert!(parts
            .iter()
            .flatten()
            .all(|m| m.body.get("shard_key").is_none()));
        let unkeyed = json!({"points": [{"id": 1, "vector": [1.0]}]});
        assert!(split_write("PUT", "/points", "", &unkeyed, 3, &groups).is_err());
    }

    #[test]
    fn large_upserts_are_cut_below_the_message_limit() {
        let point = |i: u64| json!({"id": i, "vector": vec![0.5f32; 768]});
        let body = json!({"points": (0..400).map(point).collect::<Vec<_>>()});
        let parts = split("/points", "", &body, 1).unwrap();
        assert!(parts[0].len() > 1);
        let mut n = 0;
        for m in &parts[0] {
            assert!(m.to_bytes().len() <= MAX_MESSAGE_BYTES);
            n += m.body["points"].as_array().unwrap().len();
        }
        assert_eq!(n, 400);
        assert_eq!(
            replica_query(Some("wait=true&ordering=weak&timeout=3")),
            "ordering=weak"
        );
    }
}
