//! Collection settings changed by PATCH, and strict mode's limits over Qdrant's routes.

mod common;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use common::Api;
use diskvec_server::Keys;
use serde_json::json;
use tower::ServiceExt;

async fn strict(api: &Api, config: serde_json::Value) {
    api.ok(
        "PATCH",
        "/collections/c",
        json!({"strict_mode_config": config}),
    )
    .await;
}

async fn with_points(api: &Api) {
    api.create_dot4("c").await;
    let points: Vec<_> = (1..=6)
        .map(|i| json!({"id": i, "vector": [i, 1, 0, 0], "payload": {"city": "Berlin", "n": i}}))
        .collect();
    api.put_points("c", json!(points)).await;
}

#[tokio::test]
async fn patched_settings_are_shown_merged_and_kept() {
    let api = Api::new(Keys::default());
    with_points(&api).await;
    let info = api.ok("GET", "/collections/c", json!({})).await;
    assert_eq!(
        info["config"]["strict_mode_config"],
        json!({"enabled": false})
    );
    strict(&api, json!({"enabled": true, "max_query_limit": 10})).await;
    strict(
        &api,
        json!({"search_max_hnsw_ef": 4, "write_rate_limit": null}),
    )
    .await;
    let body = json!({
        "metadata": {"owner": "search", "v": 1},
        "hnsw_config": {"ef_construct": 123},
        "vectors": {"": {"hnsw_config": {"m": 32}}},
    });
    api.ok("PATCH", "/collections/c", body).await;
    api.ok("PATCH", "/collections/c", json!({"metadata": {"v": null}}))
        .await;
    let config = api.ok("GET", "/collections/c", json!({})).await["config"].clone();
    assert_eq!(
        config["strict_mode_config"],
        json!({"enabled": true, "max_query_limit": 10, "search_max_hnsw_ef": 4})
    );
    assert_eq!(config["metadata"], json!({"owner": "search"}));
    assert_eq!(config["hnsw_config"]["ef_construct"], 123);
    assert_eq!(config["params"]["vectors"]["hnsw_config"]["m"], 32);
    // A space that is not there, and a limit of zero, are refused; nothing changes.
    let bad = json!({"vectors": {"nope": {"hnsw_config": {"m": 8}}}});
    api.err("PATCH", "/collections/c", bad, StatusCode::BAD_REQUEST)
        .await;
    let zero = json!({"strict_mode_config": {"max_query_limit": 0}});
    api.err("PATCH", "/collections/c", zero, StatusCode::BAD_REQUEST)
        .await;
    let config = api.ok("GET", "/collections/c", json!({})).await["config"].clone();
    assert_eq!(config["strict_mode_config"]["max_query_limit"], 10);
}

#[tokio::test]
async fn limits_refuse_requests_past_them_and_only_while_enabled() {
    let api = Api::new(Keys::default());
    with_points(&api).await;
    let query = |limit: usize| json!({"query": [1, 0, 0, 0], "limit": limit});
    api.ok("POST", "/collections/c/points/query", query(5))
        .await;
    strict(&api, json!({"enabled": true, "max_query_limit": 4})).await;
    let e = api
        .err(
            "POST",
            "/collections/c/points/query",
            query(5),
            StatusCode::BAD_REQUEST,
        )
        .await;
    assert!(e.contains("Limit exceeded 5 > 4 for \"limit\""), "{e}");
    api.ok("POST", "/collections/c/points/query", query(4))
        .await;
    // A search's own parameters, a batch, an upsert's size.
    strict(
        &api,
        json!({"search_max_hnsw_ef": 8, "search_allow_exact": false}),
    )
    .await;
    let ef = json!({"query": [1, 0, 0, 0], "limit": 2, "params": {"hnsw_ef": 9}});
    let e = api
        .err(
            "POST",
            "/collections/c/points/query",
            ef,
            StatusCode::BAD_REQUEST,
        )
        .await;
    assert!(e.contains("hnsw_ef"), "{e}");
    let exact = json!({"vector": [1, 0, 0, 0], "limit": 2, "params": {"exact": true}});
    let e = api
        .err(
            "POST",
            "/collections/c/points/search",
            exact,
            StatusCode::BAD_REQUEST,
        )
        .await;
    assert!(e.contains("Exact search disabled"), "{e}");
    strict(&api, json!({"upsert_max_batchsize": 1})).await;
    let two =
        json!({"points": [{"id": 7, "vector": [1, 0, 0, 0]}, {"id": 8, "vector": [1, 0, 0, 0]}]});
    let e = api
        .err(
            "PUT",
            "/collections/c/points",
            two.clone(),
            StatusCode::BAD_REQUEST,
        )
        .await;
    assert!(e.contains("upsert limit"), "{e}");
    strict(&api, json!({"enabled": false})).await;
    api.ok("PUT", "/collections/c/points", two).await;
    api.ok("POST", "/collections/c/points/query", query(5))
        .await;
}

#[tokio::test]
async fn filters_on_unindexed_fields_are_refused_until_indexed() {
    let api = Api::new(Keys::default());
    with_points(&api).await;
    strict(
        &api,
        json!({"enabled": true, "unindexed_filtering_retrieve": false}),
    )
    .await;
    let body = json!({"filter": {"must": [{"key": "city", "match": {"value": "Berlin"}}]}});
    let e = api
        .err(
            "POST",
            "/collections/c/points/count",
            body.clone(),
            StatusCode::BAD_REQUEST,
        )
        .await;
    assert!(e.contains("\"city\"") && e.contains("Help:"), "{e}");
    // Filtered writes have their own setting, off here: allowed.
    let set = json!({"payload": {"x": 1}, "filter": body["filter"]});
    api.ok("POST", "/collections/c/points/payload", set).await;
    let index = json!({"field_name": "city", "field_schema": "keyword"});
    api.ok("PUT", "/collections/c/index", index).await;
    let n = api.ok("POST", "/collections/c/points/count", body).await;
    assert_eq!(n["count"], 6);
    // The index count limit.
    strict(&api, json!({"max_payload_index_count": 1})).await;
    let second = json!({"field_name": "n", "field_schema": "integer"});
    api.err(
        "PUT",
        "/collections/c/index",
        second,
        StatusCode::BAD_REQUEST,
    )
    .await;
}

