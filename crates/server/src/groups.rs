//! `points/query/groups` and `points/search/groups`: a query's results grouped by a payload
//! value (Qdrant's `group_by`), at most `group_size` hits per group and `limit` groups, each
//! group optionally with the point of the same id from another collection (`with_lookup`).

use std::time::Instant;

use axum::body::Bytes;
use axum::extract::{Path, State};
use diskvec_db::{Hit, PointId};
use serde::Serialize;
use serde_json::Value;

use crate::convert::{
    hit, opt_positive, parse_body, payload_selector, record, with_vector, PayloadSelector,
    PointOut, ScoredPoint, VectorSelector,
};
use crate::envelope::{ok, ApiError, ApiResult};
use crate::points::collection;
use crate::{blocking, AppState};

type Result<T> = std::result::Result<T, ApiError>;

/// Hits a group holds without a `group_size`.
pub(crate) const DEFAULT_GROUP_SIZE: usize = 3;

#[derive(Serialize)]
struct Group {
    id: Value,
    hits: Vec<ScoredPoint>,
    #[serde(skip_serializing_if = "Option::is_none")]
    lookup: Option<PointOut>,
}

#[derive(Serialize)]
struct Groups {
    groups: Vec<Group>,
}

/// Where the lookup points come from, and what of them is shown.
struct Lookup {
    collection: String,
    payload: PayloadSelector,
    vectors: VectorSelector,
}

fn lookup(body: &Value) -> Result<Option<Lookup>> {
    match body.get("with_lookup") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(name)) => Ok(Some(Lookup {
            collection: name.clone(),
            payload: PayloadSelector::All,
            vectors: VectorSelector::None,
        })),
        Some(o @ Value::Object(_)) => Ok(Some(Lookup {
            collection: o
                .get("collection")
                .and_then(Value::as_str)
                .ok_or_else(|| ApiError::bad_request("with_lookup.collection is missing"))?
                .to_string(),
            payload: payload_selector(o.get("with_payload"), true)?,
            vectors: with_vector(o.get("with_vectors").or_else(|| o.get("with_vector")))?,
        })),
        Some(_) => Err(ApiError::bad_request(
            "with_lookup must be a collection name or {collection, with_payload, with_vectors}",
        )),
    }
}

/// The group keys a payload has at `key` (`a.b`, `a[]`): strings and integers, each
/// element of an array once.
fn group_keys(payload: &diskvec_db::Payload, key: &str) -> Vec<Value> {
    let mut current: Vec<&Value> = Vec::new();
    let mut steps = key.split('.');
    let Some(first) = steps.next() else {
        return Vec::new();
    };
    let name = first.trim_end_matches("[]");
    if let Some(v) = payload.get(name) {
        current.push(v);
    }
    for step in steps {
        let name = step.trim_end_matches("[]");
        current = current
            .into_iter()
            .flat_map(|v| match v {
                Value::Array(items) => items.iter().collect(),
                v => vec![v],
            })
            .filter_map(|v| v.get(name))
            .collect();
    }
    let mut keys: Vec<Value> = Vec::new();
    for v in current {
        let items: Vec<&Value> = match v {
            Value::Array(items) => items.iter().collect(),
            v => vec![v],
        };
        for item in items {
            let usable = item.is_string() || item.as_i64().is_some() || item.as_u64().is_some();
            if usable && !keys.contains(item) {
                keys.push(item.clone());
            }
        }
    }
    keys
}

/// Fills up to `limit` groups of up to `size` hits from `hits`, best first: a hit joins each
/// of its groups that has room; a group is opened while fewer than `limit` are. A hit's
/// payload is `payload_of` it (a cluster's router groups JSON hits the same way).
pub(crate) fn group<H: Clone>(
    hits: Vec<H>,
    payload_of: impl Fn(&H) -> Option<&diskvec_db::Payload>,
    key: &str,
    limit: usize,
    size: usize,
) -> Vec<(Value, Vec<H>)> {
    let mut groups: Vec<(Value, Vec<H>)> = Vec::new();
    for h in hits {
        let Some(payload) = payload_of(&h) else {
            continue;
        };
        for k in group_keys(payload, key) {
            match groups.iter().position(|(id, _)| *id == k) {
                Some(at) if groups[at].1.len() < size => groups[at].1.push(h.clone()),
                Some(_) => {}
                None if groups.len() < limit => groups.push((k, vec![h.clone()])),
                None => {}
            }
        }
        if groups.len() == limit && groups.iter().all(|(_, m)| m.len() >= size) {
            break;
        }
    }
    groups
}

