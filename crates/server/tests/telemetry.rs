//! `/telemetry`, `/metrics` and `/collections/{c}/optimizations` in Qdrant's shapes (its `details_level` and `per_collection`
//! parameters) beside diskvec's own content.

mod common;

use std::collections::BTreeSet;

use axum::http::StatusCode;
use common::Api;
use diskvec_server::Keys;
use serde_json::{json, Value};

fn vec4(i: usize) -> Vec<f32> {
    vec![i as f32, 1.0, (i % 3) as f32, 0.5]
}

fn keys(v: &Value) -> BTreeSet<String> {
    v.as_object()
        .unwrap_or_else(|| panic!("not an object: {v}"))
        .keys()
        .cloned()
        .collect()
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| s.to_string()).collect()
}

/// Two collections: `c` with 30 points searched 3 times, `d` with 5 points searched once.
async fn setup() -> Api {
    let api = Api::new(Keys::default());
    for (name, n) in [("c", 30), ("d", 5)] {
        api.create_dot4(name).await;
        let points: Vec<Value> = (0..n)
            .map(|i| json!({"id": i, "vector": vec4(i)}))
            .collect();
        api.ok(
            "PUT",
            &format!("/collections/{name}/points?wait=true"),
            json!({"points": points}),
        )
        .await;
    }
    for (name, times) in [("c", 3), ("d", 1)] {
        for i in 0..times {
            api.ok(
                "POST",
                &format!("/collections/{name}/points/search"),
                json!({"vector": vec4(i), "limit": 3}),
            )
            .await;
        }
    }
    // A request naming no collection is counted, but for no collection.
    let (status, _) = api
        .call(
            "POST",
            "/collections/nope/points/search",
            json!({"vector": vec4(0), "limit": 3}),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    api
}

/// `2024-05-01T12:34:56.123456Z`
fn is_rfc3339(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 27
        && b[4] == b'-'
        && b[7] == b'-'
        && b[10] == b'T'
        && b[13] == b':'
        && b[16] == b':'
        && b[19] == b'.'
        && b[26] == b'Z'
        && s[..4].parse::<u32>().is_ok_and(|y| y >= 2024)
}

#[tokio::test]
async fn details_levels_answer_qdrant_keys() {
    let api = setup().await;
    let search = "POST /collections/{collection_name}/points/search";

    let t = api
        .ok("GET", "/telemetry?details_level=0", Value::Null)
        .await;
    assert_eq!(
        keys(&t),
        set(&["id", "app", "collections", "cluster", "requests", "quota"]),
        "{t}"
    );
    assert_eq!(keys(&t["collections"]), set(&["number_of_collections"]));
    assert_eq!(t["collections"]["number_of_collections"], 2);
    assert_eq!(t["cluster"]["enabled"], false);
    assert_eq!(t["requests"]["grpc"]["responses"], json!({}));
    let s = &t["requests"]["rest"]["responses"][search]["200"];
    assert_eq!(s["count"], 4, "{t}");
    assert!(s["avg_duration_micros"].as_f64().unwrap() > 0.0);
    // Level 0: no extremes, no time of the last answer; only Qdrant's route names.
    assert!(s.get("last_responded").is_none(), "{s}");
    assert!(t["requests"]["rest"]["responses"]
        .get("POST /collections/{name}/points/search")
        .is_none());
    assert!(is_rfc3339(t["app"]["startup"].as_str().unwrap()), "{t}");
    assert!(t["app"].get("features").is_none());

    let t = api
        .ok("GET", "/telemetry?details_level=1", Value::Null)
        .await;
    assert_eq!(
        keys(&t),
        set(&[
            "id",
            "app",
            "collections",
            "cluster",
            "requests",
            "memory",
            "hardware",
            "search_pool",
            "quota"
        ])
    );
    assert_eq!(
        keys(&t["collections"]),
        set(&["number_of_collections", "collections", "snapshots"])
    );
    let c = &t["collections"]["collections"][0];
    assert_eq!(
        keys(c),
        set(&["vectors", "optimizers_status", "params"]),
        "{c}"
    );
    assert_eq!(c["optimizers_status"], "ok");
    assert_eq!(c["params"]["vectors"]["size"], 4);
    let s = &t["requests"]["rest"]["responses"][search]["200"];
    assert!(is_rfc3339(s["last_responded"].as_str().unwrap()), "{s}");
    assert!(
        s["max_duration_micros"].as_f64().unwrap() >= s["min_duration_micros"].as_f64().unwrap()
    );
    assert_eq!(t["app"]["features"]["gpu"], false);
    assert!(t["app"]["system"]["cpu_flags"].is_string());

    let t = api
        .ok("GET", "/telemetry?details_level=2", Value::Null)
        .await;
    let c = &t["collections"]["collections"][0];
    assert_eq!(keys(c), set(&["id", "init_time_ms", "config"]), "{c}");
    assert_eq!(c["id"], "c");
    assert_eq!(c["config"]["params"]["vectors"]["distance"], "Dot");
    assert!(c["config"]["hnsw_config"]["m"].is_u64());

    let t = api
        .ok("GET", "/telemetry?details_level=3", Value::Null)
        .await;
    let c = &t["collections"]["collections"][0];
    assert_eq!(
        keys(c),
        set(&[
            "id",
            "init_time_ms",
            "config",
            "shards",
            "transfers",
            "resharding"
        ])
    );
    let shard = &c["shards"][0];
    assert_eq!(
        keys(shard),
        set(&[
            "id",
            "key",
            "local",
            "remote",
            "replicate_states",
            "partial_snapshot"
        ])
    );
    let local = &shard["local"];
    assert_eq!(
        keys(local),
        set(&[
            "variant_name",
            "status",
            "total_optimized_points",
            "vectors_size_bytes",
            "payloads_size_bytes",
            "num_points",
            "num_vectors",
            "num_vectors_by_name",
            "optimizations",
            "async_scorer",
            "update_queue"
        ]),
        "{local}"
    );
    assert_eq!(local["num_points"], 30);
    // One logged operation: the upsert.
    assert_eq!(local["update_queue"]["op_num"], 1, "{local}");
    assert_eq!(local["update_queue"]["length"], 0);

    for level in [4, 10] {
        let t = api
            .ok(
                "GET",
                &format!("/telemetry?details_level={level}"),
                Value::Null,
            )
            .await;
        let c = &t["collections"]["collections"][1];
        assert_eq!(c["id"], "d");
        let local = &c["shards"][0]["local"];
        assert!(
            local["indexed_only_excluded_vectors"].is_object(),
            "{local}"
        );
        let segments = local["segments"].as_array().unwrap();
        assert!(!segments.is_empty());
        for s in segments {
            assert_eq!(
                keys(s),
                set(&[
                    "info",
                    "config",
                    "vector_index_searches",
                    "payload_field_indices"
                ])
            );
            assert_eq!(s["info"]["num_deferred_points"], 0);
            assert_eq!(s["info"]["uuid"].as_str().unwrap().len(), 36);
        }
        let points: u64 = segments
            .iter()
            .map(|s| s["info"]["num_points"].as_u64().unwrap())
            .sum();
        assert_eq!(points, 5);
        assert_eq!(segments[0]["info"]["is_appendable"], true);
        assert_eq!(segments[0]["info"]["segment_type"], "plain");
    }
}

#[tokio::test]
async fn default_view_keeps_diskvec_content_beside_qdrant_keys() {
    let api = setup().await;
    let t = api.ok("GET", "/telemetry", Value::Null).await;
    for key in ["id", "app", "collections", "cluster", "requests", "quota"] {
        assert!(t.get(key).is_some(), "{key} missing: {t}");
    }
    let c = &t["collections"]["collections"][0];
    assert_eq!(c["id"], "c");
    assert_eq!(c["points"], 30);
    assert!(c["wal_bytes"].as_u64().unwrap() > 0);
    assert!(c["segments"].is_array());
    assert!(t["app"]["diskvec_version"].is_string());
    let responses = &t["requests"]["rest"]["responses"];
    // Under Qdrant's route name and diskvec's own.
    for route in [
        "POST /collections/{collection_name}/points/search",
        "POST /collections/{name}/points/search",
    ] {
        assert_eq!(responses[route]["200"]["count"], 4, "{route}: {responses}");
        assert!(is_rfc3339(
            responses[route]["200"]["last_responded"].as_str().unwrap()
        ));
    }
    assert!(t["requests"]["rest"]
        .get("per_collection_responses")
        .is_none());
    assert_eq!(t["requests"]["grpc"]["responses"], json!({}));
    // One id per process.
    let again = api
        .ok("GET", "/telemetry?details_level=0", Value::Null)
        .await;
    assert_eq!(again["id"], t["id"]);
    assert_eq!(t["id"].as_str().unwrap().len(), 36);
}

#[tokio::test]
async fn per_collection_responses_count_each_collection() {
    let api = setup().await;
    let t = api
        .ok(
            "GET",
            "/telemetry?per_collection=true&details_level=1",
            Value::Null,
        )
        .await;
    let per = &t["requests"]["rest"]["per_collection_responses"];
    let search = "POST /collections/{collection_name}/points/search";
    assert_eq!(per["c"][search]["200"]["count"], 3, "{per}");
    assert_eq!(per["d"][search]["200"]["count"], 1, "{per}");
    assert_eq!(
        per["c"]["PUT /collections/{collection_name}/points"]["200"]["count"],
        1
    );
    // The request on no collection counts only in the totals.
    assert_eq!(keys(per), set(&["c", "d"]));
    assert_eq!(
        t["requests"]["rest"]["responses"][search]["404"]["count"],
        1
    );
    // A dropped collection's requests are no longer reported.
    api.ok("DELETE", "/collections/d", Value::Null).await;
    let t = api
        .ok("GET", "/telemetry?per_collection=true", Value::Null)
        .await;
    assert_eq!(
        keys(&t["requests"]["rest"]["per_collection_responses"]),
        set(&["c"])
    );
}

#[tokio::test]
async fn bad_parameters_are_refused() {
    let api = Api::new(Keys::default());
    for uri in [
        "/telemetry?details_level=high",
        "/telemetry?details_level=-1",
        "/telemetry?per_collection=yes",
        "/metrics?per_collection=1",
    ] {
        let (status, body) = api.call("GET", uri, Value::Null).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{uri}: {body}");
    }
}

/// The value of the sample `name{labels}` in a Prometheus text page.
fn sample(page: &str, name_and_labels: &str) -> Option<f64> {
    page.lines()
        .find_map(|l| l.strip_prefix(name_and_labels)?.strip_prefix(' '))
        .and_then(|v| v.parse().ok())
}

async fn metrics_page(api: &Api, uri: &str) -> String {
    let (status, page) = api.call("GET", uri, Value::Null).await;
    assert_eq!(status, StatusCode::OK);
    page.as_str().expect("Prometheus text").to_string()
}

#[tokio::test]
async fn metrics_have_qdrant_families() {
    let api = setup().await;
    let page = metrics_page(&api, "/metrics").await;
    assert!(page.contains("# HELP app_info information about qdrant server"));
    assert!(page.contains("# TYPE app_info gauge"));
    assert!(page.contains(&format!(
        "app_info{{name=\"qdrant\",version=\"{}\"",
        diskvec_server::QDRANT_COMPATIBLE_VERSION
    )));
    assert_eq!(sample(&page, "collections_total"), Some(2.0));
    assert_eq!(sample(&page, "collection_points{id=\"c\"}"), Some(30.0));
    assert_eq!(sample(&page, "collection_points{id=\"d\"}"), Some(5.0));
    assert_eq!(sample(&page, "cluster_enabled"), Some(0.0));
    let search = "method=\"POST\",endpoint=\"/collections/{collection_name}/points/search\"";
    assert_eq!(
        sample(
            &page,
            &format!("rest_responses_total{{{search},status=\"200\"}}")
        ),
        Some(4.0),
        "{page}"
    );
    assert_eq!(
        sample(
            &page,
            &format!("rest_responses_total{{{search},status=\"404\"}}")
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &page,
            &format!("rest_responses_duration_seconds_count{{{search},status=\"200\"}}")
        ),
        Some(4.0)
    );
    assert!(
        sample(
            &page,
            &format!("rest_responses_avg_duration_seconds{{{search},status=\"200\"}}")
        )
        .unwrap()
            > 0.0
    );
    // Timings only of the 200s; endpoints Qdrant does not list are left out.
    assert!(!page.contains(&format!(
        "rest_responses_avg_duration_seconds{{{search},status=\"404\"}}"
    )));
    assert!(!page.contains("endpoint=\"/collections\""));
    for line in page.lines().filter(|l| !l.starts_with('#')) {
        if line.starts_with("rest_responses_") {
            assert!(!line.contains("collection="), "{line}");
        }
    }
    // diskvec's own families stay.
    assert_eq!(
        sample(&page, "diskvec_collection_points{collection=\"c\"}"),
        Some(30.0)
    );

    let page = metrics_page(&api, "/metrics?per_collection=true").await;
    assert_eq!(
        sample(
            &page,
            &format!("rest_responses_total{{{search},status=\"200\",collection=\"c\"}}")
        ),
        Some(3.0),
        "{page}"
    );
    assert_eq!(
        sample(
            &page,
            &format!("rest_responses_total{{{search},status=\"200\",collection=\"d\"}}")
        ),
        Some(1.0)
    );
    // Per collection instead of the totals; the request on no collection is in neither.
    assert_eq!(
        sample(
            &page,
            &format!("rest_responses_total{{{search},status=\"200\"}}")
        ),
        None
    );
    assert!(!page.contains("status=\"404\",collection="));
    assert_eq!(sample(&page, "collections_total"), Some(2.0));
    assert!(page.contains("diskvec_http_requests_total{"));
}

/// `GET /collections/{c}/optimizations`: nothing running on a quiet collection, its
/// segments idle with their live points, the optional parts only when asked for.
#[tokio::test]
async fn optimizations_show_the_builds_and_the_idle_segments() {
    let api = Api::new(Keys::default());
    api.create_dot4("c").await;
    let points: Vec<Value> = (0..6)
        .map(|i| json!({"id": i, "vector": [1.0, 0.0, 0.0, i as f32]}))
        .collect();
    api.put_points("c", json!(points)).await;
    api.ok(
        "POST",
        "/collections/c/points/delete?wait=true",
        json!({"points": [0]}),
    )
    .await;
    let plain = api
        .ok("GET", "/collections/c/optimizations", json!({}))
        .await;
    assert_eq!(plain["running"], json!([]), "{plain}");
    assert!(plain.get("queued").is_none() && plain.get("idle_segments").is_none());
    assert_eq!(plain["summary"]["queued_optimizations"], 0);
    let all = api
        .ok(
            "GET",
            "/collections/c/optimizations?with=queued,%20completed%20,idle_segments",
            json!({}),
        )
        .await;
    assert_eq!(all["queued"], json!([]));
    assert_eq!(all["completed"], json!([]));
    let idle = all["idle_segments"].as_array().unwrap();
    assert_eq!(idle.len(), 1, "{all}");
    assert_eq!(idle[0]["points_count"], 5);
    assert_eq!(idle[0]["uuid"].as_str().unwrap().len(), 36);
    let (status, v) = api
        .call(
            "GET",
            "/collections/c/optimizations?with=everything",
            json!({}),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
}
