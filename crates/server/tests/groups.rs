//! `points/query/groups` and `points/search/groups`: hits grouped by a payload value, with
//! the group's point looked up in another collection.

mod common;

use axum::http::StatusCode;
use common::Api;
use diskvec_server::Keys;
use serde_json::{json, Value};

#[tokio::test]
async fn hits_group_by_a_payload_value_and_groups_look_up_their_point() {
    let api = Api::new(Keys::default());
    api.create_dot4("chunks").await;
    api.create_dot4("docs").await;
    // Ten documents of four chunks each; chunk c of doc d points along its own axis.
    let points: Vec<Value> = (0..40u64)
        .map(|i| {
            let (doc, chunk) = (i / 4, i % 4);
            let mut v = vec![0.0; 4];
            v[chunk as usize] = 1.0 + doc as f64 / 100.0;
            json!({"id": i, "vector": v, "payload": {"doc": doc, "tags": ["all", format!("d{doc}")]}})
        })
        .collect();
    api.ok(
        "PUT",
        "/collections/chunks/points?wait=true",
        json!({"points": points}),
    )
    .await;
    let docs: Vec<Value> = (0..10u64)
        .map(|d| json!({"id": d, "vector": [1, 1, 1, 1], "payload": {"title": format!("doc {d}")}}))
        .collect();
    api.ok(
        "PUT",
        "/collections/docs/points?wait=true",
        json!({"points": docs}),
    )
    .await;
    let body = json!({
        "query": [1, 0, 0, 0], "group_by": "doc", "limit": 3, "group_size": 2,
        "with_payload": true, "with_lookup": {"collection": "docs", "with_payload": true},
    });
    let groups = api
        .ok("POST", "/collections/chunks/points/query/groups", body)
        .await;
    let groups = groups["groups"].as_array().unwrap();
    // The best hits are the chunk-0 ones of the highest docs: 9, 8, 7.
    let ids: Vec<u64> = groups.iter().map(|g| g["id"].as_u64().unwrap()).collect();
    assert_eq!(ids, vec![9, 8, 7]);
    for g in groups {
        let hits = g["hits"].as_array().unwrap();
        assert_eq!(hits.len(), 2, "{g}");
        assert!(hits.iter().all(|h| h["payload"]["doc"] == g["id"]), "{g}");
        assert_eq!(g["lookup"]["id"], g["id"]);
        assert_eq!(g["lookup"]["payload"]["title"], format!("doc {}", g["id"]));
    }
    // An array value puts a hit in each of its groups; a key no point has, no groups.
    let body = json!({"vector": [1, 0, 0, 0], "group_by": "tags", "limit": 2, "group_size": 4});
    let groups = api
        .ok("POST", "/collections/chunks/points/search/groups", body)
        .await;
    let groups = groups["groups"].as_array().unwrap();
    assert_eq!(groups[0]["id"], "all");
    assert_eq!(groups[0]["hits"].as_array().unwrap().len(), 4);
    assert_eq!(groups[1]["id"], "d9");
    let body = json!({"query": [1, 0, 0, 0], "group_by": "nothing"});
    let groups = api
        .ok("POST", "/collections/chunks/points/query/groups", body)
        .await;
    assert_eq!(groups["groups"], json!([]));
    let body = json!({"query": [1, 0, 0, 0], "group_by": "doc", "with_lookup": "gone"});
    let e = api
        .err(
            "POST",
            "/collections/chunks/points/query/groups",
            body,
            StatusCode::NOT_FOUND,
        )
        .await;
    assert!(e.contains("Collection gone not found"), "{e}");
}

/// `lookup_from`: example points come from another collection, by id, and stay in the
/// results of this one.
#[tokio::test]
async fn examples_are_looked_up_in_another_collection() {
    let api = Api::new(Keys::default());
    api.create_dot4("items").await;
    api.create_dot4("users").await;
    let items: Vec<Value> = (0..4u64)
        .map(|i| {
            let mut v = vec![0.0; 4];
            v[i as usize] = 1.0;
            json!({"id": i, "vector": v})
        })
        .collect();
    api.ok(
        "PUT",
        "/collections/items/points?wait=true",
        json!({"points": items}),
    )
    .await;
    let user = json!({"points": [{"id": 2, "vector": [0, 0, 1, 0]}]});
    api.ok("PUT", "/collections/users/points?wait=true", user)
        .await;
    let body = json!({"query": 2, "lookup_from": {"collection": "users"}, "limit": 1});
    let found = api
        .ok("POST", "/collections/items/points/query", body)
        .await;
    assert_eq!(
        found["points"][0]["id"], 2,
        "item 2 is nearest user 2's vector: {found}"
    );
    let body = json!({"query": 2, "lookup_from": {"collection": "nobody"}});
    let e = api
        .err(
            "POST",
            "/collections/items/points/query",
            body,
            StatusCode::NOT_FOUND,
        )
        .await;
    assert!(e.contains("nobody"), "{e}");
    let body = json!({"query": 9, "lookup_from": {"collection": "users"}});
    let e = api
        .err(
            "POST",
            "/collections/items/points/query",
            body,
            StatusCode::NOT_FOUND,
        )
        .await;
    assert_eq!(e, "Not found: No point with id 9 found");
}

/// The distance matrix of a sample: each point's best others, as pairs and as offsets.
#[tokio::test]
async fn a_sample_distance_matrix_lists_each_points_best_others() {
    let api = Api::new(Keys::default());
    api.create_dot4("m").await;
    let vectors: Vec<[f32; 4]> = vec![
        [0.05, 0.61, 0.76, 0.74],
        [0.19, 0.81, 0.75, 0.11],
        [0.36, 0.55, 0.47, 0.94],
        [0.18, 0.01, 0.85, 0.80],
    ];
    let points: Vec<Value> = vectors
        .iter()
        .enumerate()
        .map(|(i, v)| json!({"id": i + 1, "vector": v}))
        .collect();
    api.ok(
        "PUT",
        "/collections/m/points?wait=true",
        json!({"points": points}),
    )
    .await;
    let dot = |a: usize, b: usize| -> f32 {
        vectors[a].iter().zip(&vectors[b]).map(|(x, y)| x * y).sum()
    };
    let pairs = api
        .ok(
            "POST",
            "/collections/m/points/search/matrix/pairs",
            json!({"sample": 10, "limit": 2}),
        )
        .await;
    let pairs = pairs["pairs"].as_array().unwrap();
    assert_eq!(pairs.len(), 8);
    for row in 0..4usize {
        let mut others: Vec<(f32, usize)> = (0..4)
            .filter(|&c| c != row)
            .map(|c| (dot(row, c), c))
            .collect();
        others.sort_by(|x, y| y.0.total_cmp(&x.0));
        for (k, (score, c)) in others.iter().take(2).enumerate() {
            let p = &pairs[row * 2 + k];
            assert_eq!(p["a"], row + 1);
            assert_eq!(p["b"], c + 1);
            assert!((p["score"].as_f64().unwrap() as f32 - score).abs() < 1e-6);
        }
    }
    let offsets = api
        .ok(
            "POST",
            "/collections/m/points/search/matrix/offsets",
            json!({"sample": 3, "limit": 1}),
        )
        .await;
    assert_eq!(offsets["ids"], json!([1, 2, 3]));
    assert_eq!(offsets["offsets_row"], json!([0, 1, 2]));
    let e = api
        .err(
            "POST",
            "/collections/m/points/search/matrix/pairs",
            json!({"using": "nope"}),
            StatusCode::BAD_REQUEST,
        )
        .await;
    assert!(e.contains("Not existing vector name error: nope"), "{e}");
}
