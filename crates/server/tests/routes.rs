//! The routes through the router (no socket): Qdrant's shapes, envelopes and status codes.

mod common;

use axum::http::StatusCode;
use common::Api;
use diskvec_server::Keys;
use serde_json::{json, Value};

fn vec4(i: u64) -> Vec<f32> {
    vec![1.0, i as f32, (i % 3) as f32, 0.5]
}

#[tokio::test]
async fn the_common_path_answers_in_qdrants_shapes() {
    let api = Api::new(Keys::default());
    let root = api.call("GET", "/", json!(null)).await.1;
    assert!(
        root["version"].as_str().unwrap().starts_with("1."),
        "{root}"
    );
    // Qdrant's keys, exactly: clients and Qdrant's own REST suite check them.
    let keys: Vec<&String> = root.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["commit", "title", "version"], "{root}");
    let commit = root["commit"].as_str().unwrap();
    assert!(
        commit.len() == 40 && commit.bytes().all(|b| b.is_ascii_hexdigit()),
        "{root}"
    );
    for (route, text) in [
        ("/healthz", "healthz check passed"),
        ("/livez", "healthz check passed"),
        ("/readyz", "all shards are ready"),
    ] {
        let (status, body) = api.raw("GET", route, vec![], None).await;
        assert_eq!((status, body), (StatusCode::OK, json!(text)), "{route}");
    }

    let create = json!({"vectors": {"size": 4, "distance": "Cosine"},
                        "optimizers_config": {"indexing_threshold": 20000}});
    assert_eq!(
        api.ok("PUT", "/collections/docs", create.clone()).await,
        json!(true)
    );
    let msg = api
        .err("PUT", "/collections/docs", create, StatusCode::CONFLICT)
        .await;
    assert!(msg.contains("already exists"), "{msg}");
    assert_eq!(
        api.ok("GET", "/collections/docs/exists", json!(null)).await["exists"],
        true
    );
    assert_eq!(
        api.ok("GET", "/collections/nope/exists", json!(null)).await["exists"],
        false
    );
    let list = api.ok("GET", "/collections", json!(null)).await;
    assert_eq!(list["collections"], json!([{"name": "docs"}]));

    // Upsert in both forms.
    let points: Vec<Value> = (0..30)
        .map(|i| json!({"id": i, "vector": vec4(i), "payload": {"group": format!("g{}", i % 3), "n": i}}))
        .collect();
    let r = api
        .ok(
            "PUT",
            "/collections/docs/points?wait=true",
            json!({"points": points}),
        )
        .await;
    assert_eq!(r["status"], "completed");
    let uuid = "5c56c793-69f3-4fbf-87e6-c4bf54c28c26";
    let r = api
        .ok("PUT", "/collections/docs/points", json!({"batch": {"ids": [100, uuid], "vectors": [vec4(100), vec4(101)], "payloads": [{"group": "x"}, null]}}))
        .await;
    assert_eq!(r["status"], "acknowledged");

    let info = api.ok("GET", "/collections/docs", json!(null)).await;
    assert_eq!(info["points_count"], 32);
    assert_eq!(
        info["config"]["params"]["vectors"],
        json!({"size": 4, "distance": "Cosine", "on_disk": true})
    );
    assert!(
        ["green", "yellow"].contains(&info["status"].as_str().unwrap()),
        "{info}"
    );

    // Retrieve and get by id (int and UUID).
    let got = api
        .ok(
            "POST",
            "/collections/docs/points",
            json!({"ids": [1, 2, 999], "with_vector": true}),
        )
        .await;
    assert_eq!(got.as_array().unwrap().len(), 2);
    assert_eq!(got[0]["payload"]["group"], "g1");
    assert_eq!(got[0]["vector"].as_array().unwrap().len(), 4);
    let one = api
        .ok(
            "GET",
            &format!("/collections/docs/points/{uuid}"),
            json!(null),
        )
        .await;
    assert_eq!(one["id"], uuid);
    api.err(
        "GET",
        "/collections/docs/points/12345",
        json!(null),
        StatusCode::NOT_FOUND,
    )
    .await;

    // Search and query, with a filter, payload selection and hnsw_ef.
    let flt = json!({"must": [{"key": "group", "match": {"value": "g2"}}]});
    let hits = api
        .ok("POST", "/collections/docs/points/search", json!({"vector": vec4(5), "limit": 3, "filter": flt, "with_payload": ["n"], "params": {"hnsw_ef": 64}}))
        .await;
    let hits = hits.as_array().unwrap();
    assert_eq!(hits.len(), 3);
    assert_eq!(hits[0]["id"], 5);
    for h in hits {
        assert_eq!(h["id"].as_u64().unwrap() % 3, 2, "{h}");
        assert!(
            h["payload"].get("group").is_none() && h["payload"].get("n").is_some(),
            "{h}"
        );
        assert!(h["score"].as_f64().is_some());
    }
    let q = api
        .ok(
            "POST",
            "/collections/docs/points/query",
            json!({"query": vec4(7), "limit": 2, "with_payload": true}),
        )
        .await;
    assert_eq!(q["points"][0]["id"], 7);
    assert_eq!(q["points"][0]["payload"]["group"], "g1");
    let batch = api
        .ok(
            "POST",
            "/collections/docs/points/search/batch",
            json!({"searches": [{"vector": vec4(1), "limit": 1}, {"vector": vec4(4), "limit": 1}]}),
        )
        .await;
    assert_eq!(batch[0][0]["id"], 1);
    assert_eq!(batch[1][0]["id"], 4);
    let qb = api
        .ok(
            "POST",
            "/collections/docs/points/query/batch",
            json!({"searches": [{"query": {"nearest": vec4(2)}, "limit": 1}]}),
        )
        .await;
    assert_eq!(qb[0]["points"][0]["id"], 2);

    // Scroll pages through everything once; count with and without a filter.
    let mut seen = Vec::new();
    let mut offset = Value::Null;
    loop {
        let page = api
            .ok(
                "POST",
                "/collections/docs/points/scroll",
                json!({"limit": 7, "offset": offset}),
            )
            .await;
        seen.extend(
            page["points"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p["id"].clone()),
        );
        offset = page["next_page_offset"].clone();
        if offset.is_null() {
            break;
        }
    }
    assert_eq!(seen.len(), 32);
    assert_eq!(
        api.ok("POST", "/collections/docs/points/count", json!({}))
            .await["count"],
        32
    );
    assert_eq!(
        api.ok(
            "POST",
            "/collections/docs/points/count",
            json!({"filter": flt})
        )
        .await["count"],
        10
    );

    // Payload updates by id and by filter; deletes by id and by filter.
    api.ok(
        "POST",
        "/collections/docs/points/payload?wait=true",
        json!({"payload": {"tag": "t"}, "points": [1]}),
    )
    .await;
    api.ok(
        "POST",
        "/collections/docs/points/payload",
        json!({"payload": {"tag": "u"}, "filter": flt}),
    )
    .await;
    let tagged = json!({"must": [{"key": "tag", "match": {"any": ["t", "u"]}}]});
    assert_eq!(
        api.ok(
            "POST",
            "/collections/docs/points/count",
            json!({"filter": tagged})
        )
        .await["count"],
        11
    );
    api.ok(
        "POST",
        "/collections/docs/points/payload/delete",
        json!({"keys": ["tag"], "points": [1]}),
    )
    .await;
    api.ok(
        "POST",
        "/collections/docs/points/delete",
        json!({"points": [0, 3]}),
    )
    .await;
    api.ok(
        "POST",
        "/collections/docs/points/delete",
        json!({"filter": flt}),
    )
    .await;
    assert_eq!(
        api.ok("POST", "/collections/docs/points/count", json!({}))
            .await["count"],
        20
    );

    // Payload index create and delete show in the schema.
    api.ok(
        "PUT",
        "/collections/docs/index",
        json!({"field_name": "group", "field_schema": "keyword"}),
    )
    .await;
    let info = api.ok("GET", "/collections/docs", json!(null)).await;
    assert_eq!(info["payload_schema"]["group"]["data_type"], "keyword");
    api.ok("DELETE", "/collections/docs/index/group", json!(null))
        .await;

    api.ok(
        "PATCH",
        "/collections/docs",
        json!({"optimizers_config": {"max_optimization_threads": 1}}),
    )
    .await;
    assert_eq!(
        api.ok("DELETE", "/collections/docs", json!(null)).await,
        json!(true)
    );
    assert_eq!(
        api.ok("DELETE", "/collections/docs", json!(null)).await,
        json!(false)
    );
}

