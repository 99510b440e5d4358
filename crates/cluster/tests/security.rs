//! The cluster's defences against a party that reaches etcd or NATS: log messages without
//! this cluster's tag are refused, etcd's auth and NATS's credentials are used and a wrong
//! password fails a node's start, and both are reached over TLS with the operator's CA.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{installed, start_etcd, start_etcd_with, start_nats, start_nats_with, test_secret};
use diskvec_cluster::log::{Entry, ID_HEADER, TAG_HEADER, TIME_HEADER};
use diskvec_cluster::node::{check_secret, SECRET_CHECK_KEY};
use diskvec_cluster::{
    ClusterNode, ClusterSecret, Etcd, EtcdSettings, Log, LogSettings, NodeInfo, TlsFiles,
};
use futures_util::StreamExt;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn other_secret() -> ClusterSecret {
    ClusterSecret::new(b"another cluster's secret, 32 B..").unwrap()
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// The first `n` entries of stream `name`, each within 5 s.
async fn entries(log: &Log, name: &str, n: usize) -> Vec<(u64, Entry)> {
    let mut follow = Box::pin(log.follow(name, 1).await.unwrap());
    let mut out = Vec::new();
    for _ in 0..n {
        let item = tokio::time::timeout(Duration::from_secs(5), follow.next())
            .await
            .expect("a message within 5 s")
            .unwrap()
            .unwrap();
        out.push(item);
    }
    out
}

fn refused(entry: &Entry, why: &str) -> bool {
    matches!(entry, Entry::Refused(w) if w.contains(why))
}

#[test]
fn the_log_refuses_messages_not_appended_by_a_node_of_the_cluster() {
    if !installed("nats-server") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (_nats, url) = start_nats(dir.path());
    runtime().block_on(async {
        let settings = LogSettings {
            servers: url.clone(),
            ..Default::default()
        };
        let node = Log::connect(&settings, test_secret()).await.unwrap();
        let stranger = Log::connect(&settings, other_secret()).await.unwrap();
        // Anyone who reaches NATS: a plain client, publishing into the streams.
        let raw = async_nats::connect(url.as_str()).await.unwrap();
        let js = async_nats::jetstream::new(raw);
        let publish = |stream: &'static str, headers: async_nats::HeaderMap, body: &'static str| {
            let js = js.clone();
            async move {
                js.publish_with_headers(stream, headers, Bytes::from(body))
                    .await
                    .unwrap()
                    .await
                    .unwrap()
            }
        };
        for s in ["dv_s_1_0", "dv_s_1_1"] {
            node.ensure_stream(s).await.unwrap();
        }
        assert_eq!(node.publish("dv_s_1_0", "own".into()).await.unwrap(), 1);
        let own = js
            .get_stream("dv_s_1_0")
            .await
            .unwrap()
            .get_raw_message(1)
            .await
            .unwrap();
        // 2: no tag at all.
        publish("dv_s_1_0", async_nats::HeaderMap::new(), "bare").await;
        // 3: a tag under another secret.
        assert_eq!(
            stranger
                .publish("dv_s_1_0", "stranger".into())
                .await
                .unwrap(),
            3
        );
        // 4: a node's message under another id.
        let mut other_id = own.headers.clone();
        other_id.insert(async_nats::header::NATS_MESSAGE_ID, "another-id");
        publish("dv_s_1_0", other_id, "own").await;
        // The node's message again, or its id and tag on other bytes: dropped by JetStream
        // for its id (a replay within the duplicate window); into another stream: refused
        // there (the tag names the stream).
        let again = publish("dv_s_1_0", own.headers.clone(), "own").await;
        let changed = publish("dv_s_1_0", own.headers.clone(), "changed").await;
        assert!(again.duplicate && changed.duplicate);
        publish("dv_s_1_1", own.headers.clone(), "own").await;
        // 5: rightly signed, but stamped two minutes before it was stored (a replay once the
        // duplicate window has passed).
        let old = now_ms() - 120_000;
        let mut stale = async_nats::HeaderMap::new();
        stale.insert(ID_HEADER, "old-1");
        stale.insert(TIME_HEADER, old.to_string());
        stale.insert(
            TAG_HEADER,
            test_secret().sign_log("dv_s_1_0", "old-1", old, b"old"),
        );
        publish("dv_s_1_0", stale, "old").await;
        assert_eq!(node.publish("dv_s_1_0", "own 2".into()).await.unwrap(), 6);

        let got = entries(&node, "dv_s_1_0", 6).await;
        let seqs: Vec<u64> = got.iter().map(|(s, _)| *s).collect();
        assert_eq!(seqs, [1, 2, 3, 4, 5, 6]);
        assert_eq!(got[0].1, Entry::Signed("own".into()));
        assert!(refused(&got[1].1, "no tag"), "{:?}", got[1]);
        assert!(refused(&got[2].1, "not this cluster's"), "{:?}", got[2]);
        assert!(refused(&got[3].1, "not this cluster's"), "{:?}", got[3]);
        assert!(refused(&got[4].1, "away from its stamp"), "{:?}", got[4]);
        assert_eq!(got[5].1, Entry::Signed("own 2".into()));
        let moved = entries(&node, "dv_s_1_1", 1).await;
        assert!(refused(&moved[0].1, "not this cluster's"), "{moved:?}");
        // The stranger's view: the node's messages are not its cluster's.
        let theirs = entries(&stranger, "dv_s_1_0", 3).await;
        assert!(refused(&theirs[0].1, "not this cluster's"));
        assert_eq!(theirs[2].1, Entry::Signed("stranger".into()));
    });
}

fn node(id: &str) -> NodeInfo {
    NodeInfo {
        id: id.into(),
        url: format!("http://{id}:1"),
    }
}

fn post(url: &str, path: &str, body: serde_json::Value) {
    ureq::post(&format!("{url}{path}"))
        .send_json(body)
        .unwrap_or_else(|e| panic!("{path}: {e}"));
}

#[test]
fn the_secret_is_checked_in_etcd_and_never_kept_there() {
    if !installed("etcd") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (_etcd, url) = start_etcd(dir.path());
    let etcd = Etcd::new(vec![url.clone()]);
    // What a version before kept in clear is removed.
    etcd.put("/diskvec-internal/secret", b"0123456789abcdef", None)
        .unwrap();
    check_secret(&etcd, &test_secret()).unwrap();
    check_secret(&etcd, &test_secret()).unwrap();
    let err = check_secret(&etcd, &other_secret()).unwrap_err();
    assert!(err.to_string().contains("DISKVEC_CLUSTER_SECRET"), "{err}");
    let a = ClusterNode::join(etcd, node("a")).unwrap();
    // Every key etcd holds (from "\0" to the end): none is the secret, or what a node sends.
    let all: serde_json::Value = ureq::post(&format!("{url}/v3/kv/range"))
        .send_json(serde_json::json!({"key": "AA==", "range_end": "AA=="}))
        .unwrap()
        .into_json()
        .unwrap();
    let decode = |v: &serde_json::Value| {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD
            .decode(v.as_str().unwrap_or(""))
            .unwrap()
    };
    let kvs: Vec<(Vec<u8>, Vec<u8>)> = all["kvs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|kv| (decode(&kv["key"]), decode(&kv["value"])))
        .collect();
    let keys: Vec<String> = kvs
        .iter()
        .map(|(k, _)| String::from_utf8_lossy(k).into())
        .collect();
    assert!(
        keys.iter().any(|k| k.starts_with("/diskvec/nodes/")),
        "{keys:?}"
    );
    assert!(keys.iter().any(|k| k == SECRET_CHECK_KEY), "{keys:?}");
    assert!(
        !keys.iter().any(|k| k == "/diskvec-internal/secret"),
        "{keys:?}"
    );
    let secret = b"a test secret of 32 bytes.......";
    let token = test_secret().node_token().as_bytes().to_vec();
    for (key, value) in &kvs {
        for needle in [&secret[..], &token] {
            let holds = |b: &[u8]| b.windows(needle.len()).any(|w| w == needle);
            assert!(
                !holds(key) && !holds(value),
                "{} holds a secret",
                String::from_utf8_lossy(key)
            );
        }
    }
    assert!(a.etcd.get("/diskvec-internal/secret").unwrap().is_none());
    a.leave();
}

#[test]
fn etcd_with_auth_takes_its_user_and_refuses_a_wrong_password() {
    if !installed("etcd") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // Tokens lapse after a second: a node must take new ones as it goes.
    let flags = ["--auth-token", "simple", "--auth-token-ttl", "1"].map(String::from);
    let (_etcd, url) = start_etcd_with(dir.path(), "http", &flags);
    let plain = Etcd::new(vec![url.clone()]);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !plain.health().iter().all(|(_, ok)| *ok) {
        assert!(Instant::now() < deadline, "etcd did not become healthy");
        std::thread::sleep(Duration::from_millis(100));
    }
    post(
        &url,
        "/v3/auth/user/add",
        serde_json::json!({"name": "root", "password": "rootpw"}),
    );
    post(
        &url,
        "/v3/auth/user/grant",
        serde_json::json!({"user": "root", "role": "root"}),
    );
    post(&url, "/v3/auth/enable", serde_json::json!({}));
    assert!(plain.create("/t/x", b"1").is_err(), "no credentials");
    let settings = |password: &str| EtcdSettings {
        endpoints: url.replace("http://", "etcd://"),
        user: Some("root".into()),
        password: Some(password.into()),
        ..Default::default()
    };
    let err = Etcd::connect(&settings("wrong")).unwrap_err().to_string();
    assert!(err.contains("--etcd-user"), "{err}");
    // A client idle past its token's life takes a new one on its next call.
    let idle = Etcd::connect(&settings("rootpw")).unwrap();
    std::thread::sleep(Duration::from_millis(2500));
    assert!(idle.create("/t/idle", b"1").unwrap());
    let etcd = Etcd::connect(&settings("rootpw")).unwrap();
    check_secret(&etcd, &test_secret()).unwrap();
    let a = ClusterNode::join(etcd, node("a")).unwrap();
    std::thread::sleep(Duration::from_millis(2500));
    assert!(
        a.view_age() < Duration::from_secs(1),
        "the view is read still"
    );
    assert!(a.etcd.create("/t/y", b"1").unwrap());
    assert_eq!(a.etcd.get("/t/y").unwrap().unwrap().value, b"1");
    a.leave();
}

#[test]
fn nats_with_a_user_takes_its_password_and_refuses_a_wrong_one() {
    if !installed("nats-server") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let flags = ["--user", "diskvec", "--pass", "natspw"].map(String::from);
    let (_nats, port) = start_nats_with(dir.path(), &flags);
    runtime().block_on(async {
        let settings = |user: Option<&str>, password: Option<&str>| LogSettings {
            servers: format!("nats://127.0.0.1:{port}"),
            user: user.map(String::from),
            password: password.map(String::from),
            ..Default::default()
        };
        let err = Log::connect(&settings(Some("diskvec"), Some("wrong")), test_secret())
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("--log-user"), "{err}");
        let err = Log::connect(&settings(None, None), test_secret())
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("no credentials"), "{err}");
        let log = Log::connect(&settings(Some("diskvec"), Some("natspw")), test_secret())
            .await
            .unwrap();
        log.ensure_stream("dv_u_1_0").await.unwrap();
        assert_eq!(log.publish("dv_u_1_0", "m".into()).await.unwrap(), 1);
        let got = entries(&log, "dv_u_1_0", 1).await;
        assert_eq!(got[0].1, Entry::Signed("m".into()));
    });
}

