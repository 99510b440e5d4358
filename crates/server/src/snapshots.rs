//! Snapshot routes: create, list, download and delete collection and full snapshots, and
//! recover a collection from a snapshot file in the snapshots directory or on a loopback
//! URL (`diskvec_db::snapshot` does the work).

use std::io::Read;
use std::path::{Path as FsPath, PathBuf};
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use diskvec_db::SnapshotsOf;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::convert::parse_body;
use crate::envelope::{ok, ApiError, ApiResult};
use crate::{blocking, AppState};

#[derive(Deserialize, Default)]
pub struct WaitParam {
    pub wait: Option<bool>,
}

/// Runs `work`; with `wait=false` answers 202 at once and lets it finish in the
/// background (its failure is logged), as Qdrant does.
pub(crate) async fn maybe_wait<T: serde::Serialize + Send + 'static>(
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
    let list = blocking(move || Ok(s.db.list_snapshots(SnapshotsOf::Collection(&name))?)).await?;
    Ok(ok(list, t))
}

pub async fn download(
    State(s): State<AppState>,
    Path((name, snapshot)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let path =
        s.db.snapshot_file(SnapshotsOf::Collection(&name), &snapshot)?;
    file_response(&path).await
}

pub async fn delete(
    State(s): State<AppState>,
    Path((name, snapshot)): Path<(String, String)>,
    Query(q): Query<WaitParam>,
) -> ApiResult {
    s.db.snapshot_file(SnapshotsOf::Collection(&name), &snapshot)?;
    maybe_wait(q.wait, move || {
        s.db.delete_snapshot(SnapshotsOf::Collection(&name), &snapshot)?;
        Ok(true)
    })
    .await
}

pub async fn create_full(State(s): State<AppState>, Query(q): Query<WaitParam>) -> ApiResult {
    maybe_wait(q.wait, move || Ok(s.db.create_full_snapshot()?)).await
}

pub async fn list_full(State(s): State<AppState>) -> ApiResult {
    let t = Instant::now();
    let list = blocking(move || Ok(s.db.list_snapshots(SnapshotsOf::Database)?)).await?;
    Ok(ok(list, t))
}

pub async fn download_full(
    State(s): State<AppState>,
    Path(snapshot): Path<String>,
) -> Result<Response, ApiError> {
    let path = s.db.snapshot_file(SnapshotsOf::Database, &snapshot)?;
    file_response(&path).await
}

pub async fn delete_full(
    State(s): State<AppState>,
    Path(snapshot): Path<String>,
    Query(q): Query<WaitParam>,
) -> ApiResult {
    s.db.snapshot_file(SnapshotsOf::Database, &snapshot)?;
    maybe_wait(q.wait, move || {
        s.db.delete_snapshot(SnapshotsOf::Database, &snapshot)?;
        Ok(true)
    })
    .await
}

pub(crate) async fn file_response(path: &FsPath) -> Result<Response, ApiError> {
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
        return snapshot_file_in(&path, snapshots).map(Source::File);
    }
    if location.starts_with("http://") {
        let authority = location
            .trim_start_matches("http://")
            .split(['/', '?', '#'])
            .next()
            .unwrap_or_default();
        // `user@host`: the host is after the `@` (`localhost:1@elsewhere` is elsewhere).
        let host = if authority.contains(['@', '\\']) {
            authority
        } else {
            authority.rsplit_once(':').map_or(authority, |(h, _)| h)
        };
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

/// The snapshot file `path` names, which must lie inside the snapshots directory. A path
/// outside is refused the same whether it exists or not, and answers name paths relative
/// to the snapshots directory only: the API tells nothing of the rest of the machine.
fn snapshot_file_in(path: &FsPath, snapshots: &FsPath) -> Result<PathBuf, ApiError> {
    // Qdrant's words, without its directory; and, unlike Qdrant, the same answer for a
    // path that exists and one that does not.
    let outside = || forbidden("Snapshot file path must be inside the snapshots directory");
    let root = snapshots
        .canonicalize()
        .unwrap_or_else(|_| snapshots.to_path_buf());
    let plain = path.components().all(|c| {
        matches!(
            c,
            std::path::Component::RootDir | std::path::Component::Normal(_)
        )
    });
    let relative = [snapshots, root.as_path()]
        .iter()
        .find_map(|r| path.strip_prefix(r).ok())
        .filter(|_| plain)
        .ok_or_else(outside)?
        .to_path_buf();
    let real = match root.join(&relative).canonicalize() {
        Ok(real) => real,
        Err(_) => {
            return Err(ApiError::bad_request(format!(
                "Bad request: Snapshot file {:?} does not exist",
                relative.display().to_string()
            )))
        }
    };
    // A link inside may point out.
    if !real.starts_with(&root) || !real.is_file() {
        return Err(outside());
    }
    Ok(real)
}

/// Removes the hidden files a previous run left in `dir` while receiving or fetching a
/// snapshot (a request dropped mid-way, the process killed).
pub(crate) fn sweep_temporaries(dir: &FsPath) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let ours = [".upload-", ".download-", ".copy-"]
            .iter()
            .any(|p| name.starts_with(p));
        if ours && e.path().is_file() {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// A fresh hidden file name in `dir` (hidden: never listed as a snapshot).
pub(crate) fn temp_file(dir: &FsPath, what: &str) -> PathBuf {
    dir.join(format!(".{what}-{}", diskvec_db::storage::unique_suffix()))
}

/// How long a snapshot's server has to accept the connection, and then to send each
/// part of the answer.
const FETCH_CONNECT: std::time::Duration = std::time::Duration::from_secs(10);
const FETCH_READ: std::time::Duration = std::time::Duration::from_secs(60);

/// Fetches `url` into a file in `dir`, at most `max_bytes`. Redirects are not followed (the
/// loopback rule holds for the URL given, and the key goes nowhere else).
fn download_to(
    url: &str,
    dir: &FsPath,
    api_key: Option<&str>,
    max_bytes: u64,
) -> Result<PathBuf, ApiError> {
    std::fs::create_dir_all(dir).map_err(|e| ApiError::bad_request(e.to_string()))?;
    let agent = ureq::AgentBuilder::new()
        .redirects(0)
        .timeout_connect(FETCH_CONNECT)
        .timeout_read(FETCH_READ)
        .build();
    let mut req = agent.get(url);
    if let Some(k) = api_key {
        req = req.set("api-key", k);
    }
    let cannot =
        |e: String| ApiError::bad_request(format!("Bad request: cannot fetch snapshot {url}: {e}"));
    let response = req.call().map_err(|e| cannot(e.to_string()))?;
    if (300..400).contains(&response.status()) {
        return Err(cannot(format!(
            "the server redirects ({}); give the snapshot's own URL",
            response.status()
        )));
    }
    let path = temp_file(dir, "download");
    let mut file = std::fs::File::create(&path)
        .map_err(|e| ApiError::bad_request(format!("keeping the download: {e}")))?;
    let copied = std::io::copy(
        &mut response.into_reader().take(max_bytes.saturating_add(1)),
        &mut file,
    );
    let refused = match copied {
        Ok(n) if n > max_bytes => Some(ApiError::too_large(format!(
            "the snapshot at {url} is over {max_bytes} bytes (diskvec serve --max-upload-mib)"
        ))),
        Ok(_) => None,
        Err(e) => Some(cannot(e.to_string())),
    };
    if let Some(e) = refused {
        let _ = std::fs::remove_file(&path);
        return Err(e);
    }
    Ok(path)
}

/// A recovery's request: `{"location", "checksum"?, "api_key"?}` (Qdrant's fields).
pub(crate) struct RecoverRequest {
    source: Source,
    pub checksum: Option<String>,
    api_key: Option<String>,
}

impl RecoverRequest {
    pub fn parse(body: &[u8], snapshots: &FsPath) -> Result<Self, ApiError> {
        let body = parse_body(body)?;
        let text = |field: &str| body.get(field).and_then(Value::as_str).map(str::to_string);
        let location = text("location")
            .ok_or_else(|| ApiError::validation("location: must be a snapshot URI"))?;
        Ok(Self {
            source: source(&location, snapshots)?,
            checksum: text("checksum"),
            api_key: text("api_key"),
        })
    }

    /// The snapshot as a file in `dir` (fetched there from a URL, at most `max_bytes`),
    /// and whether it is a fetched copy, to remove once used.
    pub fn fetch(self, dir: &FsPath, max_bytes: u64) -> Result<(PathBuf, bool), ApiError> {
        match self.source {
            Source::File(p) => Ok((p, false)),
            Source::Url(url) => Ok((
                download_to(&url, dir, self.api_key.as_deref(), max_bytes)?,
                true,
            )),
        }
    }
}

/// `PUT /collections/{name}/snapshots/recover`.
pub async fn recover(
    State(s): State<AppState>,
    Path(name): Path<String>,
    Query(q): Query<WaitParam>,
    body: Bytes,
) -> ApiResult {
    let request = RecoverRequest::parse(&body, &s.db.snapshots_dir())?;
    maybe_wait(q.wait.or(Some(true)), move || restore(&s, &name, request)).await
}

/// Replaces collection `name` with the snapshot a recovery names.
pub(crate) fn restore(s: &AppState, name: &str, request: RecoverRequest) -> Result<bool, ApiError> {
    let checksum = request.checksum.clone();
    let (path, fetched) = request.fetch(&s.db.snapshots_dir(), s.limits().max_upload_bytes)?;
    restore_file(s, name, &path, fetched, checksum.as_deref())
}

/// Replaces collection `name` with the snapshot in `path`, a copy made for this (fetched,
/// uploaded) removed after when `ours`.
pub(crate) fn restore_file(
    s: &AppState,
    name: &str,
    path: &FsPath,
    ours: bool,
    checksum: Option<&str>,
) -> Result<bool, ApiError> {
    let restored = s.db.restore_collection(name, path, checksum);
    if ours {
        let _ = std::fs::remove_file(path);
    }
    restored.map_err(given_snapshot)?;
    Ok(true)
}

/// A database error about a snapshot the client gave: a damaged or foreign file is the
/// request's fault (400), not the server's.
pub(crate) fn given_snapshot(e: diskvec_db::DbError) -> ApiError {
    match e {
        diskvec_db::DbError::Corrupt { .. } => ApiError::bad_request(format!("Bad request: {e}")),
        other => other.into(),
    }
}
