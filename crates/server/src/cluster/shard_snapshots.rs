//! Snapshots of a cluster collection's shards (Qdrant's `/collections/<c>/shards/<s>/...`),
//! and of a one-shard collection as a whole (`/collections/<c>/snapshots/...`).
//!
//! A shard's snapshots are made, listed, served and deleted by one replica: the first live
//! one in the shard's placement, so that every node names the same holder. Recovering a
//! shard goes through its log (`restores.rs`) to every replica.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::Request;
use axum::http::Method;
use axum::response::{IntoResponse, Response};
use diskvec_cluster::map::replica_name;
use diskvec_cluster::CollectionMap;
use diskvec_db::{DbError, SnapshotsOf};

use super::calls::Route;
use super::{restores, ClusterState, Routed};
use crate::envelope::ApiError;
use crate::shard_snapshots::{check_sha256, no_partial_snapshots};

/// How long making a snapshot on its holder may take.
const SNAPSHOT_PATIENCE: Duration = Duration::from_secs(30 * 60);

/// Which snapshots a request means: a shard's, or (on a collection of one shard) the
/// collection's own.
#[derive(Clone, Copy)]
pub enum Shelf {
    Shard(u32),
    Collection,
}

/// The shelf and the rest of the path (from `/snapshot`) of a snapshot request's tail.
pub fn parse(tail: &str) -> Option<(Shelf, &str)> {
    if tail == "/snapshots" || tail.starts_with("/snapshots/") {
        return Some((Shelf::Collection, tail));
    }
    let rest = tail.strip_prefix("/shards/")?;
    let (id, rest) = rest.split_once('/')?;
    let shard = id.parse().ok()?;
    rest.starts_with("snapshot")
        .then(|| (Shelf::Shard(shard), &tail[tail.len() - rest.len() - 1..]))
}

/// The shard a shelf is on: the collection's only one for its own snapshots.
fn shard_of(map: &CollectionMap, name: &str, shelf: Shelf) -> Result<u32, ApiError> {
    let active = map.active_shards();
    match shelf {
        Shelf::Shard(s) if active.contains(&s) => Ok(s),
        Shelf::Shard(s) => Err(ApiError::not_found(format!(
            "Not found: Shard {s} of collection `{name}` does not exist"
        ))),
        Shelf::Collection if active.len() == 1 => Ok(active[0]),
        Shelf::Collection => Err(ApiError::bad_request(format!(
            "Bad request: collection `{name}` has {} shards: its snapshots are taken and \
             recovered shard by shard (/collections/{name}/shards/<shard>/snapshots)",
            active.len()
        ))),
    }
}

/// The path on the holder's replica: its shard shelf, for a shard's snapshots and for a
/// one-shard collection's own (the replica's collection shelf holds the snapshots made to
/// seed other replicas, removed once fetched or an hour old).
fn replica_path(local: &str, rest: &str) -> String {
    format!("/collections/{local}/shards/0{rest}")
}

/// A snapshot request on collection `r.name` (`map`: `None` when it does not exist, which
/// only a recovery of the collection's own snapshot creates).
pub async fn handle(
    c: &Arc<ClusterState>,
    map: Option<&CollectionMap>,
    r: Routed,
    shelf: Shelf,
    rest: &str,
) -> Result<Response, ApiError> {
    let m = r.method.as_str();
    let Some(map) = map else {
        if let (Shelf::Collection, "PUT", "/snapshots/recover") = (shelf, m, rest) {
            return restores::recover(c, None, r, 0).await;
        }
        return Err(DbError::UnknownCollection(r.name).into());
    };
    if m == "POST" && rest == "/snapshot/partial/recover" {
        check_sha256(crate::query_param(r.query.as_deref(), "checksum"))?;
        shard_of(map, &r.name, shelf)?;
        return Err(no_partial_snapshots());
    }
    let shard = shard_of(map, &r.name, shelf)?;
    match (m, rest) {
        ("PUT", "/snapshots/recover") => restores::recover(c, Some(map), r, shard).await,
        ("GET", "/snapshots") | ("POST", "/snapshots") => forward(c, map, &r, shard, rest).await,
        ("DELETE", file) if file.starts_with("/snapshots/") => {
            plain_name(&file["/snapshots/".len()..])?;
            forward(c, map, &r, shard, rest).await
        }
        ("GET", file) if file.starts_with("/snapshots/") => {
            let name = &file["/snapshots/".len()..];
            plain_name(name)?;
            download(c, map, &r, shard, name).await
        }
        _ => Err(ApiError::not_found(format!(
            "{m} /collections/{}{}",
            r.name, r.tail
        ))),
    }
}

