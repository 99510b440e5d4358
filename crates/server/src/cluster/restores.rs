//! A shard of a cluster collection recovered from a snapshot (Qdrant's shard snapshot
//! recovery, by location or uploaded): a message in the shard's log, so that every replica
//! replaces its data at the same place in the log's order.
//!
//! The node that took the request keeps the snapshot file (`<db>/cluster/restores/`),
//! checked whole (its checksum, a collection snapshot's header) before the message is
//! published; each replica fetches it when it applies the message, checks it against the
//! checksum the message carries (a damaged transfer is fetched again, never taken for a
//! refusal), and restores its local collection from it. Once every live replica applied it,
//! the log is trimmed below it: a replica that was away, or made later, copies a replica
//! restored since instead of replaying messages the restore replaced. The file is kept until
//! then (at most `UNFETCHED_KEPT`); a replica that finds it gone is rebuilt from another
//! replica's snapshot.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::{FromRequest, Multipart, Request};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use diskvec_cluster::map::replica_name;
use diskvec_cluster::CollectionMap;
use diskvec_db::{Database, DbError};
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
/// recovery when it has one shard); `map` is `None` when the collection does not exist, which
/// the recovery creates (one shard, configured as the snapshot's collection).
pub async fn recover(
    c: &Arc<ClusterState>,
    map: Option<&CollectionMap>,
    r: Routed,
    shard: u32,
) -> Result<Response, ApiError> {
    if let Some(map) = map {
        check_shard(map, &r.name, shard)?;
    }
    let request = RecoverRequest::parse(&r.body, &c.db.snapshots_dir())?;
    let checksum = request.checksum.clone();
    let dir = restores_dir(c);
    let file = crate::blocking(move || {
        let (path, fetched) = request.fetch(&dir)?;
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
    if let Some(map) = map {
        check_shard(map, &r.name, shard)?;
    }
    let form = Multipart::from_request(req, &())
        .await
        .map_err(|e| ApiError::bad_request(format!("Bad request: the upload: {e}")))?;
    let file = receive_upload(form, &restores_dir(c)).await?;
    restore(c, map, r, shard, file, checksum).await
}

fn check_shard(map: &CollectionMap, name: &str, shard: u32) -> Result<(), ApiError> {
    if map.active_shards().contains(&shard) {
        Ok(())
    } else {
        Err(ApiError::not_found(format!(
            "Not found: Shard {shard} of collection `{name}` does not exist"
        )))
    }
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
    let (kept, sum) = keep_checked(c, file, checksum).await?;
    let created;
    let map = match map {
        Some(map) => map,
        None => match create_for(c, &r, &kept).await {
            Ok(map) => {
                created = map;
                &created
            }
            Err(e) => {
                let _ = std::fs::remove_file(&kept);
                return Err(e);
            }
        },
    };
    publish_restore(c, map, &r, shard, kept, sum).await
}

/// The snapshot moved to where replicas fetch it from, with its SHA-256: refused (and
/// removed) unless it is a whole collection snapshot with the checksum asked.
async fn keep_checked(
    c: &ClusterState,
    file: PathBuf,
    checksum: Option<String>,
) -> Result<(PathBuf, String), ApiError> {
    let dir = restores_dir(c);
    remove_old_files(&dir);
    let kept = dir.join(format!(
        "{}.snapshot",
        file.file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .trim_start_matches('.')
    ));
    let (from, to) = (file.clone(), kept.clone());
    let checked = crate::blocking(move || {
        let sum = diskvec_db::file_checksum(&from)?;
        if let Some(want) = checksum.filter(|w| !w.eq_ignore_ascii_case(&sum)) {
            return Err(ApiError::bad_request(format!(
                "Bad request: Snapshot checksum mismatch: expected {want}, got {sum}"
            )));
        }
        Database::check_collection_snapshot(&from).map_err(crate::snapshots::given_snapshot)?;
        std::fs::rename(&from, &to)
            .map_err(|e| ApiError::unavailable(format!("{}: {e}", to.display())))?;
        Ok(sum)
    })
    .await;
    match checked {
        Ok(sum) => Ok((kept, sum)),
        Err(e) => {
            let _ = std::fs::remove_file(&file);
            Err(e)
        }
    }
}

/// Creates collection `r.name` of one shard, configured as the snapshot's collection is (its
/// settings read from a copy restored here for the purpose, then dropped).
async fn create_for(
    c: &Arc<ClusterState>,
    r: &Routed,
    snapshot: &Path,
) -> Result<CollectionMap, ApiError> {
    let (db, path) = (Arc::clone(&c.db), snapshot.to_path_buf());
    let scratch = format!("recovering-{}", crate::snapshots::unique_suffix());
    let params = crate::blocking(move || {
        let info = db
            .restore_collection(&scratch, &path, None)
            .map_err(crate::snapshots::given_snapshot)?
            .info();
        let _ = db.drop_collection(&scratch);
        Ok(crate::convert::collection_info(&info, &[])["config"]["params"].clone())
    })
    .await?;
    let mut body = params;
    body["shard_number"] = json!(1);
    let create = Routed {
        method: Method::PUT,
        name: r.name.clone(),
        tail: String::new(),
        query: None,
        body: Bytes::from(body.to_string()),
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
    let live = map.shards[shard as usize]
        .replicas
        .iter()
        .filter(|n| c.node.view().is_alive(n))
        .count();
    if live < map.write_consistency_factor as usize {
        let _ = std::fs::remove_file(&kept);
        return Err(ApiError::unavailable(format!(
            "shard {shard} of {} has {live} live replicas, fewer than its write_consistency_factor {}",
            r.name, map.write_consistency_factor
        )));
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
/// passed), trims the log below it and removes the file.
async fn retire(
    c: Arc<ClusterState>,
    map: CollectionMap,
    name: String,
    shard: u32,
    seq: u64,
    file: PathBuf,
) {
    let local = replica_name(&name, shard);
    let until = Instant::now() + UNFETCHED_KEPT;
    while Instant::now() < until {
        tokio::time::sleep(RETIRE_CHECK).await;
        let view = c.node.view();
        let Some(now) = view.collection(&name).filter(|m| m.uid == map.uid) else {
            break;
        };
        let mut all = true;
        for node in now.shards[shard as usize]
            .replicas
            .iter()
            .filter(|n| view.is_alive(n))
        {
            let applied = super::writes::applied_now(&c, node, &local, map.uid)
                .await
                .ok()
                .and_then(|a| a.result().get("applied").and_then(Value::as_u64));
            all &= applied.is_some_and(|a| a >= seq);
        }
        if all {
            let stream = map.stream_name(&name, shard);
            match c.log.trim_below(&stream, seq).await {
                Ok(()) => log::info!(
                    "cluster: {name} shard {shard} restored at message {seq}; its log trimmed below it"
                ),
                Err(e) => log::warn!("cluster: trimming {name} shard {shard} below its restore: {e}"),
            }
            break;
        }
    }
    let _ = std::fs::remove_file(&file);
}

/// Restore files left by a node that died before retiring them.
fn remove_old_files(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let old = e
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > UNFETCHED_KEPT);
        if old {
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
/// replaces the replica's data. A snapshot the database refuses is refused on every replica
/// alike (the same bytes); a file that cannot be fetched now is fetched again; one that is
/// gone means the shard was restored and its log trimmed past this replica, which is then
/// rebuilt from another.
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
        let _ = std::fs::remove_file(&into);
        let gone = e.status == StatusCode::NOT_FOUND || !c.node.view().is_alive(node);
        let why = format!(
            "fetching the snapshot of restore {seq} from {node}: {}",
            e.message
        );
        return Err(if gone {
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
    // Err((true, why)): the database refuses the snapshot (so does every replica);
    // Err((false, why)): this node could not restore it now.
    let restored = tokio::task::spawn_blocking(move || {
        let got = diskvec_db::file_checksum(&path).map_err(|e| (false, e.to_string()))?;
        if !got.eq_ignore_ascii_case(&want) {
            return Err((
                false,
                format!("the snapshot fetched has checksum {got}, not {want}"),
            ));
        }
        db.restore_collection(&l, &path, None)
            .map(|_| ())
            .map_err(|e| match e {
                DbError::Corrupt { .. } | DbError::InvalidInput(_) | DbError::BadRequest(_) => {
                    (true, ApiError::from(e).message)
                }
                other => (false, other.to_string()),
            })
    })
    .await
    .unwrap_or_else(|e| Err((false, e.to_string())));
    let _ = std::fs::remove_file(&into);
    match restored {
        Ok(()) => Ok(Some(Outcome {
            seq,
            status: 200,
            body: json!({"result": true, "status": "ok"}),
        })),
        Err((true, why)) => Ok(Some(refused(seq, &why))),
        Err((false, why)) => Err(Stop::Retry(format!("restoring {local}: {why}"))),
    }
}

fn refused(seq: u64, message: &str) -> Outcome {
    Outcome {
        seq,
        status: 400,
        body: json!({"status": {"error": message}}),
    }
}
