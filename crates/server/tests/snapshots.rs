//! Snapshot routes: create, list, download (its checksum), recover from the snapshots
//! directory, and the paths they refuse.

mod common;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use common::Api;
use diskvec_server::Keys;
use serde_json::json;
use tower::ServiceExt;

#[tokio::test]
async fn a_snapshot_downloads_whole_and_recovers_its_collection() {
    let api = Api::new(Keys::default());
    api.create_dot4("c").await;
    let points: Vec<_> = (1..=5)
        .map(|i| json!({"id": i, "vector": [i, 0, 0, 1], "payload": {"i": i}}))
        .collect();
    api.put_points("c", json!(points)).await;
    let made = api
        .ok("POST", "/collections/c/snapshots?wait=true", json!({}))
        .await;
    let name = made["name"].as_str().unwrap().to_string();
    let listed = api.ok("GET", "/collections/c/snapshots", json!({})).await;
    assert_eq!(listed[0]["name"], name.as_str());
    assert_eq!(listed[0]["checksum"], made["checksum"]);
    // The download is the file the checksum was taken of.
    let req = Request::builder()
        .uri(format!("/collections/c/snapshots/{name}"))
        .body(Body::empty())
        .unwrap();
    let res = api.app.clone().oneshot(req).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let bytes = axum::body::to_bytes(res.into_body(), usize::MAX)
        .await
        .unwrap();
    assert_eq!(bytes.len() as u64, made["size"].as_u64().unwrap());
    // Recovered from the snapshots directory (where the database keeps them) under a new
    // name; a wrong checksum is refused first.
    let location = format!("file://{}/c/{name}", api.snapshots_dir().display());
    let wrong = json!({"location": location, "checksum": "0".repeat(64)});
    api.err(
        "PUT",
        "/collections/copy/snapshots/recover",
        wrong,
        StatusCode::BAD_REQUEST,
    )
    .await;
    api.err(
        "POST",
        "/collections/copy/points/count",
        json!({}),
        StatusCode::NOT_FOUND,
    )
    .await;
    let right = json!({"location": location, "checksum": made["checksum"]});
    api.ok("PUT", "/collections/copy/snapshots/recover", right)
        .await;
    let n = api
        .ok("POST", "/collections/copy/points/count", json!({}))
        .await;
    assert_eq!(n["count"], 5);
    // Deleted, it is gone.
    api.ok(
        "DELETE",
        &format!("/collections/c/snapshots/{name}"),
        json!({}),
    )
    .await;
    let listed = api.ok("GET", "/collections/c/snapshots", json!({})).await;
    assert_eq!(listed, json!([]));
}

#[tokio::test]
async fn snapshot_paths_outside_the_snapshots_directory_are_refused() {
    let api = Api::new(Keys::default());
    api.create_dot4("c").await;
    for name in ["..%2F..%2Fetc%2Fpasswd", "passwd"] {
        api.err(
            "GET",
            &format!("/collections/c/snapshots/{name}"),
            json!({}),
            StatusCode::NOT_FOUND,
        )
        .await;
    }
    let outside = json!({"location": "file:///etc/passwd"});
    let e = api
        .err(
            "PUT",
            "/collections/c/snapshots/recover",
            outside,
            StatusCode::FORBIDDEN,
        )
        .await;
    assert!(
        e.starts_with("Forbidden: Snapshot file path must be inside"),
        "{e}"
    );
    let relative = json!({"location": "file://./x.snapshot"});
    api.err(
        "PUT",
        "/collections/c/snapshots/recover",
        relative,
        StatusCode::BAD_REQUEST,
    )
    .await;
    // Another host, also behind a loopback-looking user part.
    for location in [
        "http://example.com/x.snapshot",
        "http://localhost:1@example.com/x.snapshot",
        "http://127.0.0.1@example.com:80/x.snapshot",
    ] {
        let why = api
            .err(
                "PUT",
                "/collections/c/snapshots/recover",
                json!({ "location": location }),
                StatusCode::BAD_REQUEST,
            )
            .await;
        assert!(why.contains("loopback"), "{location}: {why}");
    }
    // Full snapshots: made, listed, deleted.
    let made = api.ok("POST", "/snapshots?wait=true", json!({})).await;
    let name = made["name"].as_str().unwrap();
    assert_eq!(
        api.ok("GET", "/snapshots", json!({})).await[0]["name"],
        name
    );
    api.ok("DELETE", &format!("/snapshots/{name}"), json!({}))
        .await;
    assert_eq!(api.ok("GET", "/snapshots", json!({})).await, json!([]));
}

#[tokio::test]
async fn shard_snapshots_are_their_own_and_an_upload_restores_one() {
    let api = Api::new(Keys::default());
    api.create_dot4("c").await;
    let points: Vec<_> = (1..=6)
        .map(|i| json!({"id": i, "vector": [i, 0, 0, 1]}))
        .collect();
    api.put_points("c", json!(points)).await;
    let made = api
        .ok(
            "POST",
            "/collections/c/shards/0/snapshots?wait=true",
            json!({}),
        )
        .await;
    let name = made["name"].as_str().unwrap().to_string();
    // On the shard's shelf, not the collection's.
    let listed = api
        .ok("GET", "/collections/c/shards/0/snapshots", json!({}))
        .await;
    assert_eq!(listed[0]["name"], name.as_str());
    let own = api.ok("GET", "/collections/c/snapshots", json!({})).await;
    assert_eq!(own, json!([]));
    // A local collection is one shard.
    api.err(
        "GET",
        "/collections/c/shards/1/snapshots",
        json!({}),
        StatusCode::NOT_FOUND,
    )
    .await;
    let req = Request::builder()
        .uri(format!("/collections/c/shards/0/snapshots/{name}"))
        .body(Body::empty())
        .unwrap();
    let res = api.app.clone().oneshot(req).await.unwrap();
    let bytes = axum::body::to_bytes(res.into_body(), usize::MAX)
        .await
        .unwrap();
    // Points written after it are gone once it is uploaded back.
    api.put_points("c", json!([{"id": 99, "vector": [9, 9, 9, 9]}]))
        .await;
    let sum = made["checksum"].as_str().unwrap();
    let (status, why) = api
        .upload(
            "/collections/c/shards/0/snapshots/upload?checksum=abc",
            &bytes,
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{why}");
    assert!(why.to_string().contains("invalid_sha256_hash"), "{why}");
    let (status, why) = api
        .upload("/collections/c/shards/0/snapshots/upload", b"junk")
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{why}");
    let uri = format!("/collections/c/shards/0/snapshots/upload?checksum={sum}");
    let (status, why) = api.upload(&uri, &bytes).await;
    assert_eq!(status, StatusCode::OK, "{why}");
    let n = api
        .ok("POST", "/collections/c/points/count", json!({}))
        .await;
    assert_eq!(n["count"], 6);
    // Deleted from its shelf.
    api.ok(
        "DELETE",
        &format!("/collections/c/shards/0/snapshots/{name}"),
        json!({}),
    )
    .await;
    let listed = api
        .ok("GET", "/collections/c/shards/0/snapshots", json!({}))
        .await;
    assert_eq!(listed, json!([]));
}
