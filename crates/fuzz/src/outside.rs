//! Targets over what a server's clients send: a snapshot archive to restore, and request
//! bodies to the routes whose JSON the server parses. A client's bytes must never panic
//! the server, make it answer 5xx, or put a file outside the database.

use std::path::PathBuf;
use std::sync::Arc;

use axum::body::Body;
use axum::http::Request;
use diskvec_db::{CollectionConfig, Database, DbOptions, Metric, StoragePaths};
use tower::ServiceExt;

/// A database in a scratch directory, beside a directory nothing may ever write into.
struct Scratch {
    _dir: tempfile::TempDir,
    root: PathBuf,
    db: Arc<Database>,
}

impl Scratch {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("a scratch directory");
        let root = dir.path().to_path_buf();
        std::fs::create_dir(root.join("outside")).expect("a directory");
        let options = DbOptions {
            storage_paths: StoragePaths::only(&[root.join("allowed")]).expect("a storage path"),
            search_memory: diskvec_db::MemoryBudget::Bytes(0),
            ..Default::default()
        };
        let db = Database::open_with_options(&root.join("db"), options).expect("a database");
        Self {
            _dir: dir,
            root,
            db: Arc::new(db),
        }
    }

    /// Nothing appeared beside the database, its storage path and the watched directory,
    /// and nothing in the watched one.
    fn check_nothing_outside(&self) {
        let mut names: Vec<String> = std::fs::read_dir(&self.root)
            .expect("the scratch directory")
            .map(|e| {
                e.expect("an entry")
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        names.sort();
        let allowed = ["allowed", "archive", "db", "outside"];
        assert!(
            names.iter().all(|n| allowed.contains(&n.as_str())),
            "a file appeared beside the database: {names:?}"
        );
        let outside = std::fs::read_dir(self.root.join("outside"))
            .expect("the watched directory")
            .count();
        assert_eq!(outside, 0, "a file appeared outside the database");
    }
}

thread_local! {
    static SNAPSHOTS: Scratch = Scratch::new();
}

/// A collection snapshot archive, restored over collection `fuzzed` (so a restore that
/// succeeds is then replaced by the next): refused or restored, never a panic, never a file
/// outside the database, and a restored collection answers.
pub fn snapshot(data: &[u8]) {
    SNAPSHOTS.with(|s| {
        let archive = s.root.join("archive");
        std::fs::write(&archive, data).expect("writing the archive");
        if let Ok(c) = s.db.restore_collection("fuzzed", &archive, None) {
            let _ = c.info();
        }
        let _ = std::fs::remove_file(&archive);
        s.check_nothing_outside();
    });
}

/// A valid collection snapshot of 5 points, for seeds.
pub fn snapshot_seed() -> Vec<u8> {
    let s = Scratch::new();
    let mut config = CollectionConfig::new(4, Metric::Cosine);
    config.seal_threshold = 1_000;
    let c =
        s.db.create_collection("seed", config)
            .expect("a collection");
    let points = (0..5u64)
        .map(|i| {
            let vector = vec![i as f32 + 1.0, 1.0, 0.0, 0.5];
            diskvec_db::PointRecord::new(diskvec_db::PointId::Num(i), vector, Default::default())
        })
        .collect();
    c.upsert(points).expect("points");
    let info = s.db.create_snapshot("seed").expect("a snapshot");
    std::fs::read(s.db.snapshots_dir().join("seed").join(info.name)).expect("the snapshot file")
}

/// The routes whose bodies `requests` sends: the first byte of an input picks one.
pub const ROUTES: &[(&str, &str)] = &[
    ("PUT", "/collections/made"),
    ("PATCH", "/collections/c"),
    ("PUT", "/collections/c/points?wait=true"),
    ("POST", "/collections/c/points"),
    ("POST", "/collections/c/points/delete?wait=true"),
    ("POST", "/collections/c/points/payload?wait=true"),
    ("POST", "/collections/c/points/batch?wait=true"),
    ("POST", "/collections/c/points/scroll"),
    ("POST", "/collections/c/points/count"),
    ("POST", "/collections/c/points/search"),
    ("POST", "/collections/c/points/query"),
    ("POST", "/collections/c/points/query/batch"),
    ("POST", "/collections/c/points/query/groups"),
    ("POST", "/collections/c/facet"),
    ("POST", "/collections/c/points/search/matrix/pairs"),
    ("PUT", "/collections/c/index?wait=true"),
    ("POST", "/collections/aliases"),
    ("PUT", "/collections/c/snapshots/recover"),
];

struct Server {
    scratch: Scratch,
    runtime: tokio::runtime::Runtime,
    app: axum::Router,
}

thread_local! {
    static SERVER: Server = {
        let scratch = Scratch::new();
        let app = diskvec_server::router(diskvec_server::AppState::new(
            Arc::clone(&scratch.db),
            diskvec_server::Keys::default(),
        ));
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a runtime");
        let server = Server { scratch, runtime, app };
        for (method, uri, body) in SETUP {
            let status = server.send(method, uri, body.as_bytes());
            assert!(status < 300, "setting up: {method} {uri} answered {status}");
        }
        server
    };
}

const SETUP: &[(&str, &str, &str)] = &[
    (
        "PUT",
        "/collections/c",
        r#"{"vectors": {"size": 4, "distance": "Cosine"}}"#,
    ),
    (
        "PUT",
        "/collections/c/index?wait=true",
        r#"{"field_name": "kind", "field_schema": "keyword"}"#,
    ),
    (
        "PUT",
        "/collections/c/points?wait=true",
        r#"{"points": [
            {"id": 1, "vector": [1, 0, 0, 0], "payload": {"kind": "a", "n": 1}},
            {"id": 2, "vector": [0, 1, 0, 0], "payload": {"kind": "b", "n": 2}},
            {"id": 3, "vector": [0, 0, 1, 0], "payload": {"kind": "a", "n": 3}}
        ]}"#,
    ),
];

