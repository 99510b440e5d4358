//! Where a new replica's first state comes from, and how the logs stay bounded.
//!
//! A replica made on a node (a new shard, a replica added or moved, one whose files were
//! lost or fell behind a trimmed log) starts from a snapshot of a live replica of its shard
//! on another node, taken between two messages of the shard's log, then applies the log
//! after that message (Qdrant's snapshot transfer with its WAL delta). Sealed segments are
//! immutable files, so the snapshot is mostly their bytes. Where no other replica can give
//! one and the log still starts at its first message (a new shard), it replays the log.
//!
//! Each shard's log is trimmed below where every live replica has applied it, less
//! `--log-retain` messages; a replica of a node that was down longer finds its next message
//! gone and is rebuilt from a snapshot.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::http::Method;
use axum::response::{IntoResponse, Response};
use diskvec_cluster::map::replica_name;
use diskvec_cluster::CollectionMap;
use diskvec_db::SnapshotsOf;
use serde_json::json;

use super::calls::Route;
use super::{replicas, ClusterState};
use crate::envelope::{ok, ApiError};

/// A log shorter than this is replayed rather than copied from a snapshot of another replica
/// (measured: 100k x 128 in 400 messages took 10.3 s to replay, 0.69 s to copy).
const REPLAY_AT_MOST: u64 = 100;
/// How long a snapshot may take to make and to fetch.
pub(super) const SNAPSHOT_PATIENCE: Duration = Duration::from_secs(30 * 60);
/// How often each node trims the logs of the shards it leads.
const TRIM_EVERY: Duration = Duration::from_secs(5);
/// Snapshots made for a transfer that nobody fetched are removed after this long.
pub(super) const UNFETCHED_KEPT: Duration = Duration::from_secs(3600);

/// `POST /cluster/snapshot/<replica>?uid=U[&linked=1]`: a snapshot of this node's replica,
/// taken while its applier waits between two messages; its name and the sequence it holds
/// the log to. With `linked=1` on a node with `--shared-storage`, a linked copy instead (its
/// directory and manifest checksum; the sealed segments hard-linked, nothing packed).
pub async fn snapshot_endpoint(c: &ClusterState, local: &str, query: Option<&str>) -> Response {
    let started = std::time::Instant::now();
    let uid = crate::query_param(query, "uid").and_then(|v| v.parse::<u64>().ok());
    let Some(replica) = replicas::replica(c, local).filter(|r| Some(r.uid) == uid) else {
        return ApiError::unavailable(format!("no replica {local} of that collection here"))
            .into_response();
    };
    if !replica.ready.load(Ordering::Acquire) {
        return ApiError::unavailable(format!("replica {local} is catching up with its log"))
            .into_response();
    }
    remove_unfetched(c, local);
    let linked = c.shared_storage && crate::query_param(query, "linked") == Some("1");
    // Held until the collection is copied (not while the copy is packed): no message is
    // applied meanwhile, so the copy is at `sequence` exactly.
    let between_messages = Arc::clone(&replica.applying).lock_owned().await;
    let sequence = *replica.applied.borrow();
    let (db, name) = (Arc::clone(&c.db), local.to_string());
    let made = tokio::task::spawn_blocking(move || {
        let release = move || drop(between_messages);
        if linked {
            db.link_copy(&name, release).map(|copy| {
                json!({
                    "linked_dir": copy.dir,
                    "manifest_checksum": copy.manifest_checksum,
                    "linked_bytes": copy.bytes.linked,
                    "sequence": sequence,
                })
            })
        } else {
            db.create_snapshot_then(&name, release).map(
                |info| json!({"name": info.name, "sequence": sequence, "checksum": info.checksum}),
            )
        }
    })
    .await;
    match made {
        Ok(Ok(answer)) => ok(answer, started),
        Ok(Err(e)) => ApiError::from(e).into_response(),
        Err(e) => ApiError::unavailable(format!("snapshot of {local}: {e}")).into_response(),
    }
}

