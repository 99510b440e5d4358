//! Snapshot routes: create, list, download and delete collection and full snapshots, and
//! recover a collection from a snapshot file in the snapshots directory or on a loopback
//! URL (`diskvec_db::snapshot` does the work).

use std::path::{Path as FsPath, PathBuf};
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::convert::parse_body;
use crate::envelope::{ok, ApiError, ApiResult};
use crate::{blocking, AppState};

#[derive(Deserialize, Default)]
pub struct WaitParam {
    wait: Option<bool>,
}

/// Runs `work`; with `wait=false` answers 202 at once and lets it finish in the
/// background (its failure is logged), as Qdrant does.
async fn maybe_wait<T: serde::Serialize + Send + 'static>(
    wait: Option<bool>,
    work: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> ApiResult {
    let t = Instant::now();
    if wait == Some(false) {
        tokio::task::spawn_blocking(move || {
            if let Err(e) = work() {
                log::warn!("snapshot task failed: {}", e.message);
            }
        });
        let body = json!({"status": "accepted", "time": t.elapsed().as_secs_f64()});
        return Ok((StatusCode::ACCEPTED, axum::Json(body)).into_response());
    }
    let result = blocking(work).await?;
    Ok(ok(result, t))
}

pub async fn create(
    State(s): State<AppState>,
    Path(name): Path<String>,
    Query(q): Query<WaitParam>,
) -> ApiResult {
    s.db.collection(&name)?;
    maybe_wait(q.wait, move || Ok(s.db.create_snapshot(&name)?)).await
}

pub async fn list(State(s): State<AppState>, Path(name): Path<String>) -> ApiResult {
    let t = Instant::now();
    let list = blocking(move || Ok(s.db.list_snapshots(Some(&name))?)).await?;
    Ok(ok(list, t))
}

