//! `points/batch`: several writes in one request, applied in order, one result each.

mod common;

use axum::http::StatusCode;
use common::Api;
use diskvec_server::Keys;
use serde_json::json;

#[tokio::test]
async fn a_batch_applies_its_operations_in_order() {
    let api = Api::new(Keys::default());
    api.create_dot4("b").await;
    let batch = json!({"operations": [
        {"upsert": {"points": [
            {"id": 1, "vector": [1, 0, 0, 0], "payload": {"a": 1}},
            {"id": 2, "vector": [0, 1, 0, 0], "payload": {"a": 2}},
            {"id": 3, "vector": [0, 0, 1, 0]},
        ]}},
        {"delete": {"points": [3]}},
        {"set_payload": {"points": [1], "payload": {"b": true}}},
        {"overwrite_payload": {"filter": {"must": [{"key": "a", "match": {"value": 2}}]}, "payload": {"c": 3}}},
        {"delete_payload": {"points": [1], "keys": ["a"]}},
        {"upsert": {"batch": {"ids": [4], "vectors": [[0, 0, 0, 1]]}}},
        {"clear_payload": {"points": [4]}},
        {"update_vectors": {"points": [{"id": 4, "vector": [0, 0, 2, 2]}]}},
    ]});
    let results = api
        .ok("POST", "/collections/b/points/batch?wait=true", batch)
        .await;
    let results = results.as_array().unwrap();
    assert_eq!(results.len(), 8);
    let ops: Vec<u64> = results
        .iter()
        .map(|r| {
            assert_eq!(r["status"], "completed");
            r["operation_id"].as_u64().unwrap()
        })
        .collect();
    assert!(ops.windows(2).all(|w| w[0] < w[1]), "in order: {ops:?}");
    let got = api
        .ok(
            "POST",
            "/collections/b/points",
            json!({"ids": [1, 2, 3, 4], "with_vector": true}),
        )
        .await;
    assert_eq!(got.as_array().unwrap().len(), 3, "{got}");
    assert_eq!(got[0]["payload"], json!({"b": true}), "{got}");
    assert_eq!(got[1]["payload"], json!({"c": 3}), "{got}");
    assert_eq!(got[2]["vector"], json!([0.0, 0.0, 2.0, 2.0]), "{got}");
    // A failing operation stops the batch with its error; what came before stays.
    let failing = json!({"operations": [
        {"delete": {"points": [1]}},
        {"set_payload": {"points": [99], "payload": {}}},
        {"delete": {"points": [2]}},
    ]});
    let e = api
        .err(
            "POST",
            "/collections/b/points/batch",
            failing,
            StatusCode::NOT_FOUND,
        )
        .await;
    assert!(e.contains("99"), "{e}");
    let count = api
        .ok("POST", "/collections/b/points/count", json!({}))
        .await;
    assert_eq!(count["count"], 2, "point 1 went, point 2 stayed");
    let e = api
        .err(
            "POST",
            "/collections/b/points/batch",
            json!({"operations": [{"explode": {}}]}),
            StatusCode::BAD_REQUEST,
        )
        .await;
    assert!(e.contains("unknown operation \"explode\""), "{e}");
}
