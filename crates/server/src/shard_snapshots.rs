//! Qdrant's shard snapshot routes on a local collection, which is one shard (shard 0):
//! create, list, download and delete its shard snapshots (kept apart from the collection's
//! own), and recover it from one (by location or uploaded). In a cluster the router sends
//! these to a replica of the shard (`cluster/shard_snapshots.rs`), itself such a local
//! collection.

use std::path::{Path as FsPath, PathBuf};
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::{Path, Query, Request, State};
use axum::http::{header, StatusCode};
use axum::response::Response;
use diskvec_db::SnapshotsOf;
use serde::Deserialize;

use crate::envelope::{ok, ApiError, ApiResult};
use crate::snapshots::{
    file_response, maybe_wait, restore, restore_file, temp_file, RecoverRequest, WaitParam,
};
use crate::{blocking, AppState};

/// A local collection is its own only shard.
fn only_shard(s: &AppState, name: &str, shard: u32) -> Result<(), ApiError> {
    s.db.collection(name)?;
    if shard != 0 {
        return Err(ApiError::not_found(format!(
            "Not found: Shard {shard} of collection `{name}` does not exist (it has one, shard 0)"
        )));
    }
    Ok(())
}

pub async fn create(
    State(s): State<AppState>,
    Path((name, shard)): Path<(String, u32)>,
    Query(q): Query<WaitParam>,
) -> ApiResult {
    only_shard(&s, &name, shard)?;
    maybe_wait(q.wait, move || Ok(s.db.create_shard_snapshot(&name)?)).await
}

pub async fn list(
    State(s): State<AppState>,
    Path((name, shard)): Path<(String, u32)>,
) -> ApiResult {
    only_shard(&s, &name, shard)?;
    let t = Instant::now();
    let list = blocking(move || Ok(s.db.list_snapshots(SnapshotsOf::Shard(&name))?)).await?;
    Ok(ok(list, t))
}

pub async fn download(
    State(s): State<AppState>,
    Path((name, shard, snapshot)): Path<(String, u32, String)>,
) -> Result<Response, ApiError> {
    only_shard(&s, &name, shard)?;
    let path = s.db.snapshot_file(SnapshotsOf::Shard(&name), &snapshot)?;
    file_response(&path).await
}

pub async fn delete(
    State(s): State<AppState>,
    Path((name, shard, snapshot)): Path<(String, u32, String)>,
    Query(q): Query<WaitParam>,
) -> ApiResult {
    only_shard(&s, &name, shard)?;
    s.db.snapshot_file(SnapshotsOf::Shard(&name), &snapshot)?;
    maybe_wait(q.wait, move || {
        s.db.delete_snapshot(SnapshotsOf::Shard(&name), &snapshot)?;
        Ok(true)
    })
    .await
}

/// `PUT /collections/{name}/shards/{shard}/snapshots/recover`: the collection replaced by
/// the snapshot at `location`.
pub async fn recover(
    State(s): State<AppState>,
    Path((name, shard)): Path<(String, u32)>,
    Query(q): Query<WaitParam>,
    body: Bytes,
) -> ApiResult {
    only_shard(&s, &name, shard)?;
    let request = RecoverRequest::parse(&body, &s.db.snapshots_dir())?;
    maybe_wait(q.wait.or(Some(true)), move || restore(&s, &name, request)).await
}

#[derive(Deserialize, Default)]
pub struct UploadParams {
    pub wait: Option<bool>,
    pub checksum: Option<String>,
}

/// A `checksum` parameter must be a SHA-256 in hex (checked before any upload is read).
pub(crate) fn check_sha256(checksum: Option<&str>) -> Result<(), ApiError> {
    match checksum {
        Some(c) if c.len() != 64 || !c.bytes().all(|b| b.is_ascii_hexdigit()) => {
            Err(ApiError::validation_in(
                "query parameters",
                format!("checksum: invalid_sha256_hash: {c:?} is not 64 hexadecimal digits"),
            ))
        }
        _ => Ok(()),
    }
}