#[tokio::test]
async fn a_spent_read_rate_answers_429_with_the_wait() {
    let api = Api::new(Keys::default());
    with_points(&api).await;
    strict(&api, json!({"enabled": true, "read_rate_limit": 1})).await;
    let query = json!({"query": [1, 0, 0, 0], "limit": 2});
    api.ok("POST", "/collections/c/points/query", query.clone())
        .await;
    let req = Request::builder()
        .method("POST")
        .uri("/collections/c/points/query")
        .header("content-type", "application/json")
        .body(Body::from(serde_json::to_vec(&query).unwrap()))
        .unwrap();
    let res = api.app.clone().oneshot(req).await.unwrap();
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    let wait: u64 = res.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((50..=60).contains(&wait), "{wait}");
    // Retrieving more points than the rate holds in a minute can never pass.
    let e = api
        .err(
            "POST",
            "/collections/c/points",
            json!({"ids": [1, 2]}),
            StatusCode::TOO_MANY_REQUESTS,
        )
        .await;
    assert!(e.contains("larger than rate limiter capacity"), "{e}");
}

#[tokio::test]
async fn index_options_decide_what_an_index_answers_under_strict_mode() {
    let api = Api::new(Keys::default());
    with_points(&api).await;
    strict(
        &api,
        json!({"enabled": true, "unindexed_filtering_retrieve": false}),
    )
    .await;
    let plain = json!({"field_name": "city", "field_schema": "keyword"});
    api.ok("PUT", "/collections/c/index", plain).await;
    let prefix = json!({"filter": {"must": [{"key": "city", "match": {"prefix": "Ber"}}]}});
    api.err(
        "POST",
        "/collections/c/points/count",
        prefix.clone(),
        StatusCode::BAD_REQUEST,
    )
    .await;
    let with_prefix =
        json!({"field_name": "city", "field_schema": {"type": "keyword", "prefix": true}});
    api.ok("PUT", "/collections/c/index", with_prefix).await;
    let n = api.ok("POST", "/collections/c/points/count", prefix).await;
    assert_eq!(n["count"], 6);
    // An integer index without lookup answers ranges, not value matches.
    let range_only = json!({"field_name": "n",
        "field_schema": {"type": "integer", "lookup": false, "range": true}});
    api.ok("PUT", "/collections/c/index", range_only).await;
    let range = json!({"filter": {"must": [{"key": "n", "range": {"gte": 3}}]}});
    assert_eq!(
        api.ok("POST", "/collections/c/points/count", range).await["count"],
        4
    );
    let exact = json!({"filter": {"must": [{"key": "n", "match": {"value": 3}}]}});
    api.err(
        "POST",
        "/collections/c/points/count",
        exact,
        StatusCode::BAD_REQUEST,
    )
    .await;
}

/// A text index gives `text`, `text_any` and `phrase` their token meaning; under strict
/// mode a phrase needs one created with `phrase_matching`, and bad text options are a 400.
#[tokio::test]
async fn text_indexes_match_tokens_and_phrases_need_phrase_matching() {
    let api = Api::new(Keys::default());
    api.create_dot4("c").await;
    let titles = [
        "Little Lost Robot",
        "Robot Dreams",
        "The Last Question",
        "Star Light",
    ];
    let points: Vec<_> = titles
        .iter()
        .enumerate()
        .map(|(i, t)| json!({"id": i, "vector": [1, 0, 0, 0], "payload": {"t": t}}))
        .collect();
    api.put_points("c", json!(points)).await;
    let count = |m: serde_json::Value| {
        let body = json!({"filter": {"must": [{"key": "t", "match": m}]}});
        let api = &api;
        async move { api.ok("POST", "/collections/c/points/count", body).await["count"].clone() }
    };
    // No index yet: substrings.
    assert_eq!(count(json!({"text": "robot"})).await, 0);
    let index = json!({"field_name": "t",
        "field_schema": {"type": "text", "stopwords": "english"}});
    api.ok("PUT", "/collections/c/index", index).await;
    assert_eq!(count(json!({"text": "robot"})).await, 2);
    assert_eq!(count(json!({"text_any": "the robot of star"})).await, 3);
    assert_eq!(count(json!({"text": "the"})).await, 0);
    strict(
        &api,
        json!({"enabled": true, "unindexed_filtering_retrieve": false}),
    )
    .await;
    let phrase = json!({"filter": {"must": [{"key": "t", "match": {"phrase": "lost robot"}}]}});
    let refused = api
        .err(
            "POST",
            "/collections/c/points/count",
            phrase.clone(),
            StatusCode::BAD_REQUEST,
        )
        .await;
    assert!(refused.contains("Help: Create an index"), "{refused}");
    let index = json!({"field_name": "t",
        "field_schema": {"type": "text", "phrase_matching": true}});
    api.ok("PUT", "/collections/c/index", index).await;
    let n = api.ok("POST", "/collections/c/points/count", phrase).await;
    assert_eq!(n["count"], 1);
    let bad =
        json!({"field_name": "u", "field_schema": {"type": "text", "tokenizer": "multilingual"}});
    api.err("PUT", "/collections/c/index", bad, StatusCode::BAD_REQUEST)
        .await;
}