/// A group id as a point id of the lookup collection, if it can be one.
fn as_point_id(v: &Value) -> Option<PointId> {
    PointId::from_json(v).ok()
}

/// Runs `find` (a query or a search, for as many hits as grouping may use), groups them and
/// looks the groups up.
async fn answer(
    s: AppState,
    name: String,
    body: Value,
    find: fn(&diskvec_db::Collection, &diskvec_db::Database, &Value, bool) -> Result<Vec<Hit>>,
) -> ApiResult {
    let t = Instant::now();
    let col = collection(&s, &name)?;
    crate::strict::read(&*col, &body)?;
    let key = body
        .get("group_by")
        .and_then(Value::as_str)
        .ok_or_else(|| ApiError::bad_request("group_by must be a payload key"))?
        .to_string();
    let limit = opt_positive(body.get("limit"), "limit")?.unwrap_or(10);
    let size = opt_positive(body.get("group_size"), "group_size")?.unwrap_or(DEFAULT_GROUP_SIZE);
    let payload = payload_selector(body.get("with_payload"), false)?;
    let vectors = with_vector(body.get("with_vector").or_else(|| body.get("with_vectors")))?;
    let lookup = lookup(&body)?;
    let lookup_col =
        match &lookup {
            Some(l) => Some(s.db.collection(&l.collection).map_err(|_| {
                ApiError::not_found(format!("Collection {} not found", l.collection))
            })?),
            None => None,
        };
    let with_vectors = vectors.wanted();
    let db = std::sync::Arc::clone(&s.db);
    let groups = blocking(move || {
        let hits = find(&col, &db, &body, with_vectors)?;
        let groups = group(hits, |h| h.payload.as_ref(), &key, limit, size);
        let mut out = Vec::with_capacity(groups.len());
        for (id, members) in groups {
            let looked_up = match (&lookup, &lookup_col, as_point_id(&id)) {
                (Some(l), Some(c), Some(point)) => c
                    .get(&[point], l.payload.wanted(), l.vectors.wanted())?
                    .pop()
                    .map(|r| record(r, &l.payload, &l.vectors)),
                _ => None,
            };
            out.push(Group {
                id,
                hits: members
                    .into_iter()
                    .map(|h| hit(h, &payload, &vectors))
                    .collect(),
                lookup: looked_up,
            });
        }
        Ok(out)
    })
    .await?;
    Ok(ok(Groups { groups }, t))
}

/// The most hits a grouped request considers.
pub(crate) fn candidates() -> usize {
    diskvec_db::MAX_RESULTS
}

pub async fn query_groups(
    State(s): State<AppState>,
    Path(name): Path<String>,
    body: Bytes,
) -> ApiResult {
    let body = parse_body(&body)?;
    answer(s, name, body, |col, db, body, with_vectors| {
        let mut req = crate::query::parse_node(body, db)?;
        req.limit = candidates();
        req.offset = 0;
        Ok(col.query(&req, true, with_vectors)?)
    })
    .await
}

pub async fn search_groups(
    State(s): State<AppState>,
    Path(name): Path<String>,
    body: Bytes,
) -> ApiResult {
    let body = parse_body(&body)?;
    answer(s, name, body, |col, _, body, with_vectors| {
        let mut parsed = crate::points::parse_search(body, "vector")?;
        parsed.req.k = candidates();
        parsed.req.offset = 0;
        parsed.req.with_payload = true;
        parsed.req.with_vector = with_vectors;
        crate::points::run_search(col, parsed)
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn group_keys_are_strings_and_integers_each_once() {
        let p = |v: Value| v.as_object().unwrap().clone();
        let keys = |v: Value, k: &str| group_keys(&p(v), k);
        assert_eq!(keys(json!({"a": "x"}), "a"), vec![json!("x")]);
        assert_eq!(keys(json!({"a": [1, 2, 2]}), "a"), vec![json!(1), json!(2)]);
        assert_eq!(keys(json!({"a": [1, 2]}), "a[]"), vec![json!(1), json!(2)]);
        assert!(keys(json!({"a": 2.5}), "a").is_empty());
        assert!(keys(json!({"a": [["x"]]}), "a").is_empty());
        assert!(keys(json!({"a": {"o": 1}}), "a").is_empty());
        assert_eq!(
            keys(json!({"a": [{"b": "y"}, {"b": "z"}]}), "a[].b"),
            vec![json!("y"), json!("z")]
        );
    }
}
