//! A shard of a cluster collection recovered from a snapshot (Qdrant's shard snapshot
//! recovery, by location or uploaded): a message in the shard's log, so that every replica
//! replaces its data at the same place in the log's order.
//!
//! The node that took the request keeps the snapshot file (`<db>/cluster/restores/`),
//! checked whole (its checksum, a trial restore) before the message is published; each
//! replica fetches it when it applies the message, checks it against the checksum the
//! message carries, and restores its local collection from it (a failure there is the
//! node's own, retried, never a refusal). Once every live replica applied it, the log is
//! trimmed past it: a replica that was away, or made later, copies a replica restored since
//! instead of replaying messages the restore replaced. The file is kept until then (at most
//! `UNFETCHED_KEPT`); a replica that finds it gone is rebuilt from another replica's
//! snapshot.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::Request;
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use diskvec_cluster::CollectionMap;

use serde_json::{json, Value};

use super::replicas::{Outcome, Stop};
use super::seeding::{incoming_path, SNAPSHOT_PATIENCE, UNFETCHED_KEPT};
use super::split::LogMessage;
use super::{ClusterState, Routed};
use crate::envelope::{ok, ApiError};
use crate::shard_snapshots::{check_sha256, receive_upload};
use crate::snapshots::RecoverRequest;

/// The method of a log message that replaces a replica's data with a snapshot.
pub const RESTORE: &str = "RESTORE";
/// How often the node keeping a restore's file checks whether every replica applied it.
const RETIRE_CHECK: Duration = Duration::from_secs(2);

fn restores_dir(c: &ClusterState) -> PathBuf {
    c.marks_dir.join("restores")
}

/// `PUT /collections/<c>/shards/<shard>/snapshots/recover` (and the collection's own
/// recovery when it has one shard), `shard` one of the map's active shards; `map` is `None`
/// when the collection does not exist, which the recovery creates (one shard, configured as
/// the snapshot's collection).
pub async fn recover(
    c: &Arc<ClusterState>,
    map: Option<&CollectionMap>,
    r: Routed,
    shard: u32,
) -> Result<Response, ApiError> {
    let request = RecoverRequest::parse(&r.body, &c.db.snapshots_dir())?;
    let checksum = request.checksum.clone();
    let dir = restores_dir(c);
    let file = crate::blocking(move || {
        let (path, fetched) = request.fetch(&dir, crate::Limits::default().max_upload_bytes)?;
        if fetched {
            return Ok(path);
        }
        // A file of the snapshots directory stays where it is: the restore takes a copy.
        let copy = crate::snapshots::temp_file(&dir, "copy");
        std::fs::copy(&path, &copy)
            .map_err(|e| ApiError::bad_request(format!("Bad request: {}: {e}", path.display())))?;
        Ok(copy)
    })
    .await?;
    restore(c, map, r, shard, file, checksum).await
}

/// `POST .../snapshots/upload?checksum=` (the body streamed to a file, never whole in
/// memory); `map` as for [`recover`].
pub async fn upload(
    c: &Arc<ClusterState>,
    map: Option<&CollectionMap>,
    r: Routed,
    shard: u32,
    req: Request,
) -> Result<Response, ApiError> {
    let checksum = crate::query_param(r.query.as_deref(), "checksum").map(str::to_string);
    check_sha256(checksum.as_deref())?;
    let max = crate::Limits::default().max_upload_bytes;
    let file = receive_upload(req, &restores_dir(c), max).await?;
    restore(c, map, r, shard, file, checksum).await
}

/// Checks the snapshot in `file` (removed if refused), creates the collection if `map` is
/// `None`, and restores `shard` from it.
async fn restore(
    c: &Arc<ClusterState>,
    map: Option<&CollectionMap>,
    r: Routed,
    shard: u32,
    file: PathBuf,
    checksum: Option<String>,
) -> Result<Response, ApiError> {
    let checked = keep_checked(c, file, checksum).await?;
    let created;
    let map = match map {
        Some(map) => map,
        None => match create_for(c, &r, checked.params).await {
            Ok(map) => {
                created = map;
                &created
            }
            Err(e) => {
                let _ = std::fs::remove_file(&checked.kept);
                return Err(e);
            }
        },
    };
    let answer = publish_restore(c, map, &r, shard, checked.kept, checked.sum).await?;
    if map.active_shards().len() > 1 {
        // One shard's snapshot does not set the whole collection's strict mode.
        return Ok(answer);
    }
    // Routers check requests against the strict mode the restored replicas now hold.
    let strict_mode = Some(checked.strict_mode).filter(|s| s.is_object());
    super::limits::keep_in_map(c, &r.name, map.uid, |m| m.strict_mode = strict_mode.clone())
        .await?;
    Ok(answer)
}

/// A snapshot file the replicas may restore.
struct Checked {
    /// Where replicas fetch it from.
    kept: PathBuf,
    /// Its SHA-256, hex.
    sum: String,
    /// Its collection's parameters as the API describes them (`config.params`).
    params: Value,
    /// Its collection's strict mode (`config.strict_mode_config`), which the replicas take
    /// with it.
    strict_mode: Value,
}