#[tokio::test]
async fn mistakes_get_qdrants_status_codes_and_error_envelopes() {
    let api = Api::new(Keys::default());
    api.create_dot4("c").await;
    let m = api
        .err(
            "GET",
            "/collections/missing",
            json!(null),
            StatusCode::NOT_FOUND,
        )
        .await;
    assert!(m.contains("doesn't exist"), "{m}");
    api.err(
        "POST",
        "/collections/missing/points/search",
        json!({"vector": vec4(1)}),
        StatusCode::NOT_FOUND,
    )
    .await;
    let m = api
        .err(
            "PUT",
            "/collections/c/points",
            json!({"points": [{"id": 1, "vector": [1.0, 2.0]}]}),
            StatusCode::BAD_REQUEST,
        )
        .await;
    assert!(m.contains("dimension"), "{m}");
    let m = api
        .err(
            "POST",
            "/collections/c/points/search",
            json!({"vector": [1.0]}),
            StatusCode::BAD_REQUEST,
        )
        .await;
    assert!(m.contains("dimension"), "{m}");
    let (status, v) = api
        .raw(
            "PUT",
            "/collections/c/points",
            b"{\"points\": [".to_vec(),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        v["status"]["error"]
            .as_str()
            .unwrap()
            .contains("malformed JSON"),
        "{v}"
    );
    let m = api
        .err(
            "POST",
            "/collections/c/points/search",
            json!({"vector": vec4(1), "filter": {"must": [{"key": "a", "match": {}}]}}),
            StatusCode::BAD_REQUEST,
        )
        .await;
    assert!(m.contains("filter"), "{m}");
    // Bounds the index enforces are the client's mistake too, not the server's.
    for body in [
        json!({"vector": vec4(1), "limit": 1_000_000}),
        json!({"vector": vec4(1), "limit": 5, "params": {"hnsw_ef": 100_000_000}}),
    ] {
        let m = api
            .err(
                "POST",
                "/collections/c/points/search",
                body,
                StatusCode::BAD_REQUEST,
            )
            .await;
        assert!(m.contains("between"), "{m}");
    }
    let m = api
        .err(
            "PUT",
            "/collections/d",
            json!({"vectors": {"size": 4, "distance": "Manhattan"}}),
            StatusCode::BAD_REQUEST,
        )
        .await;
    assert!(m.contains("Manhattan"), "{m}");
    for size in [0, diskvec_db::MAX_DIM + 1] {
        let m = api
            .err(
                "PUT",
                "/collections/d",
                json!({"vectors": {"size": size, "distance": "Cosine"}}),
                StatusCode::BAD_REQUEST,
            )
            .await;
        // Qdrant's wording, word for word.
        assert_eq!(
            m,
            format!(
                "Validation error in JSON body: [vectors.size: value {size} invalid, must be \
                 from 1 to {}]",
                diskvec_db::MAX_DIM
            )
        );
    }
    api.err("GET", "/no/such/route", json!(null), StatusCode::NOT_FOUND)
        .await;
    // Larger than the body limit: 413.
    let big = vec![b' '; diskvec_server::MAX_BODY_BYTES + 1];
    let (status, _) = api.raw("PUT", "/collections/c/points", big, None).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
}

