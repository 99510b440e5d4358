//! What a request must be, and what the server may spend on it, before any handler runs:
//! a JSON body says so (`Content-Type: application/json`: a web page cannot send one to
//! another site without the browser asking first), a cross-site request is refused unless
//! its origin is allowed, requests in flight are capped, and a body is read whole, within a
//! size and a time, out of a budget all bodies in flight share (a JSON body takes many
//! times its size in memory once parsed).

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tokio::sync::Semaphore;

use crate::envelope::ApiError;
use crate::AppState;

/// What the server accepts and spends; `diskvec serve` sets them from its options.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Largest request body (JSON), in bytes: 413 beyond.
    pub max_body_bytes: usize,
    /// Bytes of bodies all requests in flight may hold at once; a request waits (up to
    /// `body_read`) for its share.
    pub body_bytes_in_flight: usize,
    /// Requests handled at once (a cluster's requests among its nodes aside): 503 beyond.
    pub max_requests: usize,
    /// Time a client has to send a request's body once its headers are in: 408 beyond.
    pub body_read: Duration,
    /// Time a client has to send a request's headers, and most a connection stays open with
    /// no request: the connection is closed beyond.
    pub header_read: Duration,
    /// Connections open at once; more wait in the kernel's backlog.
    pub max_connections: usize,
    /// Largest snapshot uploaded or fetched from a URL, in bytes.
    pub max_upload_bytes: u64,
    /// Origins (`https://app.example.com`) whose pages may call the API from a browser;
    /// any other origin's writes are refused.
    pub cors_origins: Vec<String>,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            // Qdrant's default `max_request_size_mb`.
            max_body_bytes: 32 << 20,
            // A JSON body takes up to ~17x its size once parsed: ~2 GiB at most in all.
            body_bytes_in_flight: 128 << 20,
            max_requests: 512,
            body_read: Duration::from_secs(60),
            header_read: Duration::from_secs(30),
            max_connections: 1024,
            max_upload_bytes: 64 << 30,
            cors_origins: Vec::new(),
        }
    }
}

/// The semaphores that enforce [`Limits`] over the requests in flight.
pub(crate) struct Admission {
    pub limits: Limits,
    requests: Arc<Semaphore>,
    /// In KiB (a semaphore counts at most 2^32 permits at once).
    body_kib: Arc<Semaphore>,
}

impl Admission {
    pub fn new(limits: Limits) -> Self {
        Self {
            requests: Arc::new(Semaphore::new(limits.max_requests.max(1))),
            body_kib: Arc::new(Semaphore::new(kib(limits.body_bytes_in_flight).max(1))),
            limits,
        }
    }
}

fn kib(bytes: usize) -> usize {
    bytes.div_ceil(1024)
}

fn refuse(status: StatusCode, message: impl Into<String>) -> ApiError {
    ApiError {
        status,
        message: message.into(),
        retry_after: None,
    }
}

/// The middleware: checks a request's origin and body, takes its permits, reads its body,
/// and holds the permits until the answer is made.
pub(crate) async fn admit(State(s): State<AppState>, req: Request, next: Next) -> Response {
    let adm = Arc::clone(&s.admission);
    let origin = match check_origin(&adm.limits, req.method(), req.headers()) {
        Ok(origin) => origin,
        Err(refused) => return refused.into_response(),
    };
    if req.method() == Method::OPTIONS && origin.is_some() {
        return with_cors(preflight(), origin);
    }
    // Requests among a cluster's nodes are made while a client's request holds its permits
    // (and are bounded by it): capping them too could leave every permit waiting on another.
    let internal = s
        .cluster
        .as_ref()
        .is_some_and(|c| c.is_internal(req.headers()));
    if internal {
        return next.run(req).await;
    }
    let Ok(_request_permit) = Arc::clone(&adm.requests).try_acquire_owned() else {
        return ApiError::unavailable(format!(
            "Service unavailable: {} requests in flight already (diskvec serve --max-requests)",
            adm.limits.max_requests
        ))
        .into_response();
    };
    let (req, _body_permit) = match read_body(&adm, req).await {
        Ok(read) => read,
        Err(refused) => return refused.into_response(),
    };
    with_cors(next.run(req).await, origin)
}

/// A request's `Origin` when it is an allowed cross-site one (the answer then carries CORS
/// headers); `None` for a request from no page or from the server's own origin. A write
/// from any other origin is refused: a web page the user opens must not change the data.
fn check_origin(
    limits: &Limits,
    method: &Method,
    headers: &HeaderMap,
) -> Result<Option<HeaderValue>, ApiError> {
    let Some(origin) = headers.get(header::ORIGIN) else {
        return Ok(None);
    };
    let text = origin.to_str().unwrap_or_default();
    if limits.cors_origins.iter().any(|o| o == text) {
        return Ok(Some(origin.clone()));
    }
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or_default();
    let same_site = text
        .split_once("://")
        .is_some_and(|(_, rest)| !host.is_empty() && rest == host);
    if same_site || matches!(*method, Method::GET | Method::HEAD) {
        // A read's answer carries no CORS header: a foreign page's browser hides it.
        return Ok(None);
    }
    Err(refuse(
        StatusCode::FORBIDDEN,
        format!(
            "Forbidden: a request from the web page at {text:?} (allow its origin with \
             diskvec serve --cors-origin)"
        ),
    ))
}

