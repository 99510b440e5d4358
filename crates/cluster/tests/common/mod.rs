//! Helpers of the cluster layer's tests: etcd and NATS servers started on free loopback
//! ports (Debian's `etcd-server` and `nats-server`; CI installs them and sets
//! DISKVEC_REQUIRE_CLUSTER=1 so that their absence fails instead of skipping).
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use diskvec_cluster::Etcd;

pub struct Process(pub Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn installed(bin: &str) -> bool {
    let found = Command::new(bin)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    if !found && std::env::var_os("DISKVEC_REQUIRE_CLUSTER").is_some() {
        panic!("{bin} is not installed, and DISKVEC_REQUIRE_CLUSTER is set");
    }
    if !found {
        eprintln!("skipped: {bin} is not installed (apt-get install etcd-server nats-server)");
    }
    found
}

/// An etcd member with `extra` flags, serving clients at `scheme://127.0.0.1:port`; its URL
/// once it accepts connections.
pub fn start_etcd_with(dir: &Path, scheme: &str, extra: &[String]) -> (Process, String) {
    let (client, peer) = (free_port(), free_port());
    let url = format!("{scheme}://127.0.0.1:{client}");
    let child = Command::new("etcd")
        .args([
            "--name",
            "e0",
            "--data-dir",
            dir.join("etcd").to_str().unwrap(),
            "--listen-client-urls",
            &url,
            "--advertise-client-urls",
            &url,
            "--listen-peer-urls",
            &format!("http://127.0.0.1:{peer}"),
            "--initial-advertise-peer-urls",
            &format!("http://127.0.0.1:{peer}"),
            "--initial-cluster",
            &format!("e0=http://127.0.0.1:{peer}"),
        ])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting etcd");
    let process = Process(child);
    wait_listening(client, "etcd");
    (process, url)
}

/// A plain etcd member, healthy.
pub fn start_etcd(dir: &Path) -> (Process, String) {
    let (process, url) = start_etcd_with(dir, "http", &[]);
    let etcd = Etcd::new(vec![url.clone()]);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !etcd.health().iter().all(|(_, ok)| *ok) {
        assert!(Instant::now() < deadline, "etcd did not become healthy");
        std::thread::sleep(Duration::from_millis(100));
    }
    (process, url)
}

fn wait_listening(port: u16, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "{what} did not listen");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A JetStream nats-server with `extra` flags; its client port once it listens.
pub fn start_nats_with(dir: &Path, extra: &[String]) -> (Process, u16) {
    let port = free_port();
    let store = dir.join("nats");
    let child = Command::new("nats-server")
        .args([
            "-a",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-js",
            "-sd",
            store.to_str().unwrap(),
        ])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting nats-server");
    let process = Process(child);
    wait_listening(port, "nats-server");
    (process, port)
}

pub fn start_nats(dir: &Path) -> (Process, String) {
    let (process, port) = start_nats_with(dir, &[]);
    (process, format!("nats://127.0.0.1:{port}"))
}

/// The secret the tests' nodes share.
pub fn test_secret() -> diskvec_cluster::ClusterSecret {
    diskvec_cluster::ClusterSecret::new(b"a test secret of 32 bytes.......").unwrap()
}