/// The multipart field `snapshot` of an upload, streamed to a hidden file in `dir` (a
/// snapshot may be larger than any request body is allowed to be in memory).
pub(crate) async fn receive_upload(
    req: Request,
    dir: &FsPath,
    max_bytes: u64,
) -> Result<PathBuf, ApiError> {
    use tokio::io::AsyncWriteExt;
    let bad = |e: String| ApiError::bad_request(format!("Bad request: the upload: {e}"));
    let failed = |e: std::io::Error| ApiError {
        status: StatusCode::INTERNAL_SERVER_ERROR,
        message: format!("keeping the upload in {}: {e}", dir.display()),
        retry_after: None,
    };
    let content_type = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let boundary = multer::parse_boundary(content_type)
        .map_err(|e| bad(format!("expected multipart/form-data: {e}")))?;
    let mut form = multer::Multipart::new(req.into_body().into_data_stream(), boundary);
    tokio::fs::create_dir_all(dir).await.map_err(failed)?;
    while let Some(mut field) = form.next_field().await.map_err(|e| bad(e.to_string()))? {
        if field.name() != Some("snapshot") {
            continue;
        }
        let path = temp_file(dir, "upload");
        let written = async {
            let mut file = tokio::fs::File::create(&path).await.map_err(failed)?;
            let mut received = 0u64;
            while let Some(chunk) = field.chunk().await.map_err(|e| bad(e.to_string()))? {
                received += chunk.len() as u64;
                if received > max_bytes {
                    return Err(ApiError::too_large(format!(
                        "the upload is over {max_bytes} bytes (diskvec serve --max-upload-mib)"
                    )));
                }
                file.write_all(&chunk).await.map_err(failed)?;
            }
            file.sync_all().await.map_err(failed)
        }
        .await;
        if let Err(e) = written {
            let _ = tokio::fs::remove_file(&path).await;
            return Err(e);
        }
        return Ok(path);
    }
    Err(bad("no `snapshot` field in the form".into()))
}

/// `POST /collections/{name}/shards/{shard}/snapshots/upload?checksum=`: the collection
/// replaced by the uploaded snapshot.
pub async fn upload(
    State(s): State<AppState>,
    Path((name, shard)): Path<(String, u32)>,
    Query(q): Query<UploadParams>,
    req: Request,
) -> ApiResult {
    check_sha256(q.checksum.as_deref())?;
    only_shard(&s, &name, shard)?;
    restore_upload(s, name, q, req).await
}

/// `POST /collections/{name}/snapshots/upload?checksum=`: the same for a collection.
pub async fn upload_collection(
    State(s): State<AppState>,
    Path(name): Path<String>,
    Query(q): Query<UploadParams>,
    req: Request,
) -> ApiResult {
    check_sha256(q.checksum.as_deref())?;
    restore_upload(s, name, q, req).await
}

async fn restore_upload(s: AppState, name: String, q: UploadParams, req: Request) -> ApiResult {
    let max = s.limits().max_upload_bytes;
    let path = receive_upload(req, &s.db.snapshots_dir(), max).await?;
    maybe_wait(q.wait.or(Some(true)), move || {
        restore_file(&s, &name, &path, true, q.checksum.as_deref())
    })
    .await
}

/// `POST /collections/{name}/shards/{shard}/snapshot/partial/recover`: Qdrant's recovery
/// from a partial snapshot (only the segment files changed since a manifest), which diskvec
/// does not make; its checksum is still checked first, as for any upload.
pub async fn partial_recover(
    State(s): State<AppState>,
    Path((name, shard)): Path<(String, u32)>,
    Query(q): Query<UploadParams>,
) -> ApiResult {
    check_sha256(q.checksum.as_deref())?;
    only_shard(&s, &name, shard)?;
    Err(no_partial_snapshots())
}

pub(crate) fn no_partial_snapshots() -> ApiError {
    ApiError::bad_request(
        "Bad request: diskvec makes no partial snapshots: recover the shard from a whole one \
         (/snapshots/recover or /snapshots/upload)",
    )
}
