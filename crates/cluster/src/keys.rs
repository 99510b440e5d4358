//! Which shards a request reaches. A collection sharded by point id (`auto`) hashes every id
//! over all its shards; one sharded by key (`custom`, Qdrant's shard keys) has a group of
//! shards per key, a request names its keys (`shard_key`), and ids hash within each named
//! key's group. A tenant per key keeps each tenant's points on the shards of its key.

use std::fmt;

use diskvec_db::{shard_of, PointId};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::map::CollectionMap;

/// A shard key: Qdrant's keys are strings or whole numbers.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ShardKey {
    Number(u64),
    Name(String),
}

impl ShardKey {
    pub fn from_json(v: &Value) -> Result<Self, String> {
        match v {
            Value::String(s) => Ok(ShardKey::Name(s.clone())),
            other => other.as_u64().map(ShardKey::Number).ok_or_else(|| {
                format!("a shard key is a string or a whole number of at least 0, got {other}")
            }),
        }
    }

    pub fn to_json(&self) -> Value {
        match self {
            ShardKey::Number(n) => Value::from(*n),
            ShardKey::Name(s) => Value::from(s.as_str()),
        }
    }
}

impl fmt::Display for ShardKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ShardKey::Number(n) => write!(f, "{n}"),
            ShardKey::Name(s) => write!(f, "{s:?}"),
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ShardingMethod {
    /// Shards fixed at creation; a point's shard is a hash of its id.
    #[default]
    Auto,
    /// Shards made per key (`PUT /collections/{c}/shards`); requests name their keys.
    Custom,
}

impl ShardingMethod {
    pub fn from_json(v: Option<&Value>) -> Result<Self, String> {
        match v {
            None | Some(Value::Null) => Ok(ShardingMethod::Auto),
            Some(Value::String(s)) if s == "auto" => Ok(ShardingMethod::Auto),
            Some(Value::String(s)) if s == "custom" => Ok(ShardingMethod::Custom),
            Some(other) => Err(format!(
                "sharding_method: expected \"auto\" or \"custom\", got {other}"
            )),
        }
    }
}

/// The keys a request names in its `shard_key` field.
#[derive(Clone, Debug, PartialEq)]
pub enum KeySelector {
    /// No `shard_key`: every key for a read; a write to a collection sharded by key needs one.
    Unset,
    Keys(Vec<ShardKey>),
    /// `{"target": k, "fallback": f}`: the target's shards if the key exists, else the
    /// fallback's.
    WithFallback {
        target: ShardKey,
        fallback: ShardKey,
    },
}

impl KeySelector {
    /// The selector of a request body (or of one operation of a batch).
    pub fn of(body: &Value) -> Result<Self, String> {
        match body.get("shard_key") {
            None | Some(Value::Null) => Ok(KeySelector::Unset),
            Some(Value::Array(list)) if list.is_empty() => {
                Err("shard_key: an empty list names no shard".into())
            }
            Some(Value::Array(list)) => Ok(KeySelector::Keys(
                list.iter()
                    .map(ShardKey::from_json)
                    .collect::<Result<_, _>>()
                    .map_err(|e| format!("shard_key: {e}"))?,
            )),
            Some(Value::Object(o)) => {
                let key = |field: &str| {
                    o.get(field)
                        .ok_or_else(|| format!("shard_key: {field} is missing"))
                        .and_then(|v| {
                            ShardKey::from_json(v).map_err(|e| format!("shard_key.{field}: {e}"))
                        })
                };
                Ok(KeySelector::WithFallback {
                    target: key("target")?,
                    fallback: key("fallback")?,
                })
            }
            Some(v) => Ok(KeySelector::Keys(vec![
                ShardKey::from_json(v).map_err(|e| format!("shard_key: {e}"))?
            ])),
        }
    }
}

/// Why a request reaches no shard.
#[derive(Debug, PartialEq)]
pub enum RouteError {
    /// The request is wrong whatever the cluster holds (a key on an `auto` collection, a
    /// write without a key on a `custom` one).
    Invalid(String),
    /// A key it names does not exist.
    UnknownKey(String),
}

impl fmt::Display for RouteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RouteError::Invalid(m) | RouteError::UnknownKey(m) => f.write_str(m),
        }
    }
}

/// The shard of `id` among a group of shards (all of an `auto` collection, or one key's).
pub fn shard_in(group: &[u32], id: PointId) -> u32 {
    group[shard_of(id, group.len() as u32) as usize]
}

impl CollectionMap {
    /// The shards that exist: not retired with their key.
    pub fn active_shards(&self) -> Vec<u32> {
        (0..self.shards.len() as u32)
            .filter(|&s| !self.shards[s as usize].retired)
            .collect()
    }

    /// The keys of a collection sharded by key, in the order they were made.
    pub fn keys(&self) -> Vec<ShardKey> {
        let mut out: Vec<ShardKey> = Vec::new();
        for s in self.shards.iter().filter(|s| !s.retired) {
            if let Some(k) = &s.key {
                if !out.contains(k) {
                    out.push(k.clone());
                }
            }
        }
        out
    }

    /// The shards of one key (empty when it does not exist).
    pub fn shards_of_key(&self, key: &ShardKey) -> Vec<u32> {
        (0..self.shards.len() as u32)
            .filter(|&s| {
                let m = &self.shards[s as usize];
                !m.retired && m.key.as_ref() == Some(key)
            })
            .collect()
    }