pub async fn download(
    State(s): State<AppState>,
    Path((name, snapshot)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let path = s.db.snapshot_file(Some(&name), &snapshot)?;
    file_response(&path).await
}

pub async fn delete(
    State(s): State<AppState>,
    Path((name, snapshot)): Path<(String, String)>,
    Query(q): Query<WaitParam>,
) -> ApiResult {
    s.db.snapshot_file(Some(&name), &snapshot)?;
    maybe_wait(q.wait, move || {
        s.db.delete_snapshot(Some(&name), &snapshot)?;
        Ok(true)
    })
    .await
}

pub async fn create_full(State(s): State<AppState>, Query(q): Query<WaitParam>) -> ApiResult {
    maybe_wait(q.wait, move || Ok(s.db.create_full_snapshot()?)).await
}

pub async fn list_full(State(s): State<AppState>) -> ApiResult {
    let t = Instant::now();
    let list = blocking(move || Ok(s.db.list_snapshots(None)?)).await?;
    Ok(ok(list, t))
}

pub async fn download_full(
    State(s): State<AppState>,
    Path(snapshot): Path<String>,
) -> Result<Response, ApiError> {
    let path = s.db.snapshot_file(None, &snapshot)?;
    file_response(&path).await
}

pub async fn delete_full(
    State(s): State<AppState>,
    Path(snapshot): Path<String>,
    Query(q): Query<WaitParam>,
) -> ApiResult {
    s.db.snapshot_file(None, &snapshot)?;
    maybe_wait(q.wait, move || {
        s.db.delete_snapshot(None, &snapshot)?;
        Ok(true)
    })
    .await
}

async fn file_response(path: &FsPath) -> Result<Response, ApiError> {
    let file = tokio::fs::File::open(path)
        .await
        .map_err(|e| ApiError::not_found(format!("Snapshot {}: {e}", path.display())))?;
    Ok(stream_file(file))
}

/// An open file as a response body, sent a MiB at a time (a snapshot can be larger than the
/// memory to spare).
pub(crate) fn stream_file(file: tokio::fs::File) -> Response {
    let chunks = futures_util::stream::unfold(file, |mut file| async move {
        use tokio::io::AsyncReadExt;
        let mut buf = vec![0u8; 1 << 20];
        match file.read(&mut buf).await {
            Ok(0) => None,
            Ok(n) => {
                buf.truncate(n);
                Some((Ok::<_, std::io::Error>(Bytes::from(buf)), file))
            }
            Err(e) => Some((Err(e), file)),
        }
    });
    (
        [(header::CONTENT_TYPE, "application/octet-stream")],
        Body::from_stream(chunks),
    )
        .into_response()
}

fn forbidden(message: impl Into<String>) -> ApiError {
    ApiError {
        status: StatusCode::FORBIDDEN,
        message: format!("Forbidden: {}", message.into()),
        retry_after: None,
    }
}

/// Where a `location` points: a file (inside the snapshots directory) or a loopback URL.
enum Source {
    File(PathBuf),
    Url(String),
}

fn source(location: &str, snapshots: &FsPath) -> Result<Source, ApiError> {
    if let Some(rest) = location.strip_prefix("file://") {
        let path = if rest.starts_with('/') {
            PathBuf::from(rest)
        } else if let Some(p) = rest.strip_prefix("localhost/") {
            PathBuf::from(format!("/{p}"))
        } else {
            return Err(ApiError::bad_request(
                "Bad request: Invalid snapshot URI, file path must be absolute or on localhost",
            ));
        };
        if !path.exists() {
            return Err(ApiError::bad_request(format!(
                "Bad request: Snapshot file {:?} does not exist",
                path.display().to_string()
            )));
        }
        let real = path
            .canonicalize()
            .map_err(|e| ApiError::bad_request(format!("Bad request: {}: {e}", path.display())))?;
        let root = snapshots
            .canonicalize()
            .unwrap_or_else(|_| snapshots.to_path_buf());
        if !real.starts_with(&root) {
            return Err(forbidden(format!(
                "Snapshot file path must be inside the snapshots directory ({})",
                root.display()
            )));
        }
        return Ok(Source::File(real));
    }
    if location.starts_with("http://") {
        let host = location
            .trim_start_matches("http://")
            .split(['/', '?'])
            .next()
            .unwrap_or_default();
        let host = host.rsplit_once(':').map_or(host, |(h, _)| h);
        if !["localhost", "127.0.0.1", "[::1]"].contains(&host) {
            return Err(ApiError::bad_request(format!(
                "Bad request: snapshots are fetched from loopback URLs only, not {host:?}"
            )));
        }
        return Ok(Source::Url(location.to_string()));
    }
    Err(ApiError::bad_request(format!(
        "Bad request: snapshot location must be a file:// path or an http:// loopback URL, \
         got {location:?}"
    )))
}

/// Fetches `url` into a file in `dir`.
fn download_to(url: &str, dir: &FsPath, api_key: Option<&str>) -> Result<PathBuf, ApiError> {
    std::fs::create_dir_all(dir).map_err(|e| ApiError::bad_request(e.to_string()))?;
    let path = dir.join(format!(
        ".download-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    ));
    let mut req = ureq::get(url);
    if let Some(k) = api_key {
        req = req.set("api-key", k);
    }
    let response = req.call().map_err(|e| {
        ApiError::bad_request(format!("Bad request: cannot fetch snapshot {url}: {e}"))
    })?;
    let mut file = std::fs::File::create(&path)
        .map_err(|e| ApiError::bad_request(format!("{}: {e}", path.display())))?;
    if let Err(e) = std::io::copy(&mut response.into_reader(), &mut file) {
        let _ = std::fs::remove_file(&path);
        return Err(ApiError::bad_request(format!(
            "Bad request: fetching snapshot {url}: {e}"
        )));
    }
    Ok(path)
}

/// `PUT /collections/{name}/snapshots/recover`: `{"location", "checksum"?, "api_key"?}`.
pub async fn recover(
    State(s): State<AppState>,
    Path(name): Path<String>,
    Query(q): Query<WaitParam>,
    body: Bytes,
) -> ApiResult {
    let body = parse_body(&body)?;
    let location = body
        .get("location")
        .and_then(Value::as_str)
        .ok_or_else(|| ApiError::validation("location: must be a snapshot URI"))?
        .to_string();
    let checksum = body
        .get("checksum")
        .and_then(Value::as_str)
        .map(str::to_string);
    let api_key = body
        .get("api_key")
        .and_then(Value::as_str)
        .map(str::to_string);
    let source = source(&location, &s.db.snapshots_dir())?;
    maybe_wait(q.wait.or(Some(true)), move || {
        let (path, fetched) = match source {
            Source::File(p) => (p, false),
            Source::Url(url) => (
                download_to(&url, &s.db.snapshots_dir(), api_key.as_deref())?,
                true,
            ),
        };
        let restored = s.db.restore_collection(&name, &path, checksum.as_deref());
        if fetched {
            let _ = std::fs::remove_file(&path);
        }
        restored?;
        Ok(true)
    })
    .await
}
