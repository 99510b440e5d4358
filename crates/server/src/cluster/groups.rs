//! Groups (`/points/query/groups`, `/points/search/groups`) and facets (`/facet`) on a
//! collection of several shards.
//!
//! Groups: every shard answers the request for twice its `limit` groups; the collection's
//! groups are the `limit` whose best hit is best over all shards (a group's best hit is in
//! some shard's answer: the groups that shard ranks above it rank above it overall too). A
//! shard that answered a full page of other groups may still hold hits of a chosen group,
//! so it is asked again for those groups only; each group keeps its `group_size` best hits
//! over the shards.
//!
//! Facets: every shard counts up to `FACET_PER_SHARD` values (ten times as many again while
//! a shard's answer is full, up to `FACET_MOST_PER_SHARD`), summed per value. The counts are
//! exact whenever no shard has more distinct values than that.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::response::Response;
use diskvec_cluster::CollectionMap;
use diskvec_db::FacetValue;
use serde_json::{json, Value};

use super::lookups::{self, attach, lookup_spec, LookupSpec};
use super::merge::{id_order, merge_scored};
use super::queries::{step_of, with_examples, Step};
use super::reads::{self, higher_first, reached, usize_field};
use super::{ClusterState, Routed};
use crate::convert::payload_selector;
use crate::envelope::{ok, ApiError};

/// Values each shard counts for a facet on a collection of several shards, first.
const FACET_PER_SHARD: usize = 10_000;
/// And at most, when a shard has more distinct values.
const FACET_MOST_PER_SHARD: usize = 1_000_000;

/// Each shard is asked for this many times the groups the request wants.
const GROUPS_PER_SHARD_FACTOR: usize = 2;

/// A group as the shards answered it: its id and hits, best first.
struct Group {
    id: Value,
    hits: Vec<Vec<Value>>,
}

/// The groups of one shard's answer.
fn groups_in(answer: &Value) -> Vec<(Value, Vec<Value>)> {
    answer["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|g| {
            (
                g["id"].clone(),
                g["hits"].as_array().cloned().unwrap_or_default(),
            )
        })
        .collect()
}

/// A group's best hit over the shards' lists (each best first): the first of their merge.
fn best_hit(hits: &[Vec<Value>], higher_first: bool) -> Value {
    merge_scored(hits.to_vec(), 0, 1, Some(higher_first))
        .pop()
        .unwrap_or(Value::Null)
}

/// `/points/query/groups`, `/points/search/groups`.
pub async fn groups(
    c: &Arc<ClusterState>,
    map: &CollectionMap,
    mut r: Routed,
) -> Result<Response, ApiError> {
    let (shards, _) = reached(map, &r.json()?)?;
    if shards.len() < 2 {
        return lookups::groups(c, map, r).await;
    }
    lookups::inline(c, &mut r).await?;
    let (_, mut body) = reached(map, &r.json()?)?;
    let Some(b) = body.as_object_mut() else {
        return Err(ApiError::bad_request("expected a JSON object"));
    };
    let spec = lookup_spec(&b.remove("with_lookup").unwrap_or(Value::Null))?;
    let is_query = r.tail.starts_with("/points/query");
    let key = body
        .get("group_by")
        .and_then(Value::as_str)
        .ok_or_else(|| ApiError::bad_request("group_by must be a payload key"))?
        .to_string();
    let limit = usize_field(&body, "limit", 10)?;
    let size = usize_field(&body, "group_size", crate::groups::DEFAULT_GROUP_SIZE)?;
    let order = if is_query {
        with_examples(c, &r, &mut body).await?;
        match step_of(map, &body)? {
            Step::Scored(order) => order.unwrap_or(true),
            _ => {
                let groups = of_ranked(c, map, &r, &shards, &body, &key, limit, size).await?;
                return looked_up(c, spec, groups, &r).await;
            }
        }
    } else {
        higher_first(map, &body, false).unwrap_or(true)
    };
    // Twice the groups from each shard: the chosen ones are then more often among a shard's
    // page (grouping more costs little beside the search), so fewer shards are asked again.
    let per_shard_limit = limit.saturating_mul(GROUPS_PER_SHARD_FACTOR);
    let mut first = body.clone();
    first["limit"] = json!(per_shard_limit);
    let per_shard = c
        .each_shard(map, &r, &shards, &r.tail, &first, groups_in)
        .await?;
    let mut all: Vec<Group> = Vec::new();
    for answer in &per_shard {
        for (id, hits) in answer {
            match all.iter_mut().find(|g| g.id == *id) {
                Some(g) => g.hits.push(hits.clone()),
                None => all.push(Group {
                    id: id.clone(),
                    hits: vec![hits.clone()],
                }),
            }
        }
    }
    // Best group first, by its best hit (as one node opens groups along its hits: equal
    // scores by point id).
    let best: Vec<Value> = all.iter().map(|g| best_hit(&g.hits, order)).collect();
    let mut ranked: Vec<usize> = (0..all.len()).collect();
    ranked.sort_by(|&a, &b| {
        let score = |i: usize| best[i]["score"].as_f64().unwrap_or(f64::NAN);
        let by = score(a).total_cmp(&score(b));
        if order { by.reverse() } else { by }
            .then_with(|| id_order(&best[a]["id"], &best[b]["id"]))
            .then(a.cmp(&b))
    });
    ranked.truncate(limit);
    let mut chosen: Vec<Group> = Vec::with_capacity(ranked.len());
    let mut slots: Vec<Option<Group>> = all.into_iter().map(Some).collect();
    for i in ranked {
        if let Some(g) = slots[i].take() {
            chosen.push(g);
        }
    }
    // A shard that filled its page may hold hits of chosen groups it did not name: those
    // shards are asked again, side by side, for those groups only.
    let mut asks = Vec::new();
    for (s, answer) in per_shard.iter().enumerate() {
        if answer.len() < per_shard_limit {
            continue;
        }
        let missing: Vec<Value> = chosen
            .iter()
            .filter(|g| !answer.iter().any(|(id, _)| *id == g.id))
            .map(|g| g.id.clone())
            .collect();
        if missing.is_empty() {
            continue;
        }
        let mut again = body.clone();
        // `any` takes strings or integers, not both: one condition of each kind.
        let (words, numbers): (Vec<Value>, Vec<Value>) =
            missing.iter().cloned().partition(Value::is_string);
        let kinds: Vec<Value> = [words, numbers]
            .into_iter()
            .filter(|list| !list.is_empty())
            .map(|list| json!({ "key": key, "match": { "any": list } }))
            .collect();
        let only = json!({ "should": kinds });
        again["filter"] = reads::filter_and(&body, only);
        again["limit"] = json!(missing.len());
        let read = r.shard_read(Bytes::from(again.to_string()));
        let (shard, name) = (shards[s], r.name.as_str());
        asks.push(async move { c.read_shard(name, map, shard, &read).await });
    }
    for a in futures_util::future::join_all(asks).await {
        let a = a?;
        if !a.status.is_success() {
            return Err(a.error());
        }
        for (id, hits) in groups_in(a.result()) {
            if let Some(g) = chosen.iter_mut().find(|g| g.id == id) {
                g.hits.push(hits);
            }
        }
    }
    let groups: Vec<Value> = chosen
        .into_iter()
        .map(|g| json!({ "id": g.id, "hits": merge_scored(g.hits, 0, size, Some(order)) }))
        .collect();
    looked_up(c, spec, groups, &r).await
}

