//! Strict mode on a cluster collection, checked once by the node that receives a request:
//! the limits a request can be judged by alone (`StrictMode::request_limits`) and the read
//! and write rates, before a write is logged or a read is fanned out. The reads the router
//! then makes of each shard on the request's behalf (a facet's long lists, a second ask for
//! groups, examples retrieved by id) are its own and are not judged again; a replica checks
//! only what its data judges (`StrictMode::data_limits`: unindexed fields, the collection's
//! size), and every replica judges a logged write the same way at the same point of its log.
//!
//! Rates are per node, as a node protects itself: clients spread over several nodes get the
//! rate of each.

use std::sync::Arc;

use axum::body::Bytes;
use axum::http::Method;
use diskvec_cluster::CollectionMap;
use diskvec_db::query::formula::Formula;
use diskvec_db::{Filter, Rate, StrictMode};
use serde_json::Value;

use super::calls::ShardRead;
use super::split::operation_at;
use super::{ClusterState, Routed};
use crate::envelope::ApiError;
use crate::strict::{self, Limits};
use crate::writes::{self, Write};

/// The collection's strict mode as its map holds it.
pub(super) fn strict_mode_of(map: &CollectionMap) -> StrictMode {
    let Some(kept) = map
        .strict_mode
        .as_ref()
        .or_else(|| map.config.get("strict_mode_config"))
        .filter(|v| !v.is_null())
    else {
        return StrictMode::default();
    };
    serde_json::from_value(kept.clone()).unwrap_or_else(|e| {
        // A limit this node does not know (a newer node set it): the rest still hold.
        log::warn!(
            "cluster: the collection's strict mode does not parse ({e}); checking what does"
        );
        lenient(kept)
    })
}

/// The limits of a strict mode this node reads, those it does not know left out.
fn lenient(kept: &Value) -> StrictMode {
    let mut parsed = StrictMode::default();
    for (field, value) in kept.as_object().into_iter().flatten() {
        if let Ok(one) = serde_json::from_value(serde_json::json!({ field: value })) {
            parsed.merge(one);
        }
    }
    parsed
}

/// The change of strict mode a change of the collection's settings makes (`PATCH` with
/// `strict_mode_config`), refused here if the limits it leaves make no sense.
pub(super) fn change_of(map: &CollectionMap, body: &Value) -> Result<Option<StrictMode>, ApiError> {
    let Some(change) = body.get("strict_mode_config").filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let change: StrictMode = serde_json::from_value(change.clone())
        .map_err(|e| ApiError::bad_request(format!("strict_mode_config: {e}")))?;
    let mut merged = strict_mode_of(map);
    merged.merge(change.clone());
    merged.check()?;
    Ok(Some(change))
}

/// Records a change of strict mode in the map, merged as each replica merges it.
pub(super) fn record(map: &mut CollectionMap, change: &StrictMode) {
    let mut merged = strict_mode_of(map);
    merged.merge(change.clone());
    map.strict_mode = Some(serde_json::to_value(merged).expect("strict mode serializes"));
}

/// Changes the strict mode the collection's map holds (`set` edits the map), and waits until
/// this node's view has it, so the next request it routes is checked by it.
pub(super) async fn keep_in_map(
    c: &ClusterState,
    name: &str,
    uid: u64,
    set: impl Fn(&mut CollectionMap),
) -> Result<(), ApiError> {
    let stored = super::collections::update_map(c, name, uid, |m| {
        set(m);
        Ok(())
    })
    .await?;
    super::collections::until_seen(c, name, |m| m.strict_mode == stored.strict_mode).await;
    Ok(())
}

/// A cluster collection as the router sees it: the limits its requests can be judged by, and
/// this node's rates for it.
struct Routing<'a> {
    strict: Option<StrictMode>,
    uid: u64,
    cluster: &'a ClusterState,
}

impl Limits for Routing<'_> {
    fn strict_mode(&self) -> Option<StrictMode> {
        self.strict.clone()
    }

    fn charge(&self, rate: Rate, cost: usize) -> diskvec_db::Result<()> {
        let Some(strict) = &self.strict else {
            return Ok(());
        };
        let mut rates = self.cluster.rates.lock().unwrap_or_else(|e| e.into_inner());
        if !rates.contains_key(&self.uid) {
            // Forget the rates of collections dropped since.
            let view = self.cluster.node.view();
            rates.retain(|uid, _| view.collections.values().any(|(m, _)| m.uid == *uid));
        }
        rates
            .entry(self.uid)
            .or_default()
            .charge(strict, rate, cost)
    }

    /// Only the filter's size: which fields are indexed is the replicas' to judge.
    fn check_filter(&self, filter: Option<&Filter>, write: bool) -> diskvec_db::Result<()> {
        match (&self.strict, filter) {
            (Some(strict), Some(f)) => strict.check_filter(f, write, &[]),
            _ => Ok(()),
        }
    }

    fn check_formula(&self, formula: &Formula) -> diskvec_db::Result<()> {
        let (_, conditions) = formula.uses();
        conditions
            .into_iter()
            .try_for_each(|c| self.check_filter(Some(c), false))
    }

    fn check_group_by(&self, _key: &str) -> diskvec_db::Result<()> {
        Ok(())
    }
}