/// The snapshot moved to where replicas fetch it from: refused (and removed) unless it has
/// the checksum asked and restores here, whole, as a collection (a trial restore under a
/// scratch name, then dropped). So a replica that cannot restore it has a problem of its own
/// (a disk full), which it retries; it never records a refusal the others would not.
async fn keep_checked(
    c: &ClusterState,
    file: PathBuf,
    checksum: Option<String>,
) -> Result<Checked, ApiError> {
    let dir = restores_dir(c);
    let kept = dir.join(format!(
        "{}.snapshot",
        file.file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .trim_start_matches('.')
    ));
    let (db, from, to) = (Arc::clone(&c.db), file.clone(), kept.clone());
    let scratch = format!("recovering-{}", diskvec_db::storage::unique_suffix());
    let checked = crate::blocking(move || {
        remove_old_files(&dir);
        let sum = diskvec_db::file_checksum(&from)?;
        if let Some(want) = checksum.filter(|w| !w.eq_ignore_ascii_case(&sum)) {
            return Err(ApiError::bad_request(format!(
                "Bad request: Snapshot checksum mismatch: expected {want}, got {sum}"
            )));
        }
        let info = db
            .restore_collection(&scratch, &from, None)
            .map_err(crate::snapshots::given_snapshot)?
            .info();
        let _ = db.drop_collection(&scratch);
        std::fs::rename(&from, &to)
            .map_err(|e| ApiError::unavailable(format!("{}: {e}", to.display())))?;
        let config = crate::convert::collection_info(&info, &[])["config"].take();
        Ok((sum, config))
    })
    .await;
    match checked {
        Ok((sum, mut config)) => Ok(Checked {
            kept,
            sum,
            params: config["params"].take(),
            strict_mode: config["strict_mode_config"].take(),
        }),
        Err(e) => {
            let _ = std::fs::remove_file(&file);
            Err(e)
        }
    }
}

/// Creates collection `r.name` of one shard, its vectors configured as the snapshot's
/// collection's (`params`); its replicas as the cluster's defaults place them.
async fn create_for(
    c: &Arc<ClusterState>,
    r: &Routed,
    mut params: Value,
) -> Result<CollectionMap, ApiError> {
    if let Some(p) = params.as_object_mut() {
        // A local collection's description says one replica: not the cluster's layout.
        for layout in [
            "replication_factor",
            "write_consistency_factor",
            "sharding_method",
        ] {
            p.remove(layout);
        }
    }
    params["shard_number"] = json!(1);
    let create = Routed {
        method: Method::PUT,
        name: r.name.clone(),
        tail: String::new(),
        query: None,
        body: Bytes::from(params.to_string()),
        started: r.started,
    };
    super::collections::create(c, create).await?;
    c.collection(&r.name)
}

/// Appends the message restoring `shard` from the kept file; answered once applied as a
/// write is (`wait`, by default), else at once.
async fn publish_restore(
    c: &Arc<ClusterState>,
    map: &CollectionMap,
    r: &Routed,
    shard: u32,
    kept: PathBuf,
    sum: String,
) -> Result<Response, ApiError> {
    if let Err(e) = super::writes::enough_live(c, map, &r.name, shard) {
        let _ = std::fs::remove_file(&kept);
        return Err(e);
    }
    let message = LogMessage {
        method: RESTORE.into(),
        path: String::new(),
        query: String::new(),
        body: json!({
            "node": c.node.me.id,
            "file": kept.file_name().unwrap_or_default().to_string_lossy(),
            "checksum": sum,
        }),
    };
    let stream = map.stream_name(&r.name, shard);
    let seq = match c
        .log
        .publish(&stream, Bytes::from(message.to_bytes()))
        .await
    {
        Ok(seq) => seq,
        Err(e) => {
            let _ = std::fs::remove_file(&kept);
            return Err(ApiError::unavailable(e.to_string()));
        }
    };
    tokio::spawn(retire(
        Arc::clone(c),
        map.clone(),
        r.name.clone(),
        shard,
        seq,
        kept,
    ));
    if crate::query_param(r.query.as_deref(), "wait") == Some("false") {
        let body = json!({"status": "accepted", "time": r.started.elapsed().as_secs_f64()});
        return Ok((StatusCode::ACCEPTED, axum::Json(body)).into_response());
    }
    let deadline = Instant::now() + super::writes::timeout_of(r.query.as_deref());
    super::writes::wait_applied(c, map, &r.name, shard, &[seq], deadline).await?;
    Ok(ok(true, r.started))
}

