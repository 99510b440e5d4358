//! `POST /collections/{name}/facet`: value counts over the points a filter matches.

mod common;

use common::Api;
use diskvec_server::Keys;
use serde_json::json;

#[tokio::test]
async fn facets_count_each_point_once_per_value_most_frequent_first() {
    let api = Api::new(Keys::default());
    api.create_dot4("c").await;
    let payloads = [
        json!({"city": "Berlin", "n": 1, "ok": true}),
        json!({"city": ["Berlin", "Berlin", "Rome"], "n": 1, "ok": true}),
        json!({"city": "Rome", "n": 2, "ok": false}),
        json!({"city": "Oslo", "n": 2.5}),
        json!({}),
    ];
    let points: Vec<_> = payloads
        .iter()
        .enumerate()
        .map(|(i, p)| json!({"id": i, "vector": [1, 0, 0, 0], "payload": p}))
        .collect();
    api.put_points("c", json!(points)).await;
    let hits = api
        .ok("POST", "/collections/c/facet", json!({"key": "city"}))
        .await;
    assert_eq!(
        hits["hits"],
        json!([
            {"value": "Berlin", "count": 2},
            {"value": "Rome", "count": 2},
            {"value": "Oslo", "count": 1}
        ])
    );
    // Floats are not faceted; a filter narrows the points; a limit cuts the list.
    let hits = api
        .ok("POST", "/collections/c/facet", json!({"key": "n"}))
        .await;
    assert_eq!(
        hits["hits"],
        json!([{"value": 1, "count": 2}, {"value": 2, "count": 1}])
    );
    let body = json!({"key": "ok", "limit": 1,
        "filter": {"must": [{"key": "city", "match": {"value": "Rome"}}]}});
    let hits = api.ok("POST", "/collections/c/facet", body).await;
    assert_eq!(hits["hits"], json!([{"value": false, "count": 1}]));
}