/// A snapshot's name as the request's path gives it (still percent-encoded): a plain file
/// name of ours, or not found, before it is put into a path to another node (where `..` or
/// an encoded `/` would name something else).
fn plain_name(name: &str) -> Result<(), ApiError> {
    let plain = name.ends_with(".snapshot")
        && !name.starts_with('.')
        && !name.contains(['/', '\\', '%', '?', '#']);
    if plain {
        Ok(())
    } else {
        Err(DbError::NotFound(format!("Snapshot {name} not found")).into())
    }
}

/// The first live replica of `shard` in its placement (every node picks the same).
fn holder(
    c: &ClusterState,
    map: &CollectionMap,
    name: &str,
    shard: u32,
) -> Result<String, ApiError> {
    c.placed_live(map, shard).into_iter().next().ok_or_else(|| {
        ApiError::unavailable(format!("shard {shard} of {name} has no live replica"))
    })
}

async fn forward(
    c: &Arc<ClusterState>,
    map: &CollectionMap,
    r: &Routed,
    shard: u32,
    rest: &str,
) -> Result<Response, ApiError> {
    let node = holder(c, map, &r.name, shard)?;
    let local = replica_name(&r.name, shard);
    let mut path = replica_path(&local, rest);
    if let Some(q) = r.query.as_deref().filter(|q| !q.is_empty()) {
        path = format!("{path}?{q}");
    }
    let a = c
        .call(
            &node,
            &r.method,
            &path,
            r.body.clone(),
            SNAPSHOT_PATIENCE,
            Route::of(map.uid),
        )
        .await?;
    Ok((a.status, axum::Json(a.body)).into_response())
}

/// A snapshot's bytes from its holder: read in place when it is this node, else fetched to
/// a file here first and sent from it.
async fn download(
    c: &Arc<ClusterState>,
    map: &CollectionMap,
    r: &Routed,
    shard: u32,
    file: &str,
) -> Result<Response, ApiError> {
    let node = holder(c, map, &r.name, shard)?;
    let local = replica_name(&r.name, shard);
    if node == c.node.me.id {
        let path = c.db.snapshot_file(SnapshotsOf::Shard(&local), file)?;
        return crate::snapshots::file_response(&path).await;
    }
    let into = crate::snapshots::temp_file(&c.marks_dir, "forwarded");
    let path = replica_path(&local, &format!("/snapshots/{file}"));
    let fetched = c
        .download(&node, &Method::GET, &path, &into, SNAPSHOT_PATIENCE)
        .await;
    let opened = match fetched {
        Ok(()) => tokio::fs::File::open(&into)
            .await
            .map_err(|e| ApiError::unavailable(format!("{}: {e}", into.display()))),
        Err(e) => Err(e),
    };
    // Unlinked at once: the open file is read to its end, then gone.
    let _ = std::fs::remove_file(&into);
    Ok(crate::snapshots::stream_file(opened?))
}

/// `POST .../snapshots/upload` on a cluster collection, handled before its body is read
/// (a snapshot may be larger than a request body may be).
pub async fn upload(
    c: &Arc<ClusterState>,
    name: String,
    shelf: Shelf,
    query: Option<String>,
    req: Request,
) -> Result<Response, ApiError> {
    let map = c.node.view().collection(&name).cloned();
    let shard = match (&map, shelf) {
        (Some(map), _) => shard_of(map, &name, shelf)?,
        // A collection's own snapshot uploaded creates it.
        (None, Shelf::Collection) => 0,
        (None, Shelf::Shard(_)) => return Err(DbError::UnknownCollection(name).into()),
    };
    let r = Routed {
        method: Method::POST,
        name,
        tail: String::new(),
        query,
        body: Bytes::new(),
        started: Instant::now(),
    };
    restores::upload(c, map.as_ref(), r, shard, req).await
}