    /// The groups of shards a request reaches, each a group point ids hash within: one group
    /// of every shard for `auto`; one per named key for `custom` (every key for a read that
    /// names none).
    pub fn groups(&self, selector: &KeySelector, write: bool) -> Result<Vec<Vec<u32>>, RouteError> {
        use crate::keys::ShardingMethod::{Auto, Custom};
        match (self.sharding_method, selector) {
            (Auto, KeySelector::Unset) => Ok(vec![self.active_shards()]),
            (Auto, _) => Err(RouteError::Invalid(
                "shard_key names shards of a collection sharded by key; this one is sharded by point id (sharding_method auto)".into(),
            )),
            (Custom, KeySelector::Unset) if write => Err(RouteError::Invalid(
                "shard key not specified: this collection is sharded by key (sharding_method custom), so a write names its shard_key".into(),
            )),
            (Custom, KeySelector::Unset) => Ok(self
                .keys()
                .iter()
                .map(|k| self.shards_of_key(k))
                .collect()),
            (Custom, KeySelector::Keys(keys)) => {
                let mut out = Vec::with_capacity(keys.len());
                for (i, k) in keys.iter().enumerate() {
                    if keys[..i].contains(k) {
                        continue;
                    }
                    let group = self.shards_of_key(k);
                    if group.is_empty() {
                        return Err(RouteError::UnknownKey(format!("shard key {k} not found")));
                    }
                    out.push(group);
                }
                Ok(out)
            }
            (Custom, KeySelector::WithFallback { target, fallback }) => {
                for k in [target, fallback] {
                    let group = self.shards_of_key(k);
                    if !group.is_empty() {
                        return Ok(vec![group]);
                    }
                }
                Err(RouteError::UnknownKey(format!(
                    "neither shard key {target} nor its fallback {fallback} exists"
                )))
            }
        }
    }

    /// Every shard a request reaches, in shard order.
    pub fn shards_reached(&self, selector: &KeySelector) -> Result<Vec<u32>, RouteError> {
        let mut all: Vec<u32> = self.groups(selector, false)?.concat();
        all.sort_unstable();
        all.dedup();
        Ok(all)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::map::ShardMap;
    use serde_json::json;

    fn shard(key: Option<ShardKey>, retired: bool) -> ShardMap {
        ShardMap {
            replicas: vec!["a".into()],
            moves: Vec::new(),
            key,
            retired,
            changes_before: 0,
        }
    }

    fn map(method: ShardingMethod, shards: Vec<ShardMap>) -> CollectionMap {
        CollectionMap {
            uid: 1,
            config: Value::Null,
            shard_number: 1,
            replication_factor: 1,
            write_consistency_factor: 1,
            sharding_method: method,
            changes: Vec::new(),
            strict_mode: None,
            shards,
        }
    }

    fn sel(v: Value) -> KeySelector {
        KeySelector::of(&json!({ "shard_key": v })).unwrap()
    }

    #[test]
    fn selectors_read_every_shape_qdrant_sends() {
        assert_eq!(KeySelector::of(&json!({})).unwrap(), KeySelector::Unset);
        assert_eq!(
            sel(json!("eu")),
            KeySelector::Keys(vec![ShardKey::Name("eu".into())])
        );
        assert_eq!(
            sel(json!([7, "x"])),
            KeySelector::Keys(vec![ShardKey::Number(7), ShardKey::Name("x".into())])
        );
        assert_eq!(
            sel(json!({"target": "t", "fallback": 1})),
            KeySelector::WithFallback {
                target: ShardKey::Name("t".into()),
                fallback: ShardKey::Number(1)
            }
        );
        for bad in [
            json!(-1),
            json!(1.5),
            json!([]),
            json!({"target": "t"}),
            json!(true),
        ] {
            assert!(
                KeySelector::of(&json!({ "shard_key": bad })).is_err(),
                "{bad}"
            );
        }
        // A key survives the map's JSON as the kind it was.
        let k: ShardKey = serde_json::from_value(json!(100)).unwrap();
        assert_eq!(k, ShardKey::Number(100));
        assert_eq!(k.to_json(), json!(100));
    }

    #[test]
    fn keys_route_to_their_own_shards_and_retired_ones_to_none() {
        let eu = ShardKey::Name("eu".into());
        let us = ShardKey::Number(2);
        let m = map(
            ShardingMethod::Custom,
            vec![
                shard(Some(eu.clone()), false),
                shard(Some(eu.clone()), false),
                shard(Some(ShardKey::Name("gone".into())), true),
                shard(Some(us.clone()), false),
            ],
        );
        assert_eq!(m.keys(), vec![eu.clone(), us.clone()]);
        assert_eq!(m.groups(&sel(json!("eu")), true).unwrap(), vec![vec![0, 1]]);
        assert_eq!(
            m.groups(&sel(json!(["eu", 2, "eu"])), true).unwrap(),
            vec![vec![0, 1], vec![3]]
        );
        assert!(matches!(
            m.groups(&sel(json!("gone")), false),
            Err(RouteError::UnknownKey(_))
        ));
        assert!(matches!(
            m.groups(&KeySelector::Unset, true),
            Err(RouteError::Invalid(_))
        ));
        assert_eq!(
            m.shards_reached(&KeySelector::Unset).unwrap(),
            vec![0, 1, 3]
        );
        assert_eq!(
            m.groups(&sel(json!({"target": "new", "fallback": "eu"})), true)
                .unwrap(),
            vec![vec![0, 1]]
        );
        // Ids spread over a key's shards only.
        for id in 0..50 {
            assert!([0, 1].contains(&shard_in(&[0, 1], PointId::Num(id))));
        }
        let auto = map(
            ShardingMethod::Auto,
            vec![shard(None, false), shard(None, false)],
        );
        assert_eq!(
            auto.groups(&KeySelector::Unset, true).unwrap(),
            vec![vec![0, 1]]
        );
        assert!(matches!(
            auto.groups(&sel(json!("eu")), false),
            Err(RouteError::Invalid(_))
        ));
    }
}
