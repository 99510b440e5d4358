//! Reads ordered by a payload key (a scroll's `order_by`, a query's `{"order_by": ...}`) on a
//! collection of several shards. Each shard answers its first page in order, with payloads;
//! the router reads each entry's value from its payload (a point with several values is
//! listed once per value, in order, as on one node), merges the shards' entries by value in
//! the asked direction (ties by id, as one node breaks them), and shows the payloads as the
//! request asked.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::Arc;

use diskvec_cluster::CollectionMap;
use diskvec_db::query::{OrderValue, Query};
use diskvec_db::Payload;
use serde_json::{json, Value};

use super::merge::id_order;
use super::{ClusterState, Routed};
use crate::convert::payload_selector;
use crate::envelope::ApiError;

/// How a read is ordered: its key, direction and where its page starts.
struct Order {
    key: String,
    descending: bool,
    start_from: Option<OrderValue>,
}

fn order_of(order_by: &Value) -> Result<Order, ApiError> {
    match diskvec_db::query::json::order_by(order_by, "order_by")? {
        Query::OrderBy {
            key,
            descending,
            start_from,
        } => Ok(Order {
            key,
            descending,
            start_from,
        }),
        _ => Err(ApiError::bad_request("order_by must name a payload key")),
    }
}

impl Order {
    fn cmp(&self, a: &OrderValue, b: &OrderValue) -> Ordering {
        if self.descending {
            b.cmp(a)
        } else {
            a.cmp(b)
        }
    }

    /// The values of `payload` a page lists the point at, in the page's order.
    fn values(&self, payload: &Payload) -> Result<Vec<OrderValue>, ApiError> {
        let mut values: Vec<OrderValue> = OrderValue::all_at(payload, &self.key)?
            .into_iter()
            .filter(|v| match &self.start_from {
                None => true,
                Some(from) => self.cmp(v, from) != Ordering::Less,
            })
            .collect();
        values.sort_by(|a, b| self.cmp(a, b));
        Ok(values)
    }
}

/// One shard's page as (value, point) entries: a point's k-th entry in the page is at its
/// k-th value.
fn entries(order: &Order, page: Vec<Value>) -> Result<Vec<(OrderValue, Value)>, ApiError> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = Vec::with_capacity(page.len());
    for point in page {
        let payload = point["payload"].as_object().cloned().unwrap_or_default();
        let k = seen.entry(point["id"].to_string()).or_insert(0);
        let Some(value) = order.values(&payload)?.into_iter().nth(*k) else {
            continue;
        };
        *k += 1;
        out.push((value, point));
    }
    Ok(out)
}

/// The first `skip + take` of the shards' pages merged in order, less the first `skip`,
/// payloads shown as `with_payload` (absent: `payload_default`) asks.
fn merged(
    order: &Order,
    pages: Vec<Vec<Value>>,
    skip: usize,
    take: usize,
    with_payload: Option<&Value>,
    payload_default: bool,
) -> Result<Vec<Value>, ApiError> {
    let shown = payload_selector(with_payload, payload_default)?;
    let mut all = Vec::new();
    for page in pages {
        all.extend(entries(order, page)?);
    }
    all.sort_by(|a, b| order.cmp(&a.0, &b.0).then(id_order(&a.1["id"], &b.1["id"])));
    Ok(all
        .into_iter()
        .skip(skip)
        .take(take)
        .map(|(_, mut point)| {
            let payload = point["payload"].as_object().cloned();
            point["payload"] = shown.apply(payload).map_or(Value::Null, Value::Object);
            point
        })
        .collect())
}

/// Each shard's answer to `body` at `tail` with whole payloads, as the list at `list_of`.
async fn pages(
    c: &Arc<ClusterState>,
    map: &CollectionMap,
    r: &Routed,
    shards: &[u32],
    tail: &str,
    mut body: Value,
    list_of: fn(&Value) -> Vec<Value>,
) -> Result<Vec<Vec<Value>>, ApiError> {
    body["with_payload"] = json!(true);
    c.each_shard(map, r, shards, tail, &body, list_of).await
}

/// A scroll with `order_by` over `shards`: its page (ordered scrolls have no next offset;
/// they page by `start_from`).
pub(super) async fn scroll(
    c: &Arc<ClusterState>,
    map: &CollectionMap,
    r: &Routed,
    shards: &[u32],
    body: &Value,
) -> Result<Vec<Value>, ApiError> {
    let order = order_of(&body["order_by"])?;
    if body.get("offset").is_some_and(|o| !o.is_null()) {
        return Err(ApiError::bad_request(
            "offset cannot be used with order_by: page with order_by.start_from",
        ));
    }
    let limit = super::reads::usize_field(body, "limit", 10)?;
    let list = |result: &Value| result["points"].as_array().cloned().unwrap_or_default();
    let pages = pages(c, map, r, shards, "/points/scroll", body.clone(), list).await?;
    merged(&order, pages, 0, limit, body.get("with_payload"), true)
}

/// A query node ordered by a payload key over `shards`: its page.
pub(super) async fn query(
    c: &Arc<ClusterState>,
    map: &CollectionMap,
    r: &Routed,
    shards: &[u32],
    node: &Value,
) -> Result<Vec<Value>, ApiError> {
    let order = order_of(&node["query"]["order_by"])?;
    let (per_shard, offset, limit) = super::reads::per_shard_search(node)?;
    let pages = pages(
        c,
        map,
        r,
        shards,
        "/points/query",
        per_shard,
        super::reads::scored_list,
    )
    .await?;
    merged(
        &order,
        pages,
        offset,
        limit,
        node.get("with_payload"),
        false,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use diskvec_db::PointId;

    fn ids(list: &[Value]) -> Vec<PointId> {
        list.iter()
            .map(|p| PointId::from_json(&p["id"]).unwrap())
            .collect()
    }

    fn point(id: u64, at: Value) -> Value {
        json!({"id": id, "payload": {"at": at, "other": 1}})
    }

    #[test]
    fn pages_merge_by_value_each_point_once_per_value() {
        let order = order_of(&json!({"key": "at", "direction": "desc"})).unwrap();
        // Shard 0 lists point 1 twice (values 9 and 3), shard 1 lists 2 and 4.
        let a = vec![
            point(1, json!([3, 9])),
            point(3, json!(5)),
            point(1, json!([3, 9])),
        ];
        let b = vec![point(2, json!(7)), point(4, json!(5))];
        let page = merged(&order, vec![a, b], 0, 5, Some(&json!(["other"])), true).unwrap();
        let n = |i: u64| PointId::Num(i);
        assert_eq!(ids(&page), [n(1), n(2), n(3), n(4), n(1)]);
        assert_eq!(page[0]["payload"], json!({"other": 1}));
        let from = order_of(&json!({"key": "at", "direction": "asc", "start_from": 5})).unwrap();
        let a = vec![point(3, json!(5)), point(1, json!([3, 9]))];
        let b = vec![point(4, json!(5)), point(2, json!(7))];
        let page = merged(&from, vec![a, b], 1, 2, Some(&json!(false)), true).unwrap();
        assert_eq!(ids(&page), [n(4), n(2)]);
        assert_eq!(page[0]["payload"], Value::Null);
    }
}