/// Transfer snapshots of `local` made long ago and never fetched (their fetcher died).
fn remove_unfetched(c: &ClusterState, local: &str) {
    c.db.sweep_linked(UNFETCHED_KEPT);
    let Ok(list) = c.db.list_snapshots(SnapshotsOf::Collection(local)) else {
        return;
    };
    for s in list {
        let path = c.db.snapshots_dir().join(local).join(&s.name);
        if diskvec_db::storage::changed_before(&path, UNFETCHED_KEPT) {
            let _ =
                c.db.delete_snapshot(SnapshotsOf::Collection(local), &s.name);
        }
    }
}

/// `POST /cluster/snapshot/<replica>/<name>?uid=U`: the bytes of a snapshot made for a
/// transfer, once: the file is removed as its sending begins (the open file stays readable
/// until sent). Only of a replica this node keeps (of that incarnation), never of another
/// collection's snapshots.
pub async fn download_endpoint(
    c: &ClusterState,
    local: &str,
    name: &str,
    query: Option<&str>,
) -> Response {
    let uid = crate::query_param(query, "uid").and_then(|v| v.parse::<u64>().ok());
    if replicas::replica(c, local)
        .filter(|r| Some(r.uid) == uid)
        .is_none()
    {
        return ApiError::not_found(format!("no replica {local} of that collection here"))
            .into_response();
    }
    let path = match c.db.snapshot_file(SnapshotsOf::Collection(local), name) {
        Ok(p) => p,
        Err(e) => return ApiError::from(e).into_response(),
    };
    let file = match tokio::fs::File::open(&path).await {
        Ok(f) => f,
        Err(e) => {
            return ApiError::not_found(format!("snapshot {}: {e}", path.display())).into_response()
        }
    };
    if let Err(e) = c.db.delete_snapshot(SnapshotsOf::Collection(local), name) {
        log::warn!("cluster: removing sent snapshot {name} of {local}: {e}");
    }
    crate::snapshots::stream_file(file)
}

/// Whether a replica starting now should copy another replica rather than replay its log,
/// which holds messages `first..=last`: the log no longer starts at its first message, or is
/// long, or holds anything at all where the copy would be linked (`shared_storage`: no bytes
/// to move).
pub fn should_copy(first: u64, last: u64, shared_storage: bool) -> bool {
    first > 1 || last >= REPLAY_AT_MOST || (shared_storage && last > 0)
}

/// Restores `local` from a snapshot of a live, caught-up replica of `shard` on another node;
/// the log sequence it holds, or `None` when no other replica gave one.
pub async fn from_snapshot(
    c: &Arc<ClusterState>,
    name: &str,
    shard: u32,
    map: &CollectionMap,
) -> Result<Option<u64>, String> {
    let local = replica_name(name, shard);
    let me = c.node.me.id.clone();
    for node in c.live_replicas(map, shard).into_iter().filter(|n| *n != me) {
        if c.shared_storage {
            match seed_from(c, map, &local, &node, true).await {
                Ok(Some(sequence)) => return Ok(Some(sequence)),
                Ok(None) => continue,
                // Storage this node was told is shared but is not: copy instead.
                Err(e) => log::warn!("cluster: {e}; copying instead"),
            }
        }
        if let Some(sequence) = seed_from(c, map, &local, &node, false).await? {
            return Ok(Some(sequence));
        }
    }
    Ok(None)
}