impl Server {
    fn send(&self, method: &str, uri: &str, body: &[u8]) -> u16 {
        let req = Request::builder()
            .method(method)
            .uri(uri)
            .header("content-type", "application/json")
            .body(Body::from(body.to_vec()))
            .expect("a request");
        let app = self.app.clone();
        self.runtime
            .block_on(app.oneshot(req))
            .map(|r| r.status().as_u16())
            .unwrap_or(500)
    }
}

/// A JSON body to one of [`ROUTES`] (the input's first byte picks it): answered with a
/// success or a 4xx, never a 5xx, and nothing written outside the database.
pub fn requests(data: &[u8]) {
    let Some((&pick, body)) = data.split_first() else {
        return;
    };
    let (method, uri) = ROUTES[pick as usize % ROUTES.len()];
    SERVER.with(|s| {
        let status = s.send(method, uri, body);
        assert!(
            status < 500,
            "{method} {uri} answered {status} to {:?}",
            String::from_utf8_lossy(body)
        );
        if uri == "/collections/made" && status < 300 {
            s.send("DELETE", uri, b"");
        }
        s.scratch.check_nothing_outside();
    });
}

/// Valid bodies of every route, for seeds.
pub fn request_seeds() -> Vec<Vec<u8>> {
    let bodies: &[(&str, &str)] = &[
        (
            "/collections/made",
            r#"{"vectors": {"size": 3, "distance": "Dot"}, "diskvec": {"paths": ["/tmp"], "wal_path": "/"}}"#,
        ),
        (
            "/collections/made",
            r#"{"vectors": {"size": 3, "distance": "Dot", "datatype": "float16"}, "hnsw_config": {"m": 8}}"#,
        ),
        (
            "/collections/c",
            r#"{"optimizers_config": {"indexing_threshold": 1000}}"#,
        ),
        (
            "/collections/c/points?wait=true",
            r#"{"points": [{"id": 9, "vector": [3e38, 3e38, 0, 0], "payload": {"kind": "c"}}]}"#,
        ),
        (
            "/collections/c/points",
            r#"{"ids": [1, 2], "with_payload": true, "with_vector": true}"#,
        ),
        (
            "/collections/c/points/delete?wait=true",
            r#"{"filter": {"must": [{"key": "kind", "match": {"value": "z"}}]}}"#,
        ),
        (
            "/collections/c/points/payload?wait=true",
            r#"{"payload": {"x": [1, {"y": null}]}, "points": [1]}"#,
        ),
        (
            "/collections/c/points/batch?wait=true",
            r#"{"operations": [{"delete": {"points": [7]}}, {"set_payload": {"payload": {"k": 1}, "points": [2]}}]}"#,
        ),
        (
            "/collections/c/points/scroll",
            r#"{"limit": 2, "filter": {"should": [{"key": "n", "range": {"gte": 1}}]}, "order_by": "n"}"#,
        ),
        (
            "/collections/c/points/count",
            r#"{"exact": true, "filter": {"must_not": [{"has_id": [1]}]}}"#,
        ),
        (
            "/collections/c/points/search",
            r#"{"vector": [1, 0, 0, 0], "limit": 2, "params": {"hnsw_ef": 16}}"#,
        ),
        (
            "/collections/c/points/query",
            r#"{"prefetch": [{"query": [1, 0, 0, 0], "limit": 3}], "query": {"fusion": "rrf"}, "limit": 2}"#,
        ),
        (
            "/collections/c/points/query/batch",
            r#"{"searches": [{"query": {"nearest": [0, 1, 0, 0], "mmr": {"diversity": 0.5}}}]}"#,
        ),
        (
            "/collections/c/points/query/groups",
            r#"{"query": [1, 0, 0, 0], "group_by": "kind", "limit": 2, "group_size": 2}"#,
        ),
        (
            "/collections/c/facet",
            r#"{"key": "kind", "limit": 5, "exact": true}"#,
        ),
        (
            "/collections/c/points/search/matrix/pairs",
            r#"{"sample": 3, "limit": 2}"#,
        ),
        (
            "/collections/c/index?wait=true",
            r#"{"field_name": "n", "field_schema": "integer"}"#,
        ),
        (
            "/collections/aliases",
            r#"{"actions": [{"create_alias": {"collection_name": "c", "alias_name": "d"}}]}"#,
        ),
        (
            "/collections/c/snapshots/recover",
            r#"{"location": "file:///etc/passwd"}"#,
        ),
    ];
    bodies
        .iter()
        .map(|(uri, body)| {
            let route = ROUTES
                .iter()
                .position(|(_, u)| u == uri)
                .expect("a seed's route is listed");
            let mut input = vec![route as u8];
            input.extend_from_slice(body.as_bytes());
            input
        })
        .collect()
}