/// A CA, and a certificate it signed for 127.0.0.1 that serves as both server and client
/// certificate: (ca, cert, key), made with the openssl command. `None` where it is missing.
fn certificates(dir: &Path) -> Option<(PathBuf, PathBuf, PathBuf)> {
    if Command::new("openssl").arg("version").output().is_err() {
        if std::env::var_os("DISKVEC_REQUIRE_CLUSTER").is_some() {
            panic!("openssl is not installed, and DISKVEC_REQUIRE_CLUSTER is set");
        }
        eprintln!("skipped: no openssl command to make certificates with");
        return None;
    }
    let p = |name: &str| dir.join(name).to_str().unwrap().to_string();
    std::fs::write(
        dir.join("ext"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth,clientAuth\n",
    )
    .unwrap();
    let steps: [Vec<String>; 3] = [
        vec![
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=diskvec test CA",
        ]
        .into_iter()
        .map(String::from)
        .chain(
            [
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
            ]
            .map(String::from),
        )
        .chain(["-keyout".into(), p("ca.key"), "-out".into(), p("ca.pem")])
        .collect(),
        [
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=127.0.0.1",
        ]
        .map(String::from)
        .into_iter()
        .chain([
            "-keyout".into(),
            p("node.key"),
            "-out".into(),
            p("node.csr"),
        ])
        .collect(),
        ["x509", "-req", "-days", "1", "-CAcreateserial"]
            .map(String::from)
            .into_iter()
            .chain(
                [
                    "-in",
                    &p("node.csr"),
                    "-CA",
                    &p("ca.pem"),
                    "-CAkey",
                    &p("ca.key"),
                ]
                .map(String::from),
            )
            .chain(["-extfile", &p("ext"), "-out", &p("node.pem")].map(String::from))
            .collect(),
    ];
    for args in steps {
        let out = Command::new("openssl").args(&args).output().unwrap();
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Some((
        dir.join("ca.pem"),
        dir.join("node.pem"),
        dir.join("node.key"),
    ))
}

#[test]
fn etcd_and_nats_over_tls_with_client_certificates() {
    if !installed("etcd") || !installed("nats-server") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some((ca, cert, key)) = certificates(dir.path()) else {
        return;
    };
    let s = |p: &Path| p.to_str().unwrap().to_string();
    let tls = TlsFiles {
        ca: Some(ca.clone()),
        cert: Some(cert.clone()),
        key: Some(key.clone()),
    };
    // etcd asking clients for a certificate of its CA.
    let etcd_flags = [
        "--cert-file".into(),
        s(&cert),
        "--key-file".into(),
        s(&key),
        "--client-cert-auth".into(),
        "--trusted-ca-file".into(),
        s(&ca),
    ];
    let (_etcd, url) = start_etcd_with(dir.path(), "https", &etcd_flags);
    let etcd = Etcd::connect(&EtcdSettings {
        endpoints: url.clone(),
        tls: tls.clone(),
        ..Default::default()
    })
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match etcd.create("/t/tls", b"1") {
            Ok(created) => break assert!(created),
            Err(e) => assert!(Instant::now() < deadline, "etcd over TLS: {e}"),
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    // Without the CA, the server's certificate is not trusted.
    let untrusting = Etcd::connect(&EtcdSettings {
        endpoints: url.clone(),
        ..Default::default()
    })
    .unwrap();
    assert!(untrusting.get("/t/tls").is_err());
    let plain = Etcd::connect(&EtcdSettings {
        endpoints: url.replace("https://", "http://"),
        tls: tls.clone(),
        ..Default::default()
    });
    assert!(plain.unwrap_err().to_string().contains("https://"));

    let nats_flags = [
        "--tlsverify".into(),
        "--tlscert".into(),
        s(&cert),
        "--tlskey".into(),
        s(&key),
        "--tlscacert".into(),
        s(&ca),
    ];
    let (_nats, port) = start_nats_with(dir.path(), &nats_flags);
    runtime().block_on(async {
        let log = Log::connect(
            &LogSettings {
                servers: format!("tls://127.0.0.1:{port}"),
                tls: tls.clone(),
                ..Default::default()
            },
            test_secret(),
        )
        .await
        .unwrap();
        log.ensure_stream("dv_tls_1_0").await.unwrap();
        assert_eq!(log.publish("dv_tls_1_0", "m".into()).await.unwrap(), 1);
        assert_eq!(
            entries(&log, "dv_tls_1_0", 1).await[0].1,
            Entry::Signed("m".into())
        );
        let err = Log::connect(
            &LogSettings {
                servers: format!("nats://127.0.0.1:{port}"),
                ..Default::default()
            },
            test_secret(),
        )
        .await
        .unwrap_err()
        .to_string();
        assert!(err.contains("TLS"), "{err}");
    });
}