/// Once every live replica of `shard` applied the restore at `seq` (or `UNFETCHED_KEPT`
/// passed), trims the log past it and removes the file.
async fn retire(
    c: Arc<ClusterState>,
    map: CollectionMap,
    name: String,
    shard: u32,
    seq: u64,
    file: PathBuf,
) {
    let until = Instant::now() + UNFETCHED_KEPT;
    while Instant::now() < until {
        tokio::time::sleep(RETIRE_CHECK).await;
        let Some(now) = c
            .node
            .view()
            .collection(&name)
            .filter(|m| m.uid == map.uid)
            .cloned()
        else {
            break;
        };
        let all = super::writes::lowest_applied(&c, &now, &name, shard).await;
        if all.is_ok_and(|lowest| lowest >= seq) {
            // The restore itself goes too: a replica that was away, or is made later, then
            // finds the log starting past it and copies a replica restored since, rather than
            // replaying the messages it replaced (or asking for this file again).
            let stream = map.stream_name(&name, shard);
            match c.log.trim_below(&stream, seq + 1).await {
                Ok(()) => {
                    log::info!(
                        "cluster: {name} shard {shard} restored at message {seq}; its log trimmed past it"
                    );
                    break;
                }
                Err(e) => log::warn!(
                    "cluster: trimming {name} shard {shard} past its restore: {e}; trying again"
                ),
            }
        }
    }
    let _ = tokio::fs::remove_file(&file).await;
}

/// At a node's start: restore files its previous run did not retire (their replicas had an
/// hour), and downloads a router was forwarding when it died.
pub fn sweep(c: &ClusterState) {
    remove_old_files(&restores_dir(c));
    let Ok(entries) = std::fs::read_dir(&c.marks_dir) else {
        return;
    };
    for e in entries.flatten() {
        if e.file_name().to_string_lossy().starts_with(".forwarded-") {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// Restore files older than an hour: left by a node that died before retiring them.
fn remove_old_files(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        if diskvec_db::storage::changed_before(&e.path(), UNFETCHED_KEPT) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// `POST /cluster/restore/<file>`: a restore's snapshot file this node keeps.
pub async fn file_endpoint(c: &ClusterState, file: &str) -> Response {
    let plain =
        file.ends_with(".snapshot") && !file.starts_with('.') && !file.contains(['/', '\\', '\0']);
    let path = restores_dir(c).join(file);
    match (plain, tokio::fs::File::open(&path).await) {
        (true, Ok(f)) => crate::snapshots::stream_file(f),
        _ => ApiError::not_found(format!("no restore file {file} here")).into_response(),
    }
}

/// Applies a restore message to the local replica `local`: fetches the file, checks it, and
/// replaces the replica's data. The router restored the same bytes before publishing, so a
/// failure here is this node's (the file damaged on the way, a disk full): retried, never
/// recorded as a refusal the other replicas would not make. A file the router no longer has
/// (404) means every live replica applied the restore and the log was trimmed past it (or an
/// hour went by): this replica is rebuilt from another, restored since.
pub async fn apply(
    c: &ClusterState,
    local: &str,
    seq: u64,
    body: &Value,
) -> Result<Option<Outcome>, Stop> {
    let (Some(node), Some(file), Some(checksum)) = (
        body["node"].as_str(),
        body["file"].as_str(),
        body["checksum"].as_str(),
    ) else {
        return Ok(Some(refused(
            seq,
            "a restore message without node, file or checksum",
        )));
    };
    let into = incoming_path(c, local);
    let fetched = c
        .download(
            node,
            &Method::POST,
            &format!("/cluster/restore/{file}"),
            &into,
            SNAPSHOT_PATIENCE,
        )
        .await;
    if let Err(e) = fetched {
        let _ = tokio::fs::remove_file(&into).await;
        let why = format!(
            "fetching the snapshot of restore {seq} from {node}: {}",
            e.message
        );
        // A node away (restarting, cut off) still has the file: waited for.
        return Err(if e.status == StatusCode::NOT_FOUND {
            Stop::Behind(why)
        } else {
            Stop::Retry(why)
        });
    }
    let (db, l, path, want) = (
        Arc::clone(&c.db),
        local.to_string(),
        into.clone(),
        checksum.to_string(),
    );
    let restored = tokio::task::spawn_blocking(move || {
        let got = diskvec_db::file_checksum(&path).map_err(|e| e.to_string())?;
        if !got.eq_ignore_ascii_case(&want) {
            return Err(format!(
                "the snapshot fetched has checksum {got}, not {want}"
            ));
        }
        db.restore_collection(&l, &path, None)
            .map(|_| ())
            .map_err(|e| e.to_string())
    })
    .await
    .unwrap_or_else(|e| Err(e.to_string()));
    let _ = tokio::fs::remove_file(&into).await;
    match restored {
        Ok(()) => Ok(Some(Outcome {
            seq,
            status: 200,
            body: json!({"result": true, "status": "ok"}),
        })),
        Err(why) => Err(Stop::Retry(format!("restoring {local}: {why}"))),
    }
}

fn refused(seq: u64, message: &str) -> Outcome {
    Outcome {
        seq,
        status: 400,
        body: json!({"status": {"error": message}}),
    }
}