/// The answer of groups, each with its lookup point when asked.
async fn looked_up(
    c: &Arc<ClusterState>,
    spec: Option<LookupSpec>,
    groups: Vec<Value>,
    r: &Routed,
) -> Result<Response, ApiError> {
    let groups = match spec {
        Some(spec) => attach(c, spec, groups).await?,
        None => groups,
    };
    Ok(ok(json!({ "groups": groups }), r.started))
}

/// Groups of a query only the router can rank over the whole collection (a fusion, an
/// order_by, an mmr, a sample, a listing): its hits, as many as one node groups, ranked
/// here, then grouped as one node groups them, showing of each hit what the request asks.
#[allow(clippy::too_many_arguments)]
async fn of_ranked(
    c: &Arc<ClusterState>,
    map: &CollectionMap,
    r: &Routed,
    shards: &[u32],
    body: &Value,
    key: &str,
    limit: usize,
    size: usize,
) -> Result<Vec<Value>, ApiError> {
    super::limits::check_group_key(c, map, &r.name, shards[0], key).await?;
    let shown = payload_selector(body.get("with_payload"), false)?;
    let mut node = body.clone();
    if let Some(n) = node.as_object_mut() {
        for grouping in ["group_by", "group_size"] {
            n.remove(grouping);
        }
    }
    node["limit"] = json!(crate::groups::candidates());
    node["offset"] = json!(0);
    node["with_payload"] = json!(true);
    let hits = super::queries::answer(c, map, r, shards, &node).await?;
    let groups = crate::groups::group(hits, |h| h["payload"].as_object(), key, limit, size);
    Ok(groups
        .into_iter()
        .map(|(id, mut hits)| {
            for h in &mut hits {
                let payload = h["payload"].as_object().cloned();
                h["payload"] = shown.apply(payload).map_or(Value::Null, Value::Object);
            }
            json!({ "id": id, "hits": hits })
        })
        .collect())
}

/// `/facet`.
pub async fn facet(
    c: &Arc<ClusterState>,
    map: &CollectionMap,
    r: Routed,
) -> Result<Response, ApiError> {
    let (shards, mut body) = reached(map, &r.json()?)?;
    if shards.len() < 2 {
        return reads::forward_whole(c, map, r).await;
    }
    if !body.is_object() {
        return Err(ApiError::bad_request("expected a JSON object"));
    }
    let limit = usize_field(&body, "limit", 10)?;
    // A shard that answered as many values as asked may hold more: all are asked again for
    // ten times as many, up to FACET_MOST_PER_SHARD.
    let mut per_shard = FACET_PER_SHARD.max(limit);
    let answers = loop {
        body["limit"] = json!(per_shard);
        let hits_of = |a: &Value| a["hits"].as_array().cloned().unwrap_or_default();
        let answers = c
            .each_shard(map, &r, &shards, &r.tail, &body, hits_of)
            .await?;
        let full = answers.iter().any(|hits| hits.len() >= per_shard);
        if !full || per_shard >= FACET_MOST_PER_SHARD {
            break answers;
        }
        per_shard = (per_shard * 10).min(FACET_MOST_PER_SHARD);
    };
    let mut counts: HashMap<FacetValue, u64> = HashMap::new();
    for hits in &answers {
        for hit in hits {
            if let Some(v) = FacetValue::of(&hit["value"]) {
                *counts.entry(v).or_insert(0) += hit["count"].as_u64().unwrap_or(0);
            }
        }
    }
    // Most frequent first, ties by value, as one node orders them.
    let mut hits: Vec<(FacetValue, u64)> = counts.into_iter().collect();
    hits.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    hits.truncate(limit);
    let hits: Vec<Value> = hits
        .into_iter()
        .map(|(value, count)| json!({ "value": value.to_json(), "count": count }))
        .collect();
    Ok(ok(json!({ "hits": hits }), r.started))
}
