//! What the cluster is, as etcd holds it: the live nodes (each under its lease) and, per
//! collection, its shard map. Every node reads the same keys and so routes the same way.
//!
//! ```text
//! /diskvec/nodes/<node id>        {"id", "url"}                    bound to the node's lease
//! /diskvec/collections/<name>     {"uid", "config", "shard_number", "replication_factor",
//!                                  "write_consistency_factor", "sharding_method"?, "changes"?,
//!                                  "shards": [{"replicas": [ids], "moves"?, "key"?, "retired"?}]}
//!                                  changed only by compare-and-swap on its mod revision
//! ```

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::etcd::KeyValue;
use crate::keys::{ShardKey, ShardingMethod};

pub const NODES_PREFIX: &str = "/diskvec/nodes/";
pub const COLLECTIONS_PREFIX: &str = "/diskvec/collections/";
pub const ROOT_PREFIX: &str = "/diskvec/";
/// Every alias of the cluster, `{alias: collection}`, in one key: changed by
/// compare-and-swap, so a list of alias actions applies all or nothing.
pub const ALIASES_KEY: &str = "/diskvec/aliases";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeInfo {
    pub id: String,
    /// Where its HTTP API answers, e.g. `http://10.0.0.2:6333`.
    pub url: String,
}

impl NodeInfo {
    /// The number Qdrant's shapes call a peer id: a stable hash of the node id, kept below
    /// 2^53 so JavaScript and JSON readers hold it exactly.
    pub fn peer_id(&self) -> u64 {
        peer_id_of(&self.id)
    }
}

