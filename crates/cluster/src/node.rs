//! This node in the cluster: its key in etcd under a lease it keeps alive (a node that dies
//! or hangs is gone within the lease's TTL), and its view of the cluster, read again every
//! `VIEW_EVERY` and handed out through a watch channel.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::etcd::Etcd;
use crate::map::{ClusterView, NodeInfo, NODES_PREFIX, ROOT_PREFIX};
use crate::secret::ClusterSecret;
use crate::ClusterError;

/// Whether `secret` is the one the cluster's nodes run with: the first node records its
/// check in etcd, the others compare theirs. A node with another secret would refuse every
/// log message of the others (and they its), its replicas drifting from theirs: it is
/// stopped at its start instead. Removes the secret a version before this one kept in etcd.
pub fn check_secret(etcd: &Etcd, secret: &ClusterSecret) -> Result<(), ClusterError> {
    if let Some(legacy) = etcd.get(LEGACY_SECRET_KEY)? {
        etcd.delete_if(LEGACY_SECRET_KEY, legacy.mod_revision)?;
        log::warn!("cluster: removed the cluster secret an older version kept in etcd in clear");
    }
    let check = secret.check().as_bytes();
    if etcd.create(SECRET_CHECK_KEY, check)? {
        return Ok(());
    }
    let kept = etcd.get(SECRET_CHECK_KEY)?.ok_or_else(|| {
        ClusterError::Etcd(format!(
            "{SECRET_CHECK_KEY} vanished from etcd; start again"
        ))
    })?;
    if kept.value != check {
        return Err(ClusterError::Config(format!(
            "this node's cluster secret is not the one the cluster's nodes run with (etcd's {SECRET_CHECK_KEY}): give every node the same --cluster-secret-file or DISKVEC_CLUSTER_SECRET"
        )));
    }
    Ok(())
}

/// A node's key outlives it by at most this (a SIGKILLed node is seen as gone then).
pub const LEASE_TTL_SECS: u64 = 5;
const KEEP_ALIVE_EVERY: Duration = Duration::from_secs(1);
const VIEW_EVERY: Duration = Duration::from_millis(250);
/// A one-way function of the cluster's secret ([`ClusterSecret::check`]): a node started
/// with another secret is refused (outside the keys the view reads).
pub const SECRET_CHECK_KEY: &str = "/diskvec-internal/secret-check";
/// Where versions before the secret was given at start kept it, in clear: removed.
const LEGACY_SECRET_KEY: &str = "/diskvec-internal/secret";

pub struct ClusterNode {
    pub etcd: Arc<Etcd>,
    pub me: NodeInfo,
    view: watch::Receiver<Arc<ClusterView>>,
    stop: Arc<AtomicBool>,
    threads: std::sync::Mutex<Vec<JoinHandle<()>>>,
    lease: Arc<std::sync::atomic::AtomicI64>,
    /// When the view was last read from etcd (ms since `started`).
    read_at: Arc<AtomicU64>,
    started: Instant,
}

impl std::fmt::Debug for ClusterNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterNode").field("me", &self.me).finish()
    }
}