#[tokio::test]
async fn api_keys_guard_every_route_but_health() {
    let api = Api::new(Keys {
        api_key: Some("secret".into()),
        read_only_key: Some("reader".into()),
    });
    let body = serde_json::to_vec(&json!({"vectors": {"size": 4, "distance": "Cosine"}})).unwrap();
    let (status, v) = api.raw("PUT", "/collections/c", body.clone(), None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{v}");
    let (status, _) = api
        .raw("PUT", "/collections/c", body.clone(), Some("wrong"))
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _) = api
        .raw("PUT", "/collections/c", body.clone(), Some("reader"))
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = api.raw("PUT", "/collections/c", body, Some("secret")).await;
    assert_eq!(status, StatusCode::OK);
    let search = serde_json::to_vec(&json!({"vector": vec4(1)})).unwrap();
    let (status, _) = api
        .raw(
            "POST",
            "/collections/c/points/search",
            search,
            Some("reader"),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = api.raw("GET", "/healthz", vec![], None).await;
    assert_eq!(status, StatusCode::OK);
}

/// The value of the sample `name{labels}` in a Prometheus text page.
fn sample(page: &str, name_and_labels: &str) -> Option<f64> {
    page.lines()
        .find_map(|l| l.strip_prefix(name_and_labels)?.strip_prefix(' '))
        .and_then(|v| v.parse().ok())
}

#[tokio::test]
async fn metrics_and_telemetry_count_what_happened() {
    let api = Api::new(Keys::default());
    api.create_dot4("c").await;
    let points: Vec<Value> = (0..30)
        .map(|i| json!({"id": i, "vector": vec4(i)}))
        .collect();
    api.ok(
        "PUT",
        "/collections/c/points?wait=true",
        json!({"points": points}),
    )
    .await;
    for i in 0..3 {
        api.ok(
            "POST",
            "/collections/c/points/search?timeout=5",
            json!({"vector": vec4(i), "limit": 3}),
        )
        .await;
    }
    api.err(
        "POST",
        "/collections/c/points/search",
        json!({"vector": [1.0]}),
        StatusCode::BAD_REQUEST,
    )
    .await;
    let msg = api
        .err(
            "POST",
            "/collections/c/points/search?timeout=0",
            json!({"vector": vec4(1)}),
            StatusCode::UNPROCESSABLE_ENTITY,
        )
        .await;
    assert!(msg.contains("timeout"), "{msg}");

    let (status, page) = api.call("GET", "/metrics", Value::Null).await;
    assert_eq!(status, StatusCode::OK);
    let page = page
        .as_str()
        .expect("Prometheus text, not JSON")
        .to_string();
    let search = "method=\"POST\",route=\"/collections/{name}/points/search\"";
    assert_eq!(
        sample(
            &page,
            &format!("diskvec_http_requests_total{{{search},status=\"200\"}}")
        ),
        Some(3.0),
        "{page}"
    );
    assert_eq!(
        sample(
            &page,
            &format!("diskvec_http_requests_total{{{search},status=\"422\"}}")
        ),
        Some(1.0),
        "{page}"
    );
    assert_eq!(
        sample(
            &page,
            &format!("diskvec_http_requests_total{{{search},status=\"400\"}}")
        ),
        Some(1.0),
        "{page}"
    );
    assert_eq!(
        sample(
            &page,
            &format!("diskvec_http_request_duration_seconds_count{{{search}}}")
        ),
        Some(5.0)
    );
    assert_eq!(
        sample(
            &page,
            &format!("diskvec_http_request_duration_seconds_bucket{{{search},le=\"+Inf\"}}")
        ),
        Some(5.0)
    );
    assert_eq!(
        sample(&page, "diskvec_collection_points{collection=\"c\"}"),
        Some(30.0)
    );
    // Nothing sealed yet: the search memory holds nothing and no graph search ran.
    assert_eq!(
        sample(
            &page,
            "diskvec_search_memory_bytes{collection=\"c\",kind=\"node_cache\"}"
        ),
        Some(0.0),
        "{page}"
    );
    assert_eq!(
        sample(&page, "diskvec_pq_code_bytes{collection=\"c\"}"),
        Some(0.0)
    );
    assert_eq!(
        sample(&page, "diskvec_compact_code_segments{collection=\"c\"}"),
        Some(0.0)
    );
    assert_eq!(
        sample(&page, "diskvec_graph_searches_total{collection=\"c\"}"),
        Some(0.0)
    );
    assert_eq!(
        sample(
            &page,
            "diskvec_collection_segments{collection=\"c\",kind=\"growing\"}"
        ),
        Some(1.0)
    );
    assert!(sample(&page, "diskvec_wal_bytes{collection=\"c\"}").unwrap() > 0.0);
    assert!(page.contains("diskvec_storage_reads_total{collection=\"c\",path=\"0\""));
    assert!(page.contains("# TYPE diskvec_http_request_duration_seconds histogram"));

    let t = api.ok("GET", "/telemetry", Value::Null).await;
    assert_eq!(t["collections"]["number_of_collections"], 1);
    assert_eq!(t["collections"]["collections"][0]["points"], 30);
    let searches = &t["requests"]["rest"]["responses"]["POST /collections/{name}/points/search"];
    assert_eq!(searches["200"]["count"], 3, "{t}");
    assert_eq!(searches["400"]["count"], 1, "{t}");
    assert_eq!(searches["422"]["count"], 1, "{t}");
    assert!(searches["200"]["avg_duration_micros"].as_f64().unwrap() > 0.0);
}

#[tokio::test]
async fn indexing_threshold_zero_pauses_indexing_and_other_values_resume_it() {
    let api = Api::new(Keys::default());
    api.ok(
        "PUT",
        "/collections/c",
        json!({"vectors": {"size": 4, "distance": "Dot"}, "optimizers_config": {"indexing_threshold": 0}}),
    )
    .await;
    let paused = |info: &Value| info["diskvec"]["indexing_paused"].as_bool().unwrap();
    assert!(paused(&api.ok("GET", "/collections/c", Value::Null).await));
    api.ok(
        "PATCH",
        "/collections/c",
        json!({"optimizers_config": {"indexing_threshold": 100}}),
    )
    .await;
    let info = api.ok("GET", "/collections/c", Value::Null).await;
    assert!(!paused(&info));
    // A small threshold at creation is raised to the smallest segment worth sealing.
    api.ok(
        "PUT",
        "/collections/d",
        json!({"vectors": {"size": 4, "distance": "Dot"}, "optimizers_config": {"indexing_threshold": 1}}),
    )
    .await;
    let d = api.ok("GET", "/collections/d", Value::Null).await;
    assert_eq!(d["diskvec"]["config"]["seal_threshold"], 1000, "{d}");
    // Points the indexer linked into the growing segment's HNSW graph count as indexed (as
    // Qdrant counts HNSW-indexed vectors), before any seal.
    let points: Vec<Value> = (0..50)
        .map(|i| json!({"id": i, "vector": vec4(i)}))
        .collect();
    api.ok(
        "PUT",
        "/collections/d/points?wait=true",
        json!({"points": points}),
    )
    .await;
    let mut indexed = 0;
    for _ in 0..100 {
        let info = api.ok("GET", "/collections/d", Value::Null).await;
        indexed = info["indexed_vectors_count"].as_u64().unwrap();
        if indexed == 50 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(
        indexed, 50,
        "the indexer links the growing segment within 5 s"
    );
    api.ok(
        "PATCH",
        "/collections/c",
        json!({"optimizers_config": {"indexing_threshold": 0}}),
    )
    .await;
    assert!(paused(&api.ok("GET", "/collections/c", Value::Null).await));
    api.err(
        "PATCH",
        "/collections/c",
        json!({"optimizers_config": {"indexing_threshold": -5}}),
        StatusCode::BAD_REQUEST,
    )
    .await;
}

/// Qdrant's `optimizers_config.max_segment_size` (KB of float32 vectors) sets the most points
/// a merge puts in one segment, at creation and later; one that would not hold a seal is
/// refused by name.
#[tokio::test]
async fn max_segment_size_sets_the_largest_merge() {
    let api = Api::new(Keys::default());
    api.ok(
        "PUT",
        "/collections/c",
        json!({"vectors": {"size": 4, "distance": "Dot"}, "optimizers_config": {"max_segment_size": 1000}}),
    )
    .await;
    let points = |info: &Value| {
        info["diskvec"]["config"]["max_segment_points"]
            .as_u64()
            .unwrap()
    };
    let info = api.ok("GET", "/collections/c", Value::Null).await;
    // 1000 KB of 4-d float32 vectors (16 bytes each) is 64,000 points.
    assert_eq!(points(&info), 64_000, "{info}");
    assert_eq!(
        info["config"]["optimizer_config"]["max_segment_size"], 1000,
        "{info}"
    );
    api.ok(
        "PATCH",
        "/collections/c",
        json!({"optimizers_config": {"max_segment_size": 160000}}),
    )
    .await;
    let info = api.ok("GET", "/collections/c", Value::Null).await;
    assert_eq!(points(&info), 10_240_000, "{info}");
    let refused = api
        .err(
            "PATCH",
            "/collections/c",
            json!({"optimizers_config": {"max_segment_size": 100}}),
            StatusCode::BAD_REQUEST,
        )
        .await;
    assert!(
        refused.contains("must hold at least the indexing threshold"),
        "{refused}"
    );
    let info = api.ok("GET", "/collections/c", Value::Null).await;
    assert_eq!(
        points(&info),
        10_240_000,
        "a refused change leaves the setting: {info}"
    );
    // Without dense vectors the size in KB is 0, which Qdrant's schema does not allow:
    // reported as null.
    api.ok(
        "PUT",
        "/collections/words",
        json!({"sparse_vectors": {"text": {}}}),
    )
    .await;
    let info = api.ok("GET", "/collections/words", Value::Null).await;
    assert!(
        info["config"]["optimizer_config"]["max_segment_size"].is_null(),
        "{info}"
    );
}

#[tokio::test]
async fn on_disk_false_keeps_nodes_in_dram_and_idle_merge_is_a_setting() {
    let api = Api::new(Keys::default());
    api.ok(
        "PUT",
        "/collections/mem",
        json!({"vectors": {"size": 4, "distance": "Dot", "on_disk": false},
               "diskvec": {"idle_merge_ms": 0, "navigation": false}}),
    )
    .await;
    let mem = api.ok("GET", "/collections/mem", Value::Null).await;
    assert_eq!(mem["diskvec"]["config"]["navigation"], false, "{mem}");
    assert_eq!(
        mem["config"]["params"]["vectors"]["on_disk"], false,
        "{mem}"
    );
    assert_eq!(mem["config"]["hnsw_config"]["on_disk"], false, "{mem}");
    assert_eq!(mem["diskvec"]["config"]["on_disk"], false, "{mem}");
    assert_eq!(mem["diskvec"]["config"]["idle_merge_ms"], 0, "{mem}");
    // hnsw_config.on_disk says the same; left out, diskvec's default is on disk.
    api.ok(
        "PUT",
        "/collections/graph",
        json!({"vectors": {"size": 4, "distance": "Dot"}, "hnsw_config": {"on_disk": false}}),
    )
    .await;
    let graph = api.ok("GET", "/collections/graph", Value::Null).await;
    assert_eq!(graph["diskvec"]["config"]["on_disk"], false, "{graph}");
    api.create_dot4("disk").await;
    let disk = api.ok("GET", "/collections/disk", Value::Null).await;
    assert_eq!(
        disk["config"]["params"]["vectors"]["on_disk"], true,
        "{disk}"
    );
    assert_eq!(disk["diskvec"]["config"]["idle_merge_ms"], 2000, "{disk}");
    assert_eq!(disk["diskvec"]["config"]["navigation"], true, "{disk}");
    let msg = api
        .err(
            "PUT",
            "/collections/bad",
            json!({"vectors": {"size": 4, "distance": "Dot"}, "diskvec": {"navigation": 1}}),
            StatusCode::BAD_REQUEST,
        )
        .await;
    assert!(msg.contains("diskvec.navigation"), "{msg}");
    let msg = api
        .err(
            "PUT",
            "/collections/bad",
            json!({"vectors": {"size": 4, "distance": "Dot", "on_disk": "no"}}),
            StatusCode::BAD_REQUEST,
        )
        .await;
    assert!(msg.contains("vectors.on_disk"), "{msg}");
}

#[tokio::test]
async fn build_memory_is_a_collection_setting_and_bad_ones_are_refused() {
    let api = Api::new(Keys::default());
    api.ok(
        "PUT",
        "/collections/bm",
        json!({"vectors": {"size": 4, "distance": "Dot"}, "diskvec": {"build_memory": "256MiB"}}),
    )
    .await;
    let info = api.ok("GET", "/collections/bm", Value::Null).await;
    assert_eq!(
        info["diskvec"]["config"]["build_memory"],
        (256u64 << 20).to_string(),
        "{info}"
    );
    api.ok(
        "PUT",
        "/collections/bytes",
        json!({"vectors": {"size": 4, "distance": "Dot"}, "diskvec": {"build_memory": 300_000_000u64}}),
    )
    .await;
    let info = api.ok("GET", "/collections/bytes", Value::Null).await;
    assert_eq!(info["diskvec"]["config"]["build_memory"], "300000000");
    for (bad, says) in [
        (json!("lots"), "memory budget"),
        (json!(-3), "diskvec.build_memory must be"),
        (json!(true), "diskvec.build_memory must be"),
        (json!("1MiB"), "at least"),
        (json!("auto"), "leave the setting unset"),
    ] {
        let msg = api
            .err(
                "PUT",
                "/collections/bad",
                json!({"vectors": {"size": 4, "distance": "Dot"}, "diskvec": {"build_memory": bad}}),
                StatusCode::BAD_REQUEST,
            )
            .await;
        assert!(msg.contains(says), "{bad}: {msg}");
    }
}

#[tokio::test]
async fn graph_builder_is_a_collection_setting_and_bad_ones_are_refused() {
    let api = Api::new(Keys::default());
    for (name, given, kept) in [
        ("pipnn", json!("pipnn"), json!("pipnn")),
        ("vamana", json!("VAMANA"), json!("vamana")),
        ("auto", json!("auto"), Value::Null),
    ] {
        api.ok(
            "PUT",
            &format!("/collections/{name}"),
            json!({"vectors": {"size": 4, "distance": "Dot"}, "diskvec": {"graph_builder": given}}),
        )
        .await;
        let info = api
            .ok("GET", &format!("/collections/{name}"), Value::Null)
            .await;
        assert_eq!(info["diskvec"]["config"]["graph_builder"], kept, "{info}");
    }
    for (bad, says) in [
        (json!("hnsw"), "unknown graph builder"),
        (json!(1), "diskvec.graph_builder must be"),
    ] {
        let msg = api
            .err(
                "PUT",
                "/collections/bad",
                json!({"vectors": {"size": 4, "distance": "Dot"}, "diskvec": {"graph_builder": bad}}),
                StatusCode::BAD_REQUEST,
            )
            .await;
        assert!(msg.contains(says), "{bad}: {msg}");
    }
}

#[tokio::test]
async fn search_memory_is_a_collection_setting_and_bad_ones_are_refused() {
    let api = Api::new(Keys::default());
    for (given, kept) in [
        (json!("25%"), "25%"),
        (json!(0), "0"),
        (json!("512MiB"), "536870912"),
    ] {
        api.ok(
            "PUT",
            "/collections/sm",
            json!({"vectors": {"size": 4, "distance": "Dot"}, "diskvec": {"search_memory": given}}),
        )
        .await;
        let info = api.ok("GET", "/collections/sm", Value::Null).await;
        assert_eq!(info["diskvec"]["config"]["search_memory"], kept, "{info}");
        assert_eq!(
            info["diskvec"]["search_memory"]["cached_nodes"], 0,
            "{info}"
        );
        api.ok("DELETE", "/collections/sm", Value::Null).await;
    }
    for (bad, says) in [
        (json!("lots"), "memory budget"),
        (json!(-3), "diskvec.search_memory must be"),
        (json!(true), "diskvec.search_memory must be"),
        (json!("auto"), "leave the setting unset"),
    ] {
        let msg = api
            .err(
                "PUT",
                "/collections/bad",
                json!({"vectors": {"size": 4, "distance": "Dot"}, "diskvec": {"search_memory": bad}}),
                StatusCode::BAD_REQUEST,
            )
            .await;
        assert!(msg.contains(says), "{bad}: {msg}");
    }
}

#[tokio::test]
async fn issues_are_an_empty_list_in_qdrants_envelope() {
    let api = Api::new(Keys::default());
    assert_eq!(
        api.ok("GET", "/issues", json!({})).await,
        json!({"issues": []})
    );
    assert_eq!(api.ok("DELETE", "/issues", json!({})).await, json!(true));
}

#[tokio::test]
async fn schema_bounds_fail_validation_in_qdrants_words() {
    let api = Api::new(Keys::default());
    api.create_dot4("c").await;
    let vectors = json!({"size": 4, "distance": "Dot"});
    for (body, field) in [
        (
            json!({"vectors": vectors, "shard_number": 0}),
            "shard_number",
        ),
        (
            json!({"vectors": vectors, "replication_factor": 0}),
            "replication_factor",
        ),
        (
            json!({"vectors": vectors, "hnsw_config": {"ef_construct": 0}}),
            "hnsw_config.ef_construct",
        ),
    ] {
        let e = api
            .err(
                "PUT",
                "/collections/v",
                body,
                StatusCode::UNPROCESSABLE_ENTITY,
            )
            .await;
        assert!(
            e.starts_with("Validation error") && e.contains(field),
            "{e}"
        );
    }
    let e = api
        .err(
            "PUT",
            "/collections/v",
            json!({"vectors": vectors, "shard_number": -1}),
            StatusCode::BAD_REQUEST,
        )
        .await;
    assert!(e.contains("shard_number"), "{e}");
    let query = json!({"query": [1, 0, 0, 0], "params": {"hnsw_ef": 0}});
    let e = api
        .err(
            "POST",
            "/collections/c/points/query",
            query,
            StatusCode::UNPROCESSABLE_ENTITY,
        )
        .await;
    assert!(e.contains("hnsw_ef"), "{e}");
    let e = api
        .err(
            "PUT",
            "/collections/w?timeout=0",
            json!({"vectors": vectors}),
            StatusCode::UNPROCESSABLE_ENTITY,
        )
        .await;
    assert!(e.contains("timeout: value 0 invalid"), "{e}");
    let long = "x".repeat(300);
    let e = api
        .err(
            "POST",
            &format!("/collections/{long}/points/count"),
            json!({}),
            StatusCode::UNPROCESSABLE_ENTITY,
        )
        .await;
    assert!(e.starts_with("Validation error"), "{e}");
}

#[tokio::test]
async fn a_standalone_node_says_so_on_the_cluster_routes() {
    let api = Api::new(Keys::default());
    let (status, body) = api.raw("GET", "/cluster", vec![], None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["result"]["status"], "disabled");
    for (method, uri) in [("POST", "/cluster/recover"), ("DELETE", "/cluster/peer/7")] {
        let (status, body) = api.raw(method, uri, vec![], None).await;
        assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED, "{method} {uri}");
        let error = body["status"]["error"].as_str().unwrap();
        assert!(error.contains("standalone mode"), "{error}");
    }
}
