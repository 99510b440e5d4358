//! What a client must not be able to do, tried as an attacker would: name a path outside the
//! database, smuggle links or devices in a snapshot, follow a redirect past the loopback
//! rule, write from another site's web page, hold connections with slow or large requests,
//! break a collection with a long name or concurrent snapshots.

mod common;

use std::io::{Read, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use common::Api;
use diskvec_db::{DbOptions, StoragePaths};
use diskvec_server::Limits;
use serde_json::{json, Value};

/// An API whose database may keep files only in `<dir>/allowed` besides its own.
fn guarded(limits: Limits) -> (Api, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    let options = DbOptions {
        storage_paths: StoragePaths::only(&[root.join("allowed")]).unwrap(),
        ..Default::default()
    };
    (Api::with_options(dir, options, limits), root)
}

async fn five_points(api: &Api, name: &str) {
    api.create_dot4(name).await;
    let points: Vec<Value> = (1..=5)
        .map(|i| json!({"id": i, "vector": [i as f32, 1.0, 0.0, 0.0]}))
        .collect();
    api.put_points(name, json!(points)).await;
}

async fn count(api: &Api, name: &str) -> u64 {
    let uri = format!("/collections/{name}/points/count");
    api.ok("POST", &uri, json!({"exact": true})).await["count"]
        .as_u64()
        .unwrap()
}

#[tokio::test]
async fn a_client_cannot_name_a_path_outside_the_configured_ones() {
    let (api, root) = guarded(Limits::default());
    let victim = root.join("victim");
    std::fs::create_dir_all(victim.join("mycol")).unwrap();
    std::fs::write(victim.join("mycol").join("precious"), b"x").unwrap();
    let vectors = json!({"size": 4, "distance": "Dot"});
    for settings in [
        json!({"wal_path": victim}),
        json!({"paths": [victim]}),
        json!({"paths": [root.join("allowed"), "/"]}),
        json!({"wal_path": "/"}),
        json!({"paths": [root.join("allowed").join("..").join("victim")]}),
    ] {
        let body = json!({"vectors": vectors, "diskvec": settings});
        let message = api
            .err("PUT", "/collections/mycol", body, StatusCode::BAD_REQUEST)
            .await;
        assert!(message.contains("storage paths"), "{message}");
        // Never created: nothing to drop (Qdrant's answer: `false`).
        let dropped = api.ok("DELETE", "/collections/mycol", json!({})).await;
        assert_eq!(dropped, json!(false));
    }
    assert!(victim.join("mycol").join("precious").exists());
    // The configured path is taken, for the nodes and for the log.
    let allowed = root.join("allowed");
    let body = json!({"vectors": vectors, "diskvec": {"paths": [allowed], "wal_path": allowed}});
    api.ok("PUT", "/collections/mycol", body).await;
    api.put_points("mycol", json!([{"id": 1, "vector": [1, 0, 0, 0]}]))
        .await;
    assert!(allowed.join("mycol").is_dir());
    api.ok("DELETE", "/collections/mycol", json!({})).await;
    assert!(!allowed.join("mycol").exists());
    assert!(victim.join("mycol").join("precious").exists());
}

#[test]
fn a_drop_removes_no_directory_a_link_points_to() {
    let dir = tempfile::tempdir().unwrap();
    let (nodes, victim) = (dir.path().join("nodes"), dir.path().join("victim"));
    std::fs::create_dir_all(&victim).unwrap();
    std::fs::write(victim.join("precious"), b"x").unwrap();
    let db = diskvec_db::Database::open(&dir.path().join("db")).unwrap();
    let mut config = diskvec_db::CollectionConfig::new(4, diskvec_db::Metric::L2);
    config.paths = vec![nodes.clone()];
    config.wal_path = Some(nodes.clone());
    db.create_collection("c", config).unwrap();
    // Planted where the collection's log directory is.
    std::fs::remove_dir_all(nodes.join("c")).unwrap();
    std::os::unix::fs::symlink(&victim, nodes.join("c")).unwrap();
    db.drop_collection("c").unwrap();
    assert!(victim.join("precious").exists());
}

/// A tar archive: `(path, kind, data)` entries, the header first.
fn archive(entries: &[(&str, tar::EntryType, &[u8])]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    let header = br#"{"format": 1, "kind": "collection", "collection": "c"}"#;
    let mut all: Vec<(&str, tar::EntryType, &[u8])> =
        vec![("diskvec-snapshot.json", tar::EntryType::Regular, header)];
    all.extend_from_slice(entries);
    for (path, kind, data) in all {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_mode(0o644);
        h.set_size(if kind == tar::EntryType::Regular {
            data.len() as u64
        } else {
            0
        });
        if matches!(kind, tar::EntryType::Symlink | tar::EntryType::Link) {
            h.set_link_name(std::str::from_utf8(data).unwrap()).unwrap();
        }
        // Written as is (`set_path` refuses `..`, which a hostile archive would carry).
        h.as_old_mut().name[..path.len()].copy_from_slice(path.as_bytes());
        h.set_cksum();
        let body: &[u8] = if kind == tar::EntryType::Regular {
            data
        } else {
            &[]
        };
        b.append(&h, body).unwrap();
    }
    b.into_inner().unwrap()
}

#[tokio::test]
async fn a_snapshot_holds_plain_files_only_and_a_failed_restore_keeps_the_collection() {
    let (api, root) = guarded(Limits::default());
    five_points(&api, "c").await;
    let outside = root.join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let target = outside.to_str().unwrap().to_string();
    use tar::EntryType as E;
    let big_header = vec![b' '; 100 << 10];
    let crafted: Vec<(&str, Vec<u8>)> = vec![
        (
            "symlink",
            archive(&[("collection/wal", E::Symlink, target.as_bytes())]),
        ),
        (
            "hard link",
            archive(&[("collection/manifest.dvc", E::Link, b"/etc/hostname")]),
        ),
        ("fifo", archive(&[("collection/pipe", E::Fifo, b"")])),
        ("device", archive(&[("collection/dev", E::Char, b"")])),
        ("sparse", archive(&[("collection/big", E::GNUSparse, b"")])),
        (
            "outside",
            archive(&[("collection/../../escaped", E::Regular, b"x")]),
        ),
        (
            "foreign entry",
            archive(&[("elsewhere/file", E::Regular, b"x")]),
        ),
        (
            "no manifest",
            archive(&[("collection/segments", E::Directory, b"")]),
        ),
        (
            "bad manifest",
            archive(&[("collection/manifest.dvc", E::Regular, b"not a manifest")]),
        ),
        ("huge header", {
            let mut b = tar::Builder::new(Vec::new());
            let mut h = tar::Header::new_gnu();
            h.set_size(big_header.len() as u64);
            h.set_mode(0o644);
            h.set_cksum();
            b.append_data(&mut h, "diskvec-snapshot.json", big_header.as_slice())
                .unwrap();
            b.into_inner().unwrap()
        }),
    ];
    for (what, tar) in crafted {
        let (status, v) = api.upload("/collections/c/snapshots/upload", &tar).await;
        assert!(status.is_client_error(), "{what}: {status} {v}");
        assert_eq!(count(&api, "c").await, 5, "{what}: the collection changed");
        assert_eq!(
            std::fs::read_dir(&outside).unwrap().count(),
            0,
            "{what}: a file appeared outside"
        );
        assert!(!root.join("escaped").exists() && !root.join("db/escaped").exists());
    }
    // A real snapshot still restores over it.
    let info = api.ok("POST", "/collections/c/snapshots", json!({})).await;
    let name = info["name"].as_str().unwrap();
    let file = api.snapshots_dir().join("c").join(name);
    api.put_points("c", json!([{"id": 6, "vector": [6, 1, 0, 0]}]))
        .await;
    assert_eq!(count(&api, "c").await, 6);
    let (status, v) = api
        .upload(
            "/collections/c/snapshots/upload",
            &std::fs::read(file).unwrap(),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(count(&api, "c").await, 5);
}

#[tokio::test]
async fn a_recovery_url_is_not_followed_elsewhere_nor_read_without_end() {
    // 127.0.0.1 answers a redirect to 127.0.0.2, which records whether it was asked.
    let elsewhere = std::net::TcpListener::bind("127.0.0.2:0").unwrap();
    let elsewhere_addr = elsewhere.local_addr().unwrap();
    elsewhere.set_nonblocking(true).unwrap();
    let redirect = format!(
        "HTTP/1.1 302 Found\r\nLocation: http://{elsewhere_addr}/s.snapshot\r\nContent-Length: 0\r\n\r\n"
    );
    let redirecting = one_answer_server(redirect.into_bytes());
    let (api, _root) = guarded(Limits {
        max_upload_bytes: 1 << 20,
        ..Limits::default()
    });
    five_points(&api, "c").await;
    let body = json!({"location": format!("http://{redirecting}/s.snapshot"), "api_key": "secret"});
    let (status, v) = api
        .call("PUT", "/collections/c/snapshots/recover", body)
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{v}");
    assert!(
        elsewhere.accept().is_err(),
        "the redirect was followed to another host"
    );
    // An answer larger than the cap is cut off, and the collection stays.
    let mut huge = b"HTTP/1.1 200 OK\r\nContent-Length: 3145728\r\n\r\n".to_vec();
    huge.resize(huge.len() + (3 << 20), b'x');
    let serving = one_answer_server(huge);
    let body = json!({"location": format!("http://{serving}/s.snapshot")});
    let (status, v) = api
        .call("PUT", "/collections/c/snapshots/recover", body)
        .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{v}");
    assert_eq!(count(&api, "c").await, 5);
}

/// A loopback server that answers its first connection with `answer`.
fn one_answer_server(answer: Vec<u8>) -> std::net::SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        if let Ok((mut s, _)) = listener.accept() {
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let _ = s.write_all(&answer);
        }
    });
    addr
}