/// Puts this node's key under a fresh lease. A key of the same id held by another lease (the
/// same node before a crash, whose lease has not lapsed yet; or another live process with
/// this id) is waited out for up to two TTLs, then refused.
fn register(etcd: &Etcd, me: &NodeInfo) -> Result<i64, ClusterError> {
    let key = format!("{NODES_PREFIX}{}", me.id);
    let value = serde_json::to_vec(me).expect("a node record serializes");
    let deadline = Instant::now() + Duration::from_secs(2 * LEASE_TTL_SECS + 1);
    loop {
        let lease = etcd.grant_lease(LEASE_TTL_SECS)?;
        if etcd.create_with_lease(&key, &value, lease)? {
            return Ok(lease);
        }
        let _ = etcd.revoke(lease);
        if Instant::now() >= deadline {
            let holder = etcd
                .get(&key)?
                .and_then(|kv| serde_json::from_slice::<NodeInfo>(&kv.value).ok())
                .map(|n| n.url)
                .unwrap_or_default();
            return Err(ClusterError::Config(format!(
                "node id {:?} is held by a live node ({holder}); give each node its own --node-id",
                me.id
            )));
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

impl ClusterNode {
    /// Registers `me` and reads the cluster once; keeps both up to date on two threads
    /// until [`Self::leave`].
    pub fn join(etcd: Etcd, me: NodeInfo) -> Result<Arc<Self>, ClusterError> {
        let etcd = Arc::new(etcd);
        let lease = register(&etcd, &me)?;
        let (keys, revision) = etcd.range_prefix(ROOT_PREFIX)?;
        let (tx, rx) = watch::channel(Arc::new(ClusterView::from_keys(&keys, revision)));
        let stop = Arc::new(AtomicBool::new(false));
        let lease = Arc::new(std::sync::atomic::AtomicI64::new(lease));
        let keeper = {
            let (etcd, me, stop, lease) = (
                Arc::clone(&etcd),
                me.clone(),
                Arc::clone(&stop),
                Arc::clone(&lease),
            );
            std::thread::Builder::new()
                .name("diskvec-lease".into())
                .spawn(move || keep_registered(&etcd, &me, &stop, &lease))
                .map_err(|e| ClusterError::Io(format!("starting the lease thread: {e}")))?
        };
        let started = Instant::now();
        let read_at = Arc::new(AtomicU64::new(0));
        let reader = {
            let (etcd, stop, read_at) =
                (Arc::clone(&etcd), Arc::clone(&stop), Arc::clone(&read_at));
            std::thread::Builder::new()
                .name("diskvec-view".into())
                .spawn(move || keep_reading(&etcd, &tx, &stop, &read_at, started))
                .map_err(|e| ClusterError::Io(format!("starting the view thread: {e}")))?
        };
        Ok(Arc::new(Self {
            etcd,
            me,
            view: rx,
            stop,
            threads: std::sync::Mutex::new(vec![keeper, reader]),
            lease,
            read_at,
            started,
        }))
    }

    /// The cluster as last read.
    pub fn view(&self) -> Arc<ClusterView> {
        Arc::clone(&self.view.borrow())
    }

    /// How long ago the view was last read from etcd: past the lease TTL, this node may have
    /// been declared gone by the others, and its view may be stale.
    pub fn view_age(&self) -> Duration {
        let now = self.started.elapsed();
        now.saturating_sub(Duration::from_millis(self.read_at.load(Ordering::Relaxed)))
    }

    /// A receiver that wakes on every change of the view.
    pub fn watch(&self) -> watch::Receiver<Arc<ClusterView>> {
        self.view.clone()
    }

    /// Stops keeping the lease and reading, and revokes the lease so the others see this
    /// node leave at once rather than after the TTL.
    pub fn leave(&self) {
        self.stop.store(true, Ordering::Relaxed);
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|p| p.into_inner()));
        for t in threads {
            let _ = t.join();
        }
        let _ = self.etcd.revoke(self.lease.load(Ordering::Relaxed));
    }
}

fn keep_registered(
    etcd: &Etcd,
    me: &NodeInfo,
    stop: &AtomicBool,
    lease: &std::sync::atomic::AtomicI64,
) {
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(KEEP_ALIVE_EVERY);
        match etcd.keep_alive(lease.load(Ordering::Relaxed)) {
            Ok(Some(_)) => {
                // The key can go while the lease lives (removed by hand): put it back.
                let key = format!("{NODES_PREFIX}{}", me.id);
                let held = lease.load(Ordering::Relaxed);
                match etcd.get(&key) {
                    Ok(Some(kv)) if kv.lease == held => {}
                    Ok(_) => {
                        log::warn!(
                            "cluster: the key of node {} is gone; putting it back",
                            me.id
                        );
                        let value = serde_json::to_vec(me).expect("a node record serializes");
                        if let Err(e) = etcd.put(&key, &value, Some(held)) {
                            log::warn!("cluster: putting the node key back failed: {e}");
                        }
                    }
                    Err(e) => log::warn!("cluster: reading the node key failed: {e}"),
                }
            }
            Ok(None) => {
                // The lease lapsed (this process hung, or etcd was out of reach for longer
                // than the TTL): the others saw this node leave; join again.
                log::warn!("cluster: lease of node {} lapsed; registering again", me.id);
                match register(etcd, me) {
                    Ok(new) => lease.store(new, Ordering::Relaxed),
                    Err(e) => log::warn!("cluster: registering again failed: {e}"),
                }
            }
            Err(e) => log::warn!("cluster: keeping the lease alive failed: {e}"),
        }
    }
}

fn keep_reading(
    etcd: &Etcd,
    tx: &watch::Sender<Arc<ClusterView>>,
    stop: &AtomicBool,
    read_at: &AtomicU64,
    started: Instant,
) {
    read_at.store(started.elapsed().as_millis() as u64, Ordering::Relaxed);
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(VIEW_EVERY);
        match etcd.range_prefix(ROOT_PREFIX) {
            Ok((keys, revision)) => {
                read_at.store(started.elapsed().as_millis() as u64, Ordering::Relaxed);
                let view = ClusterView::from_keys(&keys, revision);
                tx.send_if_modified(|current| {
                    let changed = current.nodes != view.nodes
                        || current.collections != view.collections
                        || current.aliases != view.aliases;
                    if changed {
                        *current = Arc::new(view);
                    }
                    changed
                });
            }
            Err(e) => log::warn!("cluster: reading the cluster's keys failed: {e}"),
        }
    }
}