/// Reads whose body strict mode judges as one request each (`strict::read`).
const READS: &[&str] = &[
    "/points/scroll",
    "/points/count",
    "/points/search",
    "/points/query",
    "/points/query/groups",
    "/points/search/groups",
    "/facet",
    "/points/search/matrix/pairs",
    "/points/search/matrix/offsets",
];

/// Checks a request on a cluster collection against its strict mode and spends this node's
/// rate, as one node checks a request on its collection.
pub(super) fn check(c: &ClusterState, map: &CollectionMap, r: &Routed) -> Result<(), ApiError> {
    let mode = strict_mode_of(map);
    if !mode.is_enabled() {
        return Ok(());
    }
    let routing = Routing {
        strict: Some(mode.request_limits()),
        uid: map.uid,
        cluster: c,
    };
    if let Some(seconds) =
        crate::query_param(r.query.as_deref(), "timeout").and_then(|t| t.parse::<u64>().ok())
    {
        strict::timeout(&routing, seconds)?;
    }
    let (method, tail) = (r.method.as_str(), r.tail.as_str());
    if method != "POST" && method != "PUT" {
        return Ok(());
    }
    let body = r.json()?;
    match tail {
        "/points" if method == "POST" => {
            let ids = body
                .get("ids")
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            strict::retrieve(&routing, ids)
        }
        "/points/search/batch" | "/points/query/batch" => {
            let searches = body.get("searches").and_then(Value::as_array);
            strict::batch(&routing, searches.map_or(0, Vec::len))?;
            searches
                .into_iter()
                .flatten()
                .try_for_each(|b| strict::read(&routing, b))
        }
        "/points/batch" => {
            for op in body["operations"].as_array().into_iter().flatten() {
                let named = op.as_object().and_then(|o| o.iter().next());
                if let Some((write, inner)) =
                    named.and_then(|(name, inner)| Some((Write::named(name)?, inner)))
                {
                    writes::check_request(&routing, write, inner)?;
                }
            }
            Ok(())
        }
        t if READS.contains(&t) && method == "POST" => strict::read(&routing, &body),
        _ => match write_at(method, tail) {
            Some(write) => writes::check_request(&routing, write, &body),
            None => Ok(()),
        },
    }
}

/// The kind of point write a route is.
fn write_at(method: &str, tail: &str) -> Option<Write> {
    operation_at(method, tail).and_then(Write::named)
}

/// Where strict mode allows no unindexed field, that the group key of a request grouped on
/// the router (not by a replica, which checks it itself) has an index that matches values,
/// as the payload schema of one replica of `shard` describes its indexes.
pub(super) async fn check_group_key(
    c: &Arc<ClusterState>,
    map: &CollectionMap,
    name: &str,
    shard: u32,
    key: &str,
) -> Result<(), ApiError> {
    let strict = strict_mode_of(map);
    if !strict.is_enabled() || strict.unindexed_filtering_retrieve != Some(false) {
        return Ok(());
    }
    let read = ShardRead {
        method: Method::GET,
        tail: String::new(),
        body: Bytes::new(),
        fresh: false,
    };
    let info = c.read_all_shards(name, map, &[shard], read).await?;
    let indexes: Vec<(String, String)> = info
        .first()
        .and_then(|a| a.result()["payload_schema"].as_object().cloned())
        .unwrap_or_default()
        .into_iter()
        .map(|(field, schema)| {
            let kind = schema["data_type"].as_str().unwrap_or_default().to_string();
            (field, kind)
        })
        .collect();
    Ok(strict.check_group_by(key, &indexes)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map_with(strict: Value) -> CollectionMap {
        CollectionMap {
            uid: 1,
            config: json!({"vectors": {"size": 4, "distance": "Cosine"}}),
            shard_number: 1,
            replication_factor: 1,
            write_consistency_factor: 1,
            sharding_method: Default::default(),
            changes: vec![],
            strict_mode: Some(strict),
            shards: vec![],
        }
    }

    #[test]
    fn a_limit_this_node_does_not_know_leaves_the_others_in_force() {
        let map =
            map_with(json!({"enabled": true, "max_query_limit": 5, "limit_of_the_future": 1}));
        let strict = strict_mode_of(&map);
        assert!(strict.is_enabled());
        assert_eq!(strict.max_query_limit, Some(5));
        let map = map_with(json!({"enabled": true, "search_max_hnsw_ef": 64}));
        assert_eq!(strict_mode_of(&map).search_max_hnsw_ef, Some(64));
    }

    #[test]
    fn a_patch_merges_into_what_the_map_holds() {
        let mut map = map_with(json!({"enabled": true, "max_query_limit": 5}));
        let change = change_of(&map, &json!({"strict_mode_config": {"read_rate_limit": 9}}))
            .unwrap()
            .unwrap();
        record(&mut map, &change);
        let strict = strict_mode_of(&map);
        assert_eq!(
            (strict.max_query_limit, strict.read_rate_limit),
            (Some(5), Some(9))
        );
        assert!(change_of(&map, &json!({"strict_mode_config": {"max_query_limit": 0}})).is_err());
        assert!(change_of(&map, &json!({"optimizers_config": {}}))
            .unwrap()
            .is_none());
    }
}