#[tokio::test]
async fn a_file_location_tells_nothing_of_paths_outside_the_snapshots() {
    let (api, _root) = guarded(Limits::default());
    five_points(&api, "c").await;
    let mut answers = Vec::new();
    for location in ["file:///etc/hostname", "file:///no/such/file.snapshot"] {
        let (status, v) = api
            .call(
                "PUT",
                "/collections/c/snapshots/recover",
                json!({ "location": location }),
            )
            .await;
        let message = v["status"]["error"].as_str().unwrap().to_string();
        assert!(
            !message.contains("/etc") && !message.contains("/no/such"),
            "{message}"
        );
        answers.push((status, message));
    }
    assert_eq!(
        answers[0], answers[1],
        "an existing path answered differently"
    );
}

fn request(method: &str, uri: &str, content_type: &str, body: &str) -> Request<Body> {
    Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", content_type)
        .header("host", "127.0.0.1:6333")
        .body(Body::from(body.to_string()))
        .unwrap()
}

#[tokio::test]
async fn another_site_cannot_write_through_a_browser() {
    let limits = Limits {
        cors_origins: vec!["https://app.example".into()],
        ..Limits::default()
    };
    let (api, _root) = guarded(limits);
    five_points(&api, "c").await;
    let delete = r#"{"points": [1, 2, 3, 4, 5]}"#;
    let uri = "/collections/c/points/delete?wait=true";
    // A form or a fetch without preflight: text/plain.
    let (status, _, v) = api.send(request("POST", uri, "text/plain", delete)).await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{v}");
    let batch = r#"{"operations": [{"delete": {"points": [1]}}]}"#;
    let (status, _, _) = api
        .send(request(
            "POST",
            "/collections/c/points/batch",
            "text/plain",
            batch,
        ))
        .await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    // JSON from a foreign page.
    let mut foreign = request("POST", uri, "application/json", delete);
    foreign
        .headers_mut()
        .insert("origin", "https://evil.example".parse().unwrap());
    let (status, _, v) = api.send(foreign).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{v}");
    assert_eq!(count(&api, "c").await, 5);
    // An allowed origin may, and is told so.
    let mut allowed = request(
        "POST",
        "/collections/c/points/count",
        "application/json",
        "{}",
    );
    allowed
        .headers_mut()
        .insert("origin", "https://app.example".parse().unwrap());
    let (status, headers, _) = api.send(allowed).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        headers["access-control-allow-origin"],
        "https://app.example"
    );
}

