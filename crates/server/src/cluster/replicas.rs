//! This node's replicas: created and dropped as the shard maps say (`reconcile`), and each
//! kept applying its shard's log in order (`apply_log`), recording every message applied in
//! its applied mark so that a restart goes on from the next one.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::Method;
use diskvec_cluster::log::Entry;
use diskvec_cluster::map::{parse_replica_name, replica_name};
use diskvec_cluster::{AppliedMark, ClusterView, CollectionMap};
use futures_util::StreamExt;
use serde_json::Value;
use tokio::sync::watch;

use super::calls::Via;
use super::split::LogMessage;
use super::{seeding, ClusterState};
use crate::AppState;

/// How long an applier waits for a message before it checks that its consumer is not stalled.
const STALL_CHECK: Duration = Duration::from_secs(2);

/// How long an applier waits before following its log again after a failure (a log
/// electing a stream leader answers again within seconds).
const RETRY_AFTER: Duration = Duration::from_millis(500);

/// Outcomes kept per replica for routers waiting on their writes.
const OUTCOMES_KEPT: usize = 4096;

/// What applying one message gave: the replica's HTTP status and answer.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub seq: u64,
    pub status: u16,
    pub body: Value,
}

pub struct LocalReplica {
    pub uid: u64,
    /// The last sequence applied (and recorded).
    pub applied: watch::Sender<u64>,
    /// Whether it has applied its log up to where the log ended when it started: until
    /// then routers read elsewhere.
    pub ready: AtomicBool,
    pub outcomes: Mutex<VecDeque<Outcome>>,
    /// The first message whose outcome is kept: the first this replica applied since it
    /// was opened, then past the ones let go.
    pub known_from: AtomicU64,
    /// Held by the applier from applying a message to recording it, and by a snapshot of
    /// the replica while it is taken: a snapshot is at one sequence exactly.
    pub applying: Arc<tokio::sync::Mutex<()>>,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Drop for LocalReplica {
    fn drop(&mut self) {
        if let Some(t) = self.task.lock().unwrap_or_else(|p| p.into_inner()).take() {
            t.abort();
        }
    }
}

/// How long a replica waits to reach the sequence a read must not be older than.
const FRESH_WAIT: Duration = Duration::from_secs(2);

/// Whether the local replica `name` answers a router's read: it serves the incarnation,
/// and has applied up to `route.at_least` (waiting a little for it); else why not.
pub async fn serve_routed(
    c: &ClusterState,
    name: &str,
    route: super::calls::Route,
) -> Result<(), String> {
    let Some(r) = replica(c, name) else {
        return Err("is not open on this node".into());
    };
    if r.uid != route.uid || !r.ready.load(Ordering::Acquire) {
        return Err("is of another incarnation here, or catching up with its log".into());
    }
    let mut rx = r.applied.subscribe();
    let reached = tokio::time::timeout(FRESH_WAIT, rx.wait_for(|&a| a >= route.at_least))
        .await
        .is_ok_and(|r| r.is_ok());
    if reached {
        return Ok(());
    }
    let applied = *r.applied.borrow();
    Err(format!(
        "has applied its log to {applied}, not yet to {}",
        route.at_least
    ))
}

/// Whether `replica` is still the one this node keeps under `name` (not dropped or
/// replaced since its applier started).
fn is_current(c: &ClusterState, name: &str, replica: &Arc<LocalReplica>) -> bool {
    self::replica(c, name).is_some_and(|r| Arc::ptr_eq(&r, replica))
}

/// Whether this node's replica `local` of the collection incarnation `uid` has applied its
/// log to the end the log has now (asked of the log): what finishing a move needs.
pub async fn caught_up(c: &ClusterState, local: &str, uid: u64, stream: &str) -> bool {
    let Some(r) = replica(c, local).filter(|r| r.uid == uid) else {
        return false;
    };
    if !r.ready.load(Ordering::Acquire) {
        return false;
    }
    let applied = *r.applied.borrow();
    c.log
        .last_sequence(stream)
        .await
        .is_ok_and(|end| applied >= end)
}

/// `Some(ready)` for a local replica this node keeps, `None` when it has none (yet).
pub fn local_state(c: &ClusterState, name: &str) -> Option<bool> {
    replica(c, name).map(|r| r.ready.load(Ordering::Acquire))
}

/// Points in this node's replica of `shard` of `collection` (0 when it has none).
pub fn local_points(c: &ClusterState, collection: &str, shard: u32) -> usize {
    c.db.collection(&replica_name(collection, shard))
        .map(|col| col.len())
        .unwrap_or(0)
}

pub fn replica(c: &ClusterState, name: &str) -> Option<Arc<LocalReplica>> {
    c.replicas
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(name)
        .cloned()
}

/// Starts keeping this node's replicas as the cluster's maps say, on every change of the
/// view and every few seconds (a failed step is tried again).
pub fn start(state: AppState) {
    let Some(c) = state.cluster.clone() else {
        return;
    };
    seeding::clear_incoming(&c.marks_dir);
    c.db.sweep_linked(seeding::UNFETCHED_KEPT);
    super::restores::sweep(&c);
    seeding::start_trimming(Arc::clone(&c));
    tokio::spawn(async move {
        let mut changes = c.node.watch();
        loop {
            let view = c.node.view();
            if let Err(e) = reconcile(&state, &c, &view).await {
                log::warn!("cluster: keeping replicas: {e}");
            }
            if let Err(e) = super::transfers::finish_moves(&c).await {
                log::warn!("cluster: finishing shard moves: {e}");
            }
            let _ = tokio::time::timeout(Duration::from_secs(2), changes.changed()).await;
        }
    });
}

async fn reconcile(
    state: &AppState,
    c: &Arc<ClusterState>,
    view: &ClusterView,
) -> Result<(), String> {
    if view.revision == 0 {
        return Ok(());
    }
    let me = c.node.me.id.clone();
    let mut wanted: HashMap<String, (String, u32, CollectionMap)> = HashMap::new();
    for (name, (map, _)) in &view.collections {
        for (shard, s) in map.shards.iter().enumerate() {
            if s.replicas.contains(&me) {
                let local = replica_name(name, shard as u32);
                wanted.insert(local, (name.clone(), shard as u32, map.clone()));
            }
        }
    }
    // One replica's failure does not hold up the others; the first is reported.
    let mut first_error = None;
    // Replicas no map holds any more (the collection dropped, or created again anew).
    for local in state.db.collection_names() {
        let Some((name, _)) = parse_replica_name(&local) else {
            continue;
        };
        let stale = match wanted.get(&local) {
            None => true,
            Some((_, _, map)) => replica(c, &local).is_some_and(|r| r.uid != map.uid),
        };
        if stale {
            log::info!("cluster: dropping replica {local} (no longer in {name}'s map)");
            if let Err(e) = drop_replica(state, c, &local).await {
                first_error.get_or_insert(e);
            }
        }
    }
    for (local, (name, shard, map)) in wanted {
        let running = replica(c, &local).is_some_and(|r| {
            r.task
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .as_ref()
                .is_none_or(|t| !t.is_finished())
        });
        if running {
            continue;
        }
        if let Err(e) = open_replica(state, c, &local, &name, shard, &map).await {
            first_error.get_or_insert(e);
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// Stops keeping `local`: out of the registry (routers' reads and snapshots no longer find
/// it), its applier stopped and waited for (an applier left running would apply the old log
/// to a new collection of the name).
async fn unregister(c: &ClusterState, local: &str) {
    let gone = c
        .replicas
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(local);
    let task = gone.and_then(|r| r.task.lock().unwrap_or_else(|p| p.into_inner()).take());
    if let Some(task) = task {
        task.abort();
        let _ = task.await;
    }
}

async fn drop_replica(state: &AppState, c: &ClusterState, local: &str) -> Result<(), String> {
    unregister(c, local).await;
    c.copy_next
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(local);
    let (db, dir, name) = (
        Arc::clone(&state.db),
        c.marks_dir.clone(),
        local.to_string(),
    );
    tokio::task::spawn_blocking(move || {
        if db.collection_names().contains(&name) {
            db.drop_collection(&name).map_err(|e| e.to_string())?;
        }
        AppliedMark::remove(&dir, &name).map_err(|e| e.to_string())
    })
    .await
    .map_err(|e| e.to_string())?
}

/// Opens the replica `local` where its mark says it stopped; without a mark of this
/// collection's incarnation (a new replica, one behind a trimmed log, a mark that does not
/// read) it is made again: from a snapshot of another replica, or by replaying the whole log
/// when the log still starts at its first message. What the node holds of it is kept until a
/// replacement is in hand.
async fn open_replica(
    state: &AppState,
    c: &Arc<ClusterState>,
    local: &str,
    name: &str,
    shard: u32,
    map: &CollectionMap,
) -> Result<(), String> {
    let (dir, l) = (c.marks_dir.clone(), local.to_string());
    let mark = tokio::task::spawn_blocking(move || AppliedMark::read(&dir, &l))
        .await
        .map_err(|e| e.to_string())?;
    let exists = state.db.collection_names().iter().any(|n| n == local);
    match mark {
        Ok(Some((uid, seq))) if uid == map.uid && exists => {
            return start_applier(c, local, name, shard, map, seq)
        }
        Ok(_) => {}
        Err(e) => log::warn!("cluster: replica {local}: {e}; making it again"),
    }
    unregister(c, local).await;
    let (first, last) = c
        .log
        .bounds(&map.stream_name(name, shard))
        .await
        .map_err(|e| e.to_string())?;
    let behind = c
        .copy_next
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .contains(local);
    if behind || seeding::should_copy(first, last, c.shared_storage) {
        if let Some(seq) = seeding::from_snapshot(c, name, shard, map).await? {
            c.copy_next
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(local);
            write_mark(c, local, map.uid, seq).await?;
            return start_applier(c, local, name, shard, map, seq);
        }
        if first > 1 || behind {
            return Err(format!(
                "replica {local}: no live replica to copy, and its log cannot be replayed (it starts at message {first}, or has a gap): waiting for one"
            ));
        }
    }
    // The whole log is replayed: from an empty collection.
    drop_replica(state, c, local).await?;
    build_from_log(c, local, name, shard, map).await
}

/// Creates `local` empty, with the changes of the collection made before its shard was
/// (a shard of a key made later), to replay its whole log.
async fn build_from_log(
    c: &Arc<ClusterState>,
    local: &str,
    name: &str,
    shard: u32,
    map: &CollectionMap,
) -> Result<(), String> {
    let answer = c
        .call_local(
            &Method::PUT,
            &format!("/collections/{local}"),
            Bytes::from(map.config.to_string()),
            Via::Apply,
        )
        .await
        .map_err(|e| e.message)?;
    if !answer.status.is_success() {
        return Err(format!(
            "creating replica {local}: {}",
            answer.error().message
        ));
    }
    // Before its mark exists: a failure here starts it over. Changes made after the shard
    // are in its log, in their place.
    let before = map.shards[shard as usize]
        .changes_before
        .min(map.changes.len());
    for (i, change) in map.changes[..before].iter().enumerate() {
        let applied = apply_one(c, local, 0, change.to_string().as_bytes())
            .await
            .map_err(Stop::into_message)?;
        if let Some(refused) = applied.filter(|o| o.status >= 400) {
            log::warn!(
                "cluster: replica {local}: change {i} of the collection refused: {}",
                refused.body
            );
        }
    }
    write_mark(c, local, map.uid, 0).await?;
    start_applier(c, local, name, shard, map, 0)
}

/// Starts `local`'s applied mark at `seq` (durably, replacing any it had).
async fn write_mark(c: &ClusterState, local: &str, uid: u64, seq: u64) -> Result<(), String> {
    let (dir, l) = (c.marks_dir.clone(), local.to_string());
    tokio::task::spawn_blocking(move || AppliedMark::create_at(&dir, &l, uid, seq))
        .await
        .map_err(|e| e.to_string())?
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Registers `local` and starts applying its log from the message after `from`.
fn start_applier(
    c: &Arc<ClusterState>,
    local: &str,
    name: &str,
    shard: u32,
    map: &CollectionMap,
    from: u64,
) -> Result<(), String> {
    let (tx, _) = watch::channel(from);
    let replica = Arc::new(LocalReplica {
        uid: map.uid,
        applied: tx,
        ready: AtomicBool::new(false),
        outcomes: Mutex::new(VecDeque::new()),
        known_from: AtomicU64::new(from + 1),
        applying: Arc::new(tokio::sync::Mutex::new(())),
        task: Mutex::new(None),
    });
    let stream = map.stream_name(name, shard);
    // Registered before its applier starts: the applier stops as soon as its replica is not
    // the one registered.
    c.replicas
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(local.to_string(), Arc::clone(&replica));
    let task = tokio::spawn(apply_log(
        Arc::clone(c),
        Arc::clone(&replica),
        local.to_string(),
        stream,
    ));
    *replica.task.lock().unwrap_or_else(|p| p.into_inner()) = Some(task);
    log::info!(
        "cluster: replica {local} applying its log from {}",
        from + 1
    );
    Ok(())
}

/// Applies the log of `local`'s shard from the message after its mark, forever: a failure
/// (the log out of reach, a replica error that is not the request's fault) is retried from
/// the same message, never skipped, so replicas never diverge.
async fn apply_log(
    c: Arc<ClusterState>,
    replica: Arc<LocalReplica>,
    local: String,
    stream: String,
) {
    let mut mark = None;
    while is_current(&c, &local, &replica) {
        match follow_once(&c, &replica, &local, &stream, &mut mark).await {
            Ok(()) => {}
            Err(Stop::Retry(e)) => log::warn!("cluster: replica {local}: {e}; retrying in 0.5 s"),
            Err(Stop::Behind(e)) => {
                // Its next message was trimmed: it is made again from another replica (the
                // node's next round of keeping replicas finds it without a mark). Until then
                // it answers no routed read and gives no snapshot.
                log::warn!("cluster: replica {local}: {e}; rebuilding it from a snapshot");
                replica.ready.store(false, Ordering::Release);
                if is_current(&c, &local, &replica) {
                    c.replicas
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .remove(&local);
                }
                c.copy_next
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(local.clone());
                drop(mark.take());
                let (dir, l) = (c.marks_dir.clone(), local.clone());
                match tokio::task::spawn_blocking(move || AppliedMark::remove(&dir, &l)).await {
                    Ok(Ok(())) => return,
                    Ok(Err(e)) => log::warn!("cluster: replica {local}: {e}"),
                    Err(e) => log::warn!("cluster: replica {local}: {e}"),
                }
            }
        }
        tokio::time::sleep(RETRY_AFTER).await;
    }
}

/// Why an applier stopped following its log.
pub(super) enum Stop {
    /// A failure worth retrying from the same message (the log out of reach, a message the
    /// node could not apply now).
    Retry(String),
    /// The log no longer holds the next message this replica needs.
    Behind(String),
}

impl From<String> for Stop {
    fn from(e: String) -> Self {
        Stop::Retry(e)
    }
}

impl Stop {
    fn into_message(self) -> String {
        match self {
            Stop::Retry(e) | Stop::Behind(e) => e,
        }
    }
}

async fn follow_once(
    c: &Arc<ClusterState>,
    replica: &Arc<LocalReplica>,
    local: &str,
    stream: &str,
    mark: &mut Option<AppliedMark>,
) -> Result<(), Stop> {
    if mark.is_none() {
        let (dir, l) = (c.marks_dir.clone(), local.to_string());
        *mark = Some(
            tokio::task::spawn_blocking(move || AppliedMark::open(&dir, &l))
                .await
                .map_err(|e| e.to_string())?
                .map_err(|e| e.to_string())?,
        );
    }
    let applied = mark.as_ref().expect("opened above").sequence();
    let (first, mut end) = c.log.bounds(stream).await.map_err(|e| e.to_string())?;
    if first > applied + 1 && end > applied {
        return Err(Stop::Behind(format!(
            "it has applied its log to {applied}, and the log now starts at {first}"
        )));
    }
    if applied > end {
        // The log lost messages this replica applied (its stream was created again, or its
        // servers lost their data): new messages would reuse sequences already marked.
        return Err(Stop::Retry(format!(
            "the log ends at {end}, below this replica's mark {applied}: it lost messages; the replica waits (new messages would reuse sequences it applied)"
        )));
    }
    if applied >= end {
        replica.ready.store(true, Ordering::Release);
    }
    let messages = c
        .log
        .follow(stream, applied + 1)
        .await
        .map_err(|e| e.to_string())?;
    let mut messages = Box::pin(messages);
    loop {
        let item = match tokio::time::timeout(STALL_CHECK, messages.next()).await {
            Ok(Some(item)) => item,
            Ok(None) => break,
            Err(_) => {
                // Nothing for a while: fine at the log's end; behind it, the consumer has
                // stalled (after a NATS server went away its ordered consumer may take a
                // minute to notice), so it is made again from the mark.
                let end = c
                    .log
                    .last_sequence(stream)
                    .await
                    .map_err(|e| e.to_string())?;
                let applied = mark.as_ref().expect("opened above").sequence();
                if end > applied {
                    return Err(Stop::Retry(format!(
                        "no message for {} s while the log is at {end} and this replica at {applied}: following again",
                        STALL_CHECK.as_secs()
                    )));
                }
                continue;
            }
        };
        let (seq, entry) = item.map_err(|e| e.to_string())?;
        if !is_current(c, local, replica) {
            return Ok(());
        }
        let applied = mark.as_ref().expect("opened above").sequence();
        if seq <= applied {
            continue;
        }
        if seq != applied + 1 {
            return Err(Stop::Behind(format!(
                "the log skipped from {applied} to {seq} (trimmed below this replica)"
            )));
        }
        // Applied and recorded with no snapshot taken in between.
        let between = replica.applying.lock().await;
        let outcome = match &entry {
            Entry::Signed(body) => apply_one(c, local, seq, body).await?,
            Entry::Refused(why) => Some(refused(c, stream, seq, why)),
        };
        let mut m = mark.take().expect("opened above");
        let recorded = tokio::task::spawn_blocking(move || m.record(seq).map(|()| m))
            .await
            .map_err(|e| e.to_string())?;
        *mark = Some(recorded.map_err(|e| e.to_string())?);
        if let Some(outcome) = outcome {
            let mut kept = replica.outcomes.lock().unwrap_or_else(|p| p.into_inner());
            if kept.len() == OUTCOMES_KEPT {
                if let Some(gone) = kept.pop_front() {
                    replica.known_from.store(gone.seq + 1, Ordering::Release);
                }
            }
            kept.push_back(outcome);
        }
        replica.applied.send_replace(seq);
        drop(between);
        if seq >= end && !replica.ready.load(Ordering::Acquire) {
            // Reached where the log ended when it started: ready only if that is still
            // the end (writes went on while it replayed; it must not take reads, or finish a
            // move, while far behind).
            end = c
                .log
                .last_sequence(stream)
                .await
                .map_err(|e| e.to_string())?;
            if seq >= end {
                replica.ready.store(true, Ordering::Release);
            }
        }
    }
    Err(Stop::Retry("the log's message stream ended".into()))
}

/// A message of the log not to be applied (`Entry::Refused`): passed over by every replica
/// alike, and its outcome an error, for a node whose own message it was (its clock far from
/// the NATS servers') to answer its write with.
fn refused(c: &ClusterState, stream: &str, seq: u64, why: &str) -> Outcome {
    c.refused_log_messages.fetch_add(1, Ordering::Relaxed);
    log::warn!("cluster: log {stream}: message {seq} refused, not applied: {why}");
    Outcome {
        seq,
        status: 403,
        body: serde_json::json!({"status": {"error": format!("the log refused this write (message {seq} of {stream}): {why}")}}),
    }
}

/// Applies one message to the local replica; an answer in the 5xx range (the replica could
/// not apply it now) is an error, retried; any other answer is the message's outcome, the
/// same on every replica (a request refused is refused everywhere). A barrier has none
/// (it is not kept among the outcomes writes look for their refusals in).
async fn apply_one(
    c: &ClusterState,
    local: &str,
    seq: u64,
    body: &[u8],
) -> Result<Option<Outcome>, Stop> {
    let msg: LogMessage = match serde_json::from_slice(body) {
        Ok(m) => m,
        Err(e) => {
            return Ok(Some(Outcome {
                seq,
                status: 400,
                body: serde_json::json!({"status": {"error": format!("a log message that does not parse: {e}")}}),
            }))
        }
    };
    if msg.method == super::split::BARRIER {
        return Ok(None);
    }
    if msg.method == super::restores::RESTORE {
        return super::restores::apply(c, local, seq, &msg.body).await;
    }
    let method = Method::from_bytes(msg.method.as_bytes()).map_err(|e| e.to_string())?;
    let query = if msg.query.is_empty() {
        "wait=true".to_string()
    } else {
        format!("{}&wait=true", msg.query)
    };
    let uri = format!("/collections/{local}{}?{query}", msg.path);
    let answer = c
        .call_local(&method, &uri, Bytes::from(msg.body.to_string()), Via::Apply)
        .await
        .map_err(|e| e.message)?;
    if must_retry(&answer, local) {
        return Err(Stop::Retry(format!(
            "applying message {seq}: {}",
            answer.error().message
        )));
    }
    Ok(Some(Outcome {
        seq,
        status: answer.status.as_u16(),
        body: answer.body,
    }))
}

/// Whether an answer says this node could not apply the message now, rather than what the
/// message itself deserves (which is the same on every replica): a server error, the
/// replica missing, a rate of strict mode spent, a timeout. Such a message is applied again,
/// never passed over, or replicas would diverge.
fn must_retry(answer: &super::calls::Answer, local: &str) -> bool {
    use axum::http::StatusCode;
    let status = answer.status;
    status.is_server_error()
        || status == StatusCode::TOO_MANY_REQUESTS
        || status == StatusCode::REQUEST_TIMEOUT
        || (status == StatusCode::NOT_FOUND && answer.error().message.contains(local))
}