/// FNV-1a of the node id, cut to 53 bits (never 0).
pub fn peer_id_of(node_id: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in node_id.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (h & ((1 << 53) - 1)).max(1)
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ShardMap {
    /// Node ids holding a replica, distinct.
    pub replicas: Vec<String>,
    /// Replicas being moved: `to` is among the replicas already (its node builds it from
    /// the log); once it has caught up, its node removes `from` and the move.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub moves: Vec<Move>,
    /// The key whose points it holds (collections sharded by key only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<ShardKey>,
    /// Its key was dropped: it holds nothing and no replica (kept so that shard ids, which
    /// name logs and replicas, are never reused).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub retired: bool,
    /// How many of the collection's recorded `changes` were made before this shard (a shard
    /// of a key made later): a replica built from the log applies those first, the others
    /// being in its log.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub changes_before: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Move {
    pub from: String,
    pub to: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CollectionMap {
    /// Fixed at creation: names this incarnation's logs and replicas, so a collection dropped
    /// and created again under the same name never mixes with the old one's.
    pub uid: u64,
    /// The creation request's body without its cluster fields: what each replica is created
    /// from.
    pub config: Value,
    pub shard_number: u32,
    pub replication_factor: u32,
    pub write_consistency_factor: u32,
    /// `auto`: `shard_number` shards made at creation; `custom`: `shard_number` shards made
    /// per key as keys are made.
    #[serde(default, skip_serializing_if = "is_auto")]
    pub sharding_method: ShardingMethod,
    /// Changes of the collection itself (payload indexes, vector spaces, settings) applied
    /// so far, in order, as log messages: a shard made later for a new key applies them
    /// first (collections sharded by key only; others have every shard from the start).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changes: Vec<Value>,
    /// Strict mode as the collection's settings were last changed (the creation's
    /// `strict_mode_config` until then): what every node checks the requests it routes
    /// against, before they are logged or fanned out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict_mode: Option<Value>,
    pub shards: Vec<ShardMap>,
}

fn is_auto(m: &ShardingMethod) -> bool {
    *m == ShardingMethod::Auto
}

impl CollectionMap {
    /// The JetStream stream (and its one subject) of shard `shard`: letters, digits, `-`
    /// and `_` only, as stream names must be; `_` escapes the collection name's `_` and `.`.
    pub fn stream_name(&self, name: &str, shard: u32) -> String {
        let mut out = String::from("dv_");
        for c in name.chars() {
            match c {
                '_' => out.push_str("__"),
                '.' => out.push_str("_d"),
                c => out.push(c),
            }
        }
        out.push_str(&format!("_{:x}_{shard}", self.uid));
        out
    }
}

/// The local collection that holds a node's replica of `shard` of `collection`.
pub fn replica_name(collection: &str, shard: u32) -> String {
    format!("{collection}@{shard}")
}

/// The collection and shard of a replica's local name, if it is one.
pub fn parse_replica_name(local: &str) -> Option<(&str, u32)> {
    let (name, shard) = local.rsplit_once('@')?;
    Some((name, shard.parse().ok()?))
}

/// The cluster as one node last read it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClusterView {
    /// etcd's revision the view was read at; 0 before the first read.
    pub revision: i64,
    pub nodes: BTreeMap<String, NodeInfo>,
    /// Each collection's map and its key's mod revision (the compare-and-swap token).
    pub collections: BTreeMap<String, (CollectionMap, i64)>,
    /// Alias -> collection.
    pub aliases: BTreeMap<String, String>,
}

impl ClusterView {
    /// Reads a view from a range over [`ROOT_PREFIX`]; keys that do not parse are logged
    /// and left out (a newer node's key must not stop an older one from routing).
    pub fn from_keys(keys: &[KeyValue], revision: i64) -> Self {
        let mut view = ClusterView {
            revision,
            ..Default::default()
        };
        for kv in keys {
            if let Some(id) = kv.key.strip_prefix(NODES_PREFIX) {
                match serde_json::from_slice::<NodeInfo>(&kv.value) {
                    Ok(node) if node.id == id => {
                        view.nodes.insert(id.to_string(), node);
                    }
                    _ => log::warn!("cluster: node key {} does not parse; left out", kv.key),
                }
            } else if kv.key == ALIASES_KEY {
                match serde_json::from_slice(&kv.value) {
                    Ok(aliases) => view.aliases = aliases,
                    Err(e) => log::warn!("cluster: the aliases key does not parse: {e}"),
                }
            } else if let Some(name) = kv.key.strip_prefix(COLLECTIONS_PREFIX) {
                match serde_json::from_slice::<CollectionMap>(&kv.value) {
                    Ok(map) => {
                        view.collections
                            .insert(name.to_string(), (map, kv.mod_revision));
                    }
                    Err(e) => log::warn!("cluster: collection key {} does not parse: {e}", kv.key),
                }
            }
        }
        view
    }

    pub fn is_alive(&self, node: &str) -> bool {
        self.nodes.contains_key(node)
    }

    pub fn collection(&self, name: &str) -> Option<&CollectionMap> {
        self.collections.get(name).map(|(m, _)| m)
    }

    /// The collection a name means: itself, or the collection an alias of that name points to.
    pub fn resolve<'a>(&'a self, name: &'a str) -> &'a str {
        if self.collections.contains_key(name) {
            return name;
        }
        self.aliases.get(name).map_or(name, String::as_str)
    }
}

/// Places `shards` shards of `replication` replicas each on distinct nodes, least loaded
/// first (load: replicas the nodes hold already, over every collection), ties by node id.
/// With fewer live nodes than `replication`, each shard gets one replica per node.
pub fn place(view: &ClusterView, shards: u32, replication: u32) -> Vec<ShardMap> {
    let mut load: BTreeMap<&str, usize> = view.nodes.keys().map(|k| (k.as_str(), 0)).collect();
    for (map, _) in view.collections.values() {
        for shard in &map.shards {
            for r in &shard.replicas {
                if let Some(n) = load.get_mut(r.as_str()) {
                    *n += 1;
                }
            }
        }
    }
    let per_shard = (replication as usize).min(load.len());
    let mut out = Vec::with_capacity(shards as usize);
    for _ in 0..shards {
        let mut order: Vec<(&str, usize)> = load.iter().map(|(k, v)| (*k, *v)).collect();
        order.sort_by_key(|&(id, n)| (n, id));
        let replicas: Vec<String> = order
            .iter()
            .take(per_shard)
            .map(|(id, _)| id.to_string())
            .collect();
        for r in &replicas {
            *load.get_mut(r.as_str()).expect("placed on a known node") += 1;
        }
        out.push(ShardMap {
            replicas,
            moves: Vec::new(),
            key: None,
            retired: false,
            changes_before: 0,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view_of(nodes: &[&str]) -> ClusterView {
        ClusterView {
            revision: 1,
            nodes: nodes
                .iter()
                .map(|n| {
                    (
                        n.to_string(),
                        NodeInfo {
                            id: n.to_string(),
                            url: format!("http://{n}"),
                        },
                    )
                })
                .collect(),
            collections: BTreeMap::new(),
            aliases: BTreeMap::new(),
        }
    }

    #[test]
    fn replicas_of_a_shard_land_on_distinct_nodes_and_spread_evenly() {
        let view = view_of(&["a", "b", "c"]);
        let shards = place(&view, 3, 2);
        let mut per_node = BTreeMap::new();
        for s in &shards {
            assert_eq!(s.replicas.len(), 2);
            assert_ne!(s.replicas[0], s.replicas[1]);
            for r in &s.replicas {
                *per_node.entry(r.clone()).or_insert(0) += 1;
            }
        }
        assert_eq!(
            per_node.values().copied().collect::<Vec<_>>(),
            vec![2, 2, 2]
        );
        // More replicas asked than nodes: one per node.
        assert!(place(&view, 1, 5)[0].replicas.len() == 3);
        // A second collection goes first to the nodes the first one loaded least.
        let mut view = view_of(&["a", "b", "c"]);
        let first = CollectionMap {
            uid: 1,
            config: Value::Null,
            shard_number: 1,
            replication_factor: 2,
            write_consistency_factor: 1,
            shards: vec![ShardMap {
                replicas: vec!["a".into(), "b".into()],
                moves: Vec::new(),
                key: None,
                retired: false,
                changes_before: 0,
            }],
            sharding_method: ShardingMethod::Auto,
            changes: Vec::new(),
            strict_mode: None,
        };
        view.collections.insert("x".into(), (first, 5));
        assert_eq!(place(&view, 1, 1)[0].replicas, vec!["c".to_string()]);
    }

    #[test]
    fn stream_names_keep_distinct_collections_apart() {
        let map = CollectionMap {
            uid: 0xab,
            config: Value::Null,
            shard_number: 2,
            replication_factor: 1,
            write_consistency_factor: 1,
            sharding_method: ShardingMethod::Auto,
            changes: Vec::new(),
            strict_mode: None,
            shards: vec![],
        };
        assert_eq!(map.stream_name("docs", 1), "dv_docs_ab_1");
        assert_ne!(map.stream_name("a.b", 0), map.stream_name("a_b", 0));
        assert!(map
            .stream_name("a.b-c_d", 0)
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'));
    }

    #[test]
    fn replica_names_round_trip() {
        assert_eq!(
            parse_replica_name(&replica_name("docs.v2", 7)),
            Some(("docs.v2", 7))
        );
        assert_eq!(parse_replica_name("docs"), None);
        assert_eq!(parse_replica_name("docs@x"), None);
    }

    #[test]
    fn a_view_reads_nodes_and_collections_and_skips_what_does_not_parse() {
        let node = NodeInfo {
            id: "a".into(),
            url: "http://127.0.0.1:1".into(),
        };
        let keys = vec![
            KeyValue {
                key: format!("{NODES_PREFIX}a"),
                value: serde_json::to_vec(&node).unwrap(),
                mod_revision: 3,
                lease: 7,
            },
            KeyValue {
                key: format!("{NODES_PREFIX}b"),
                value: b"not json".to_vec(),
                mod_revision: 4,
                lease: 8,
            },
        ];
        let view = ClusterView::from_keys(&keys, 9);
        assert_eq!(view.revision, 9);
        assert_eq!(view.nodes.len(), 1);
        assert!(view.is_alive("a") && !view.is_alive("b"));
        assert_ne!(node.peer_id(), peer_id_of("b"));
    }
}