#[tokio::test]
async fn long_names_leave_room_for_every_derived_file() {
    let (api, _root) = guarded(Limits::default());
    let vectors = json!({"vectors": {"size": 4, "distance": "Dot"}});
    for len in [201, 245, 255] {
        let name = "n".repeat(len);
        api.err(
            "PUT",
            &format!("/collections/{name}"),
            vectors.clone(),
            StatusCode::BAD_REQUEST,
        )
        .await;
    }
    let name = "n".repeat(diskvec_db::MAX_NAME_BYTES);
    five_points(&api, &name).await;
    api.ok("POST", &format!("/collections/{name}/snapshots"), json!({}))
        .await;
    api.ok("DELETE", &format!("/collections/{name}"), json!({}))
        .await;
    api.ok("PUT", &format!("/collections/{name}"), vectors)
        .await;
    assert_eq!(count(&api, &name).await, 0, "the dropped points came back");
}

#[tokio::test]
async fn a_failed_drop_leaves_the_collection_serving() {
    let (api, root) = guarded(Limits::default());
    five_points(&api, "c").await;
    // A file where the drop moves the collection's directory: the move fails.
    std::fs::write(root.join("db/collections/.dropped-c"), b"in the way").unwrap();
    let (status, v) = api.call("DELETE", "/collections/c", json!({})).await;
    assert!(!status.is_success(), "{v}");
    assert_eq!(count(&api, "c").await, 5);
    api.put_points("c", json!([{"id": 9, "vector": [1, 1, 1, 1]}]))
        .await;
    assert_eq!(count(&api, "c").await, 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_taken_at_once_each_finish() {
    let (api, _root) = guarded(Limits::default());
    five_points(&api, "c").await;
    let api = Arc::new(api);
    let takes: Vec<_> = (0..4)
        .map(|_| {
            let api = Arc::clone(&api);
            tokio::spawn(async move {
                api.call("POST", "/collections/c/snapshots", json!({}))
                    .await
            })
        })
        .collect();
    let mut names = Vec::new();
    for t in takes {
        let (status, v) = t.await.unwrap();
        assert_eq!(status, StatusCode::OK, "{v}");
        names.push(v["result"]["name"].as_str().unwrap().to_string());
    }
    names.sort();
    names.dedup();
    assert_eq!(names.len(), 4, "{names:?}");
    let listed = api.ok("GET", "/collections/c/snapshots", json!({})).await;
    assert_eq!(listed.as_array().unwrap().len(), 4);
}

#[tokio::test]
async fn the_read_only_key_reads_facets_groups_and_matrices() {
    let keys = diskvec_server::Keys {
        api_key: Some("writer".into()),
        read_only_key: Some("reader".into()),
    };
    let api = Api::new(keys);
    let create = json!({"vectors": {"size": 4, "distance": "Dot"}});
    let body = serde_json::to_vec(&create).unwrap();
    let (status, _) = api.raw("PUT", "/collections/c", body, Some("writer")).await;
    assert_eq!(status, StatusCode::OK);
    for (uri, body) in [
        ("/collections/c/facet", json!({"key": "k"})),
        (
            "/collections/c/points/query/groups",
            json!({"query": [1, 0, 0, 0], "group_by": "k"}),
        ),
        (
            "/collections/c/points/search/matrix/pairs",
            json!({"sample": 2}),
        ),
    ] {
        let body = serde_json::to_vec(&body).unwrap();
        let (status, v) = api.raw("POST", uri, body, Some("reader")).await;
        assert_ne!(status, StatusCode::FORBIDDEN, "{uri}: {v}");
        assert_ne!(status, StatusCode::UNAUTHORIZED, "{uri}: {v}");
    }
    let delete = serde_json::to_vec(&json!({"points": [1]})).unwrap();
    let (status, _) = api
        .raw(
            "POST",
            "/collections/c/points/delete",
            delete,
            Some("reader"),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn a_cosine_vector_of_huge_components_is_kept_whole() {
    let api = Api::new(Default::default());
    let create = json!({"vectors": {"size": 4, "distance": "Cosine"}});
    api.ok("PUT", "/collections/c", create).await;
    api.put_points("c", json!([{"id": 1, "vector": [3e38, 3e38, 0, 0]}]))
        .await;
    let got = api
        .ok(
            "POST",
            "/collections/c/points",
            json!({"ids": [1], "with_vector": true}),
        )
        .await;
    let v = got[0]["vector"].as_array().unwrap();
    let first = v[0].as_f64().unwrap();
    assert!(
        (first - std::f64::consts::FRAC_1_SQRT_2).abs() < 1e-5,
        "{v:?}"
    );
}

/// A server on a loopback socket with `limits`, stopped when the returned sender drops.
async fn listening(limits: Limits) -> (std::net::SocketAddr, tokio::sync::oneshot::Sender<()>) {
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(diskvec_db::Database::open(&dir.path().join("db")).unwrap());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let _dir = dir;
        let shutdown = async move {
            let _ = stopped.await;
        };
        diskvec_server::serve(db, Default::default(), limits, None, listener, shutdown)
            .await
            .unwrap();
    });
    (addr, stop)
}

/// Whether the server closed `s` within `within` (reads until end of stream or error).
fn closed_within(s: &mut std::net::TcpStream, within: Duration) -> bool {
    s.set_read_timeout(Some(within)).unwrap();
    let mut buf = [0u8; 4096];
    let started = Instant::now();
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return started.elapsed() < within,
        }
    }
}

