//! The router driven without a socket, as every route test file uses it.
#![allow(dead_code)]

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use diskvec_db::Database;
use diskvec_server::{router, AppState, Keys};
use serde_json::{json, Value};
use tower::ServiceExt;

pub struct Api {
    pub app: axum::Router,
    _dir: tempfile::TempDir,
    snapshots: std::path::PathBuf,
}

impl Api {
    pub fn new(keys: Keys) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let db = Arc::new(Database::open(dir.path()).unwrap());
        Self {
            snapshots: db.snapshots_dir(),
            app: router(AppState::new(db, keys)),
            _dir: dir,
        }
    }

    /// An API over a database opened with `options`, answering within `limits`.
    pub fn with_options(
        dir: tempfile::TempDir,
        options: diskvec_db::DbOptions,
        limits: diskvec_server::Limits,
    ) -> Self {
        let db = Arc::new(Database::open_with_options(&dir.path().join("db"), options).unwrap());
        Self {
            snapshots: db.snapshots_dir(),
            app: router(AppState::with_limits(db, Keys::default(), limits)),
            _dir: dir,
        }
    }

    /// `POST uri` with a multipart form whose `snapshot` field holds `data`.
    pub async fn upload(&self, uri: &str, data: &[u8]) -> (StatusCode, Value) {
        let boundary = "test-boundary";
        let mut body = format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"snapshot\"; \
             filename=\"s.snapshot\"\r\nContent-Type: application/octet-stream\r\n\r\n"
        )
        .into_bytes();
        body.extend_from_slice(data);
        body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
        let req = Request::builder()
            .method("POST")
            .uri(uri)
            .header(
                "content-type",
                format!("multipart/form-data; boundary={boundary}"),
            )
            .body(Body::from(body))
            .unwrap();
        let (status, _, v) = self.send(req).await;
        (status, v)
    }

    /// Sends a request as built, answering its status, headers and body.
    pub async fn send(&self, req: Request<Body>) -> (StatusCode, axum::http::HeaderMap, Value) {
        let res = self.app.clone().oneshot(req).await.unwrap();
        let (status, headers) = (res.status(), res.headers().clone());
        let bytes = axum::body::to_bytes(res.into_body(), usize::MAX)
            .await
            .unwrap();
        let v = serde_json::from_slice(&bytes)
            .unwrap_or(Value::String(String::from_utf8_lossy(&bytes).into()));
        (status, headers, v)
    }

    /// Where the database keeps its snapshots.
    pub fn snapshots_dir(&self) -> &std::path::Path {
        &self.snapshots
    }

    pub async fn raw(
        &self,
        method: &str,
        uri: &str,
        body: Vec<u8>,
        key: Option<&str>,
    ) -> (StatusCode, Value) {
        let mut req = Request::builder()
            .method(method)
            .uri(uri)
            .header("content-type", "application/json");
        if let Some(k) = key {
            req = req.header("api-key", k);
        }
        let res = self
            .app
            .clone()
            .oneshot(req.body(Body::from(body)).unwrap())
            .await
            .unwrap();
        let status = res.status();
        let bytes = axum::body::to_bytes(res.into_body(), usize::MAX)
            .await
            .unwrap();
        let v = serde_json::from_slice(&bytes)
            .unwrap_or(Value::String(String::from_utf8_lossy(&bytes).into()));
        (status, v)
    }

    pub async fn call(&self, method: &str, uri: &str, body: Value) -> (StatusCode, Value) {
        self.raw(method, uri, serde_json::to_vec(&body).unwrap(), None)
            .await
    }

    /// A successful call's result, checking the envelope.
    pub async fn ok(&self, method: &str, uri: &str, body: Value) -> Value {
        let (status, v) = self.call(method, uri, body).await;
        assert_eq!(status, StatusCode::OK, "{method} {uri}: {v}");
        assert_eq!(v["status"], "ok", "{v}");
        assert!(v["time"].as_f64().is_some(), "{v}");
        v["result"].clone()
    }

    /// Creates collection `name`: 4 dimensions, dot product.
    pub async fn create_dot4(&self, name: &str) {
        let body = json!({"vectors": {"size": 4, "distance": "Dot"}});
        self.ok("PUT", &format!("/collections/{name}"), body).await;
    }

    /// Upserts `points` (a list of Qdrant point objects) into `collection`, waiting.
    pub async fn put_points(&self, collection: &str, points: Value) {
        let uri = format!("/collections/{collection}/points?wait=true");
        self.ok("PUT", &uri, json!({"points": points})).await;
    }

    /// A failing call's message, checking the status and the error envelope.
    pub async fn err(&self, method: &str, uri: &str, body: Value, want: StatusCode) -> String {
        let (status, v) = self.call(method, uri, body).await;
        assert_eq!(status, want, "{method} {uri}: {v}");
        v["status"]["error"]
            .as_str()
            .unwrap_or_else(|| panic!("no error envelope: {v}"))
            .to_string()
    }
}