/// Makes `local` from a copy of `node`'s replica: linked where `linked` (and the node
/// shares its storage), else a snapshot fetched and restored. `None`: the node gave none.
async fn seed_from(
    c: &Arc<ClusterState>,
    map: &CollectionMap,
    local: &str,
    node: &str,
    linked: bool,
) -> Result<Option<u64>, String> {
    let ask_linked = if linked { "&linked=1" } else { "" };
    let asked = c
        .call(
            node,
            &Method::POST,
            &format!("/cluster/snapshot/{local}?uid={}{ask_linked}", map.uid),
            Bytes::new(),
            SNAPSHOT_PATIENCE,
            Route::of(map.uid),
        )
        .await;
    let answer = match asked {
        Ok(a) if a.status.is_success() => a,
        Ok(a) => {
            log::info!(
                "cluster: {node} gave no snapshot of {local}: {}",
                a.error().message
            );
            return Ok(None);
        }
        Err(e) => {
            log::info!("cluster: {node} gave no snapshot of {local}: {}", e.message);
            return Ok(None);
        }
    };
    let result = answer.result();
    let Some(sequence) = result["sequence"].as_u64() else {
        return Ok(None);
    };
    if let (Some(dir), Some(checksum)) = (
        result["linked_dir"].as_str(),
        result["manifest_checksum"].as_str(),
    ) {
        adopt_linked(c, local, node, PathBuf::from(dir), checksum.to_string()).await?;
        log::info!(
            "cluster: replica {local} opened {node}'s sealed segments where they lie \
             ({} bytes linked) at message {sequence}",
            result["linked_bytes"]
        );
        return Ok(Some(sequence));
    }
    let Some(snapshot) = result["name"].as_str() else {
        return Ok(None);
    };
    let checksum = result["checksum"].as_str().map(str::to_string);
    let into = incoming_path(c, local);
    c.download(
        node,
        &Method::POST,
        &format!("/cluster/snapshot/{local}/{snapshot}?uid={}", map.uid),
        &into,
        SNAPSHOT_PATIENCE,
    )
    .await
    .map_err(|e| {
        format!(
            "fetching the snapshot of {local} from {node}: {}",
            e.message
        )
    })?;
    let (db, l, file) = (Arc::clone(&c.db), local.to_string(), into.clone());
    let restored =
        tokio::task::spawn_blocking(move || db.restore_collection(&l, &file, checksum.as_deref()))
            .await
            .map_err(|e| e.to_string())
            .and_then(|r| r.map(|_| ()).map_err(|e| e.to_string()));
    let _ = std::fs::remove_file(&into);
    restored.map_err(|e| format!("restoring {local} from {node}'s snapshot: {e}"))?;
    log::info!("cluster: replica {local} restored from {node}'s snapshot at message {sequence}");
    Ok(Some(sequence))
}

/// Opens the linked copy another node made of its replica as `local` (the same sealed
/// segment files, on storage both mount).
async fn adopt_linked(
    c: &Arc<ClusterState>,
    local: &str,
    node: &str,
    dir: PathBuf,
    checksum: String,
) -> Result<(), String> {
    let (db, l) = (Arc::clone(&c.db), local.to_string());
    tokio::task::spawn_blocking(move || db.adopt_linked(&l, &dir, &checksum).map(|_| ()))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("opening {node}'s linked copy of {local}: {e}"))
}

pub fn incoming_path(c: &ClusterState, local: &str) -> PathBuf {
    c.marks_dir.join(format!("{local}.incoming.snapshot"))
}

/// Keeps trimming, every few seconds, the logs of the shards whose first live replica is
/// this node's (one node per shard does it).
pub fn start_trimming(c: Arc<ClusterState>) {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(TRIM_EVERY).await;
            let view = c.node.view();
            for (name, (map, _)) in &view.collections {
                for shard in map.active_shards() {
                    if c.placed_live(map, shard).first() != Some(&c.node.me.id) {
                        continue;
                    }
                    if let Err(e) = trim(&c, name, shard, map).await {
                        log::info!("cluster: not trimming the log of {name} shard {shard}: {e}");
                    }
                }
            }
        }
    });
}

/// Trims the log of `shard` below the lowest mark of its live replicas, less the messages
/// kept; nothing when a live replica does not say where it is.
async fn trim(
    c: &Arc<ClusterState>,
    name: &str,
    shard: u32,
    map: &CollectionMap,
) -> Result<(), String> {
    let lowest = super::writes::lowest_applied(c, map, name, shard).await?;
    if lowest == u64::MAX || lowest <= c.log_retain {
        return Ok(());
    }
    let below = lowest - c.log_retain + 1;
    let stream = map.stream_name(name, shard);
    let (first, _) = c.log.bounds(&stream).await.map_err(|e| e.to_string())?;
    if first >= below {
        return Ok(());
    }
    c.log
        .trim_below(&stream, below)
        .await
        .map_err(|e| e.to_string())?;
    log::info!("cluster: log of {name} shard {shard} trimmed below message {below}");
    Ok(())
}

/// Removes what a restore left half done (a fetch that died with its node).
pub fn clear_incoming(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        if e.file_name()
            .to_string_lossy()
            .ends_with(".incoming.snapshot")
        {
            let _ = std::fs::remove_file(e.path());
        }
    }
}