fn preflight() -> Response {
    let mut r = StatusCode::NO_CONTENT.into_response();
    let h = r.headers_mut();
    h.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static("GET, POST, PUT, PATCH, DELETE"),
    );
    h.insert(
        header::ACCESS_CONTROL_ALLOW_HEADERS,
        HeaderValue::from_static("api-key, authorization, content-type"),
    );
    h.insert(
        header::ACCESS_CONTROL_MAX_AGE,
        HeaderValue::from_static("600"),
    );
    r
}

fn with_cors(mut response: Response, origin: Option<HeaderValue>) -> Response {
    if let Some(origin) = origin {
        let h = response.headers_mut();
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
        h.insert(header::VARY, HeaderValue::from_static("Origin"));
    }
    response
}

/// Whether a request's body is a snapshot upload (multipart, streamed to a file under its
/// own cap, `receive_upload`) rather than JSON read here.
fn is_upload(path: &str) -> bool {
    path.ends_with("/snapshots/upload") || path.ends_with("/snapshot/partial/recover")
}

fn is_json(headers: &HeaderMap) -> bool {
    let Some(value) = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let mime = value.split(';').next().unwrap_or_default().trim();
    mime.eq_ignore_ascii_case("application/json")
        || mime
            .rsplit_once('+')
            .is_some_and(|(kind, json)| kind.starts_with("application/") && json == "json")
}

/// The request with its body read whole (none of it is read for an upload), and the share
/// of the body budget it holds.
async fn read_body(
    adm: &Admission,
    req: Request,
) -> Result<(Request, Option<tokio::sync::OwnedSemaphorePermit>), ApiError> {
    use axum::body::HttpBody;
    // The body's own account of its length: a Content-Length, none for a chunked body.
    let hint = req.body().size_hint();
    let declared = hint.exact();
    if hint.upper() == Some(0) || is_upload(req.uri().path()) {
        return Ok((req, None));
    }
    if !is_json(req.headers()) {
        return Err(refuse(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "Unsupported media type: send the body as JSON, with Content-Type: application/json",
        ));
    }
    let limit = adm.limits.max_body_bytes;
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large(limit));
    }
    // A body of unknown length takes the largest share it may need.
    let share = declared.map_or(limit, |n| n as usize);
    let want = kib(share).clamp(1, kib(adm.limits.body_bytes_in_flight).max(1));
    let deadline = adm.limits.body_read;
    let permits = Arc::clone(&adm.body_kib).acquire_many_owned(want as u32);
    let permit = match tokio::time::timeout(deadline, permits).await {
        Ok(Ok(p)) => p,
        _ => {
            return Err(ApiError::unavailable(
                "Service unavailable: the request bodies in flight fill the server's budget",
            ))
        }
    };
    let (parts, body) = req.into_parts();
    let bytes = match tokio::time::timeout(deadline, axum::body::to_bytes(body, limit)).await {
        Ok(Ok(b)) => b,
        Ok(Err(e)) => {
            return Err(if is_length_limit(&e) {
                too_large(limit)
            } else {
                refuse(StatusCode::BAD_REQUEST, format!("reading the body: {e}"))
            })
        }
        Err(_) => {
            return Err(refuse(
                StatusCode::REQUEST_TIMEOUT,
                format!(
                    "Request timeout: the body did not arrive within {} s",
                    deadline.as_secs()
                ),
            ))
        }
    };
    Ok((Request::from_parts(parts, Body::from(bytes)), Some(permit)))
}

fn is_length_limit(e: &axum::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = source {
        if err.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        source = err.source();
    }
    false
}

fn too_large(limit: usize) -> ApiError {
    ApiError::too_large(format!(
        "the body is over {limit} bytes (diskvec serve --max-request-mib)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_is_told_by_its_media_type() {
        let mut h = HeaderMap::new();
        assert!(!is_json(&h));
        for (value, json) in [
            ("application/json", true),
            ("application/json; charset=utf-8", true),
            ("Application/JSON", true),
            ("application/vnd.api+json", true),
            ("text/plain", false),
            ("application/x-www-form-urlencoded", false),
            ("multipart/form-data; boundary=x", false),
            ("text/json+", false),
        ] {
            h.insert(header::CONTENT_TYPE, HeaderValue::from_static(value));
            assert_eq!(is_json(&h), json, "{value}");
        }
    }

    #[test]
    fn a_foreign_origin_may_read_but_not_write() {
        let limits = Limits {
            cors_origins: vec!["https://app.example".into()],
            ..Limits::default()
        };
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_static("127.0.0.1:6333"));
        assert!(check_origin(&limits, &Method::POST, &h).unwrap().is_none());
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("https://evil.example"),
        );
        assert!(check_origin(&limits, &Method::POST, &h).is_err());
        assert!(check_origin(&limits, &Method::DELETE, &h).is_err());
        assert!(check_origin(&limits, &Method::GET, &h).unwrap().is_none());
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://127.0.0.1:6333"),
        );
        assert!(check_origin(&limits, &Method::POST, &h).unwrap().is_none());
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("https://app.example"),
        );
        assert!(check_origin(&limits, &Method::POST, &h).unwrap().is_some());
    }
}