fn answer_of(s: &mut std::net::TcpStream) -> String {
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut buf = vec![0u8; 4096];
    let n = s.read(&mut buf).unwrap_or(0);
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_silent_and_oversized_clients_are_cut_off() {
    let limits = Limits {
        header_read: Duration::from_secs(1),
        body_read: Duration::from_secs(1),
        max_body_bytes: 1 << 20,
        body_bytes_in_flight: 1 << 20,
        max_requests: 2,
        ..Limits::default()
    };
    let (addr, _stop) = listening(limits).await;
    tokio::task::spawn_blocking(move || {
        let connect = || std::net::TcpStream::connect(addr).unwrap();
        // Silent: closed after the header-read time.
        let mut silent = connect();
        assert!(closed_within(&mut silent, Duration::from_secs(5)));
        // Headers dripped a line every 300 ms: closed, though bytes keep coming.
        let mut drip = connect();
        drip.write_all(b"GET /collections HTTP/1.1\r\n").unwrap();
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(300));
            if drip.write_all(b"X-Slow: 1\r\n").is_err() {
                break;
            }
        }
        assert!(closed_within(&mut drip, Duration::from_secs(1)));
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the drip was held"
        );
        // A body that does not come: 408.
        let mut slow_body = connect();
        slow_body
            .write_all(
                b"POST /collections/x/points/count HTTP/1.1\r\nHost: a\r\n\
                  Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{",
            )
            .unwrap();
        assert!(answer_of(&mut slow_body).starts_with("HTTP/1.1 408"));
        // A body larger than allowed: 413 before it is read.
        let mut big = connect();
        big.write_all(
            b"POST /collections/x/points/count HTTP/1.1\r\nHost: a\r\n\
              Content-Type: application/json\r\nContent-Length: 2000000\r\n\r\n",
        )
        .unwrap();
        assert!(answer_of(&mut big).starts_with("HTTP/1.1 413"));
        // Past the requests in flight: 503 while two bodies are awaited.
        let mut held: Vec<_> = (0..2)
            .map(|_| {
                let mut s = connect();
                s.write_all(
                    b"POST /collections/x/points/count HTTP/1.1\r\nHost: a\r\n\
                      Content-Type: application/json\r\nContent-Length: 10\r\n\r\n",
                )
                .unwrap();
                s
            })
            .collect();
        std::thread::sleep(Duration::from_millis(200));
        let mut third = connect();
        third
            .write_all(b"GET /collections HTTP/1.1\r\nHost: a\r\n\r\n")
            .unwrap();
        assert!(answer_of(&mut third).starts_with("HTTP/1.1 503"));
        for s in &mut held {
            assert!(answer_of(s).starts_with("HTTP/1.1 408"));
        }
        let mut after = connect();
        after
            .write_all(b"GET /collections HTTP/1.1\r\nHost: a\r\n\r\n")
            .unwrap();
        assert!(answer_of(&mut after).starts_with("HTTP/1.1 200"));
    })
    .await
    .unwrap();
}
