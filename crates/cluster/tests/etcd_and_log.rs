//! The cluster layer against real etcd and NATS servers, started here on free loopback
//! ports (Debian's `etcd-server` and `nats-server`; CI installs them and sets
//! DISKVEC_REQUIRE_CLUSTER=1 so that their absence fails instead of skipping).

mod common;

use std::time::{Duration, Instant};

use common::{free_port, installed, start_etcd, start_nats, test_secret};
use diskvec_cluster::log::Entry;
use diskvec_cluster::{ClusterNode, Etcd, Log, LogSettings, NodeInfo};
use futures_util::StreamExt;

#[test]
fn etcd_keys_leases_and_compare_and_swap() {
    if !installed("etcd") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (_etcd, url) = start_etcd(dir.path());
    // A dead member first: calls pass over it to the live one.
    let etcd = Etcd::new(vec![format!("http://127.0.0.1:{}", free_port()), url]);
    assert!(etcd.create("/t/a", b"1").unwrap());
    assert!(
        !etcd.create("/t/a", b"2").unwrap(),
        "create of an existing key"
    );
    let a = etcd.get("/t/a").unwrap().unwrap();
    assert_eq!(a.value, b"1");
    assert!(etcd.compare_and_swap("/t/a", a.mod_revision, b"3").unwrap());
    assert!(
        !etcd.compare_and_swap("/t/a", a.mod_revision, b"4").unwrap(),
        "a stale revision must lose"
    );
    etcd.put("/t/b", b"x", None).unwrap();
    etcd.put("/u/c", b"y", None).unwrap();
    let (keys, revision) = etcd.range_prefix("/t/").unwrap();
    assert!(revision > 0);
    let names: Vec<_> = keys.iter().map(|k| k.key.as_str()).collect();
    assert_eq!(names, ["/t/a", "/t/b"]);
    assert_eq!(keys[0].value, b"3");
    let latest = etcd.get("/t/a").unwrap().unwrap();
    assert!(!etcd.delete_if("/t/a", a.mod_revision).unwrap());
    assert!(etcd.delete_if("/t/a", latest.mod_revision).unwrap());
    assert_eq!(etcd.get("/t/a").unwrap(), None);

    // A key under a lease lives while the lease is kept alive and goes when it lapses.
    let lease = etcd.grant_lease(2).unwrap();
    assert!(etcd.create_with_lease("/t/leased", b"v", lease).unwrap());
    for _ in 0..3 {
        std::thread::sleep(Duration::from_millis(900));
        assert!(etcd.keep_alive(lease).unwrap().is_some());
    }
    assert!(etcd.get("/t/leased").unwrap().is_some(), "kept alive");
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(etcd.get("/t/leased").unwrap(), None, "lapsed");
    assert_eq!(etcd.keep_alive(lease).unwrap(), None);
}

#[test]
fn nodes_see_each_other_join_and_leave() {
    if !installed("etcd") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (_etcd, url) = start_etcd(dir.path());
    let node = |id: &str| NodeInfo {
        id: id.into(),
        url: format!("http://{id}:1"),
    };
    let a = ClusterNode::join(Etcd::new(vec![url.clone()]), node("a")).unwrap();
    let b = ClusterNode::join(Etcd::new(vec![url.clone()]), node("b")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while a.view().nodes.len() < 2 {
        assert!(Instant::now() < deadline, "a did not see b join");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(a.view().is_alive("b") && b.view().is_alive("a"));
    // A second process with a taken id is refused (after waiting out a lapsing lease).
    let err = ClusterNode::join(Etcd::new(vec![url.clone()]), node("b")).unwrap_err();
    assert!(err.to_string().contains("--node-id"), "{err}");
    b.leave();
    let deadline = Instant::now() + Duration::from_secs(5);
    while a.view().is_alive("b") {
        assert!(Instant::now() < deadline, "a did not see b leave");
        std::thread::sleep(Duration::from_millis(50));
    }
    a.leave();
}

#[test]
fn the_log_keeps_order_and_resumes_from_a_sequence() {
    if !installed("nats-server") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (_nats, url) = start_nats(dir.path());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let settings = LogSettings {
            servers: url,
            ..Default::default()
        };
        let log = Log::connect(&settings, test_secret()).await.unwrap();
        log.ensure_stream("dv_t_1_0").await.unwrap();
        log.ensure_stream("dv_t_1_0").await.unwrap();
        for i in 1..=50u64 {
            let seq = log
                .publish("dv_t_1_0", format!("m{i}").into_bytes().into())
                .await
                .unwrap();
            assert_eq!(seq, i);
        }
        assert_eq!(log.last_sequence("dv_t_1_0").await.unwrap(), 50);
        let mut follow = Box::pin(log.follow("dv_t_1_0", 41).await.unwrap());
        for want in 41..=50u64 {
            let (seq, entry) = tokio::time::timeout(Duration::from_secs(5), follow.next())
                .await
                .expect("a message within 5 s")
                .unwrap()
                .unwrap();
            let body = format!("m{want}").into_bytes();
            assert_eq!((seq, body_of(entry)), (want, body));
        }
        // A message published while following arrives next.
        log.publish("dv_t_1_0", "late".as_bytes().to_vec().into())
            .await
            .unwrap();
        let (seq, entry) = tokio::time::timeout(Duration::from_secs(5), follow.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!((seq, body_of(entry)), (51, b"late".to_vec()));
        log.delete_stream("dv_t_1_0").await.unwrap();
        log.delete_stream("dv_t_1_0").await.unwrap();
        assert!(log.last_sequence("dv_t_1_0").await.is_err());
    });
}

fn body_of(entry: Entry) -> Vec<u8> {
    match entry {
        Entry::Signed(body) => body.to_vec(),
        Entry::Refused(why) => panic!("a node's own message was refused: {why}"),
    }
}
