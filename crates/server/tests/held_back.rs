//! A write the database holds back (its frozen segments wait for their seals) answers 503
//! within the request's `timeout`, with nothing written, instead of hanging or answering
//! 408. Every seal here takes three seconds longer (`DISKVEC_DELAY`); this file is its own
//! test process, so the delay touches no other test.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use diskvec_db::Database;
use diskvec_server::{router, AppState, Keys};
use serde_json::{json, Value};
use tower::ServiceExt;

async fn call(app: &axum::Router, method: &str, uri: &str, body: Value) -> (StatusCode, Value) {
    let req = Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", "application/json")
        .body(Body::from(serde_json::to_vec(&body).unwrap()))
        .unwrap();
    let res = app.clone().oneshot(req).await.unwrap();
    let status = res.status();
    let bytes = axum::body::to_bytes(res.into_body(), usize::MAX)
        .await
        .unwrap();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

fn batch(first: u64) -> Value {
    let points: Vec<Value> = (first..first + 100)
        .map(|i| json!({"id": i, "vector": [i as f32, 1.0, 2.0, 3.0]}))
        .collect();
    json!({ "points": points })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_back_write_answers_503_within_its_timeout() {
    std::env::set_var("DISKVEC_DELAY", "build=3000");
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(Database::open(dir.path()).unwrap());
    let app = router(AppState::new(db, Keys::default()));
    let (status, v) = call(
        &app,
        "PUT",
        "/collections/c",
        json!({"vectors": {"size": 4, "distance": "Dot"},
               "diskvec": {"seal_threshold": 100, "idle_merge_ms": 0}}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{v}");
    let mut next = 0;
    let (status, v, took) = loop {
        assert!(next < 100 * 40, "never held back");
        let t = Instant::now();
        let (status, v) = call(
            &app,
            "PUT",
            "/collections/c/points?wait=true&timeout=1",
            batch(next),
        )
        .await;
        if status != StatusCode::OK {
            break (status, v, t.elapsed());
        }
        next += 100;
    };
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{v}");
    assert!(
        v["status"]["error"]
            .as_str()
            .unwrap()
            .contains("retry later"),
        "{v}"
    );
    assert!(took < Duration::from_millis(1500), "{took:?}");
    // Nothing of it was written.
    let (_, count) = call(&app, "POST", "/collections/c/points/count", json!({})).await;
    assert_eq!(count["result"]["count"], next, "{count}");
    std::env::remove_var("DISKVEC_DELAY");
}
