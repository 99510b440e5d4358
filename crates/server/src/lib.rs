//! `diskvec serve`: Qdrant's REST API (the common path) over diskvec's database layer, so
//! clients written for Qdrant (qdrant-client, VectorDBBench) work unchanged.
//!
//! Handlers parse and answer on the HTTP runtime; every database call runs on tokio's
//! blocking pool (`blocking`), and sealed segments' graph searches on their own search
//! threads, so a slow search never holds a runtime thread.

mod admission;
mod cluster;
mod collections;
mod convert;
mod envelope;
mod groups;
mod listen;
mod matrix;
mod metrics;
mod optimizations;
mod payload_paths;
mod points;
mod quantization;
mod query;
mod settings;
mod shard_snapshots;
mod snapshots;
mod spaces_route;
mod strict;
mod writes;

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{DefaultBodyLimit, RawQuery, Request, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, put};
use axum::Router;
use diskvec_db::Database;
use serde_json::json;

pub use admission::Limits;
pub use cluster::{ClusterState, NodeSettings};
pub use envelope::ApiError;

/// The version `GET /` reports: a Qdrant release whose API this server follows for the
/// common path, so clients do not warn about an incompatible server.
pub const QDRANT_COMPATIBLE_VERSION: &str = "1.20.0";

/// Largest body of a request among a cluster's nodes (a client's is bounded by
/// [`Limits::max_body_bytes`] first).
pub const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;

#[derive(Clone, Default)]
pub struct Keys {
    /// Required for every request when set (`api-key` header or `Authorization: Bearer`).
    pub api_key: Option<String>,
    /// Also accepted, for reads only.
    pub read_only_key: Option<String>,
}

#[derive(Clone)]
pub struct AppState {
    pub db: Arc<Database>,
    pub keys: Keys,
    metrics: Arc<metrics::Metrics>,
    /// Set when the node is part of a cluster: requests on the cluster's collections are
    /// routed (`cluster::route`).
    pub cluster: Option<Arc<ClusterState>>,
    /// What a request may be and spend (`admission::admit`).
    admission: Arc<admission::Admission>,
}

impl AppState {
    pub fn new(db: Arc<Database>, keys: Keys) -> Self {
        Self::with_limits(db, keys, Limits::default())
    }

    pub fn with_limits(db: Arc<Database>, keys: Keys, limits: Limits) -> Self {
        Self {
            db,
            keys,
            metrics: Arc::default(),
            cluster: None,
            admission: Arc::new(admission::Admission::new(limits)),
        }
    }

    pub fn limits(&self) -> &Limits {
        &self.admission.limits
    }
}

/// Longest `timeout` a request may ask for, in seconds.
pub const MAX_TIMEOUT_SECS: u64 = 86_400;

/// Runs `work` on the blocking pool (database calls may wait for disk or a fsync).
pub(crate) async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: format!("the request's worker failed: {e}"),
            retry_after: None,
        })?
}

/// The whole API.
pub fn router(state: AppState) -> Router {
    snapshots::sweep_temporaries(&state.db.snapshots_dir());
    let c = "/collections/{name}";
    Router::new()
        .route("/", get(root))
        .route("/healthz", get(health))
        .route("/livez", get(health))
        .route("/readyz", get(ready))
        .route("/collections", get(collections::list))
        .route("/collections/aliases", post(collections::update_aliases))
        .route("/aliases", get(collections::list_aliases))
        .route(
            c,
            put(collections::create)
                .get(collections::info)
                .delete(collections::remove)
                .patch(collections::update),
        )
        .route(&format!("{c}/exists"), get(collections::exists))
        .route(&format!("{c}/optimizations"), get(optimizations::list))
        .route(
            &format!("{c}/aliases"),
            get(collections::collection_aliases),
        )
        .route(&format!("{c}/index"), put(collections::create_index))
        .route(
            &format!("{c}/vectors/{{vector}}"),
            put(spaces_route::create).delete(spaces_route::delete),
        )
        .route(
            &format!("{c}/index/{{field}}"),
            delete(collections::delete_index),
        )
        .route(
            &format!("{c}/points"),
            put(writes::upsert).post(points::retrieve),
        )
        .route(&format!("{c}/points/{{id}}"), get(points::get_one))
        .route(&format!("{c}/points/delete"), post(writes::delete))
        .route(&format!("{c}/points/batch"), post(writes::batch))
        .route(&format!("{c}/points/vectors"), put(writes::update_vectors))
        .route(
            &format!("{c}/points/vectors/delete"),
            post(writes::delete_vectors),
        )
        .route(
            &format!("{c}/points/payload"),
            post(writes::set_payload).put(writes::overwrite_payload),
        )
        .route(
            &format!("{c}/points/payload/delete"),
            post(writes::delete_payload),
        )
        .route(
            &format!("{c}/points/payload/clear"),
            post(writes::clear_payload),
        )
        .route(&format!("{c}/points/scroll"), post(points::scroll))
        .route(&format!("{c}/points/count"), post(points::count))
        .route(&format!("{c}/facet"), post(points::facet))
        .route(&format!("{c}/points/search"), post(points::search))
        .route(
            &format!("{c}/points/search/batch"),
            post(points::search_batch),
        )
        .route(&format!("{c}/points/query"), post(query::query_one))
        .route(
            &format!("{c}/points/query/groups"),
            post(groups::query_groups),
        )
        .route(
            &format!("{c}/points/search/groups"),
            post(groups::search_groups),
        )
        .route(
            &format!("{c}/points/search/matrix/pairs"),
            post(matrix::pairs),
        )
        .route(
            &format!("{c}/points/search/matrix/offsets"),
            post(matrix::offsets),
        )
        .route(&format!("{c}/points/query/batch"), post(query::query_batch))
        .route(
            &format!("{c}/snapshots"),
            get(snapshots::list).post(snapshots::create),
        )
        .route(&format!("{c}/snapshots/recover"), put(snapshots::recover))
        .route(
            &format!("{c}/snapshots/upload"),
            post(shard_snapshots::upload_collection),
        )
        .route(
            &format!("{c}/shards/{{shard}}/snapshots"),
            get(shard_snapshots::list).post(shard_snapshots::create),
        )
        .route(
            &format!("{c}/shards/{{shard}}/snapshots/recover"),
            put(shard_snapshots::recover),
        )
        .route(
            &format!("{c}/shards/{{shard}}/snapshots/upload"),
            post(shard_snapshots::upload),
        )
        .route(
            &format!("{c}/shards/{{shard}}/snapshots/{{snapshot}}"),
            get(shard_snapshots::download).delete(shard_snapshots::delete),
        )
        .route(
            &format!("{c}/shards/{{shard}}/snapshot/partial/recover"),
            post(shard_snapshots::partial_recover),
        )
        .route(
            &format!("{c}/snapshots/{{snapshot}}"),
            get(snapshots::download).delete(snapshots::delete),
        )
        .route(
            "/snapshots",
            get(snapshots::list_full).post(snapshots::create_full),
        )
        .route(
            "/snapshots/{snapshot}",
            get(snapshots::download_full).delete(snapshots::delete_full),
        )
        .route("/cluster", get(standalone_cluster))
        .route("/cluster/recover", post(cluster_membership_change))
        .route("/cluster/peer/{peer_id}", delete(cluster_membership_change))
        .route("/metrics", get(prometheus))
        .route("/issues", get(issues).delete(clear_issues))
        .route("/telemetry", get(telemetry))
        .route_layer(axum::middleware::from_fn(deadline))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            strict_timeout,
        ))
        .fallback(not_found)
        .method_not_allowed_fallback(not_allowed)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            cluster::route,
        ))
        // Outside the routing layer: requests a cluster's router answers itself count too.
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            metrics::track,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            admission::admit,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            authorize,
        ))
        .layer(DefaultBodyLimit::max(state.limits().max_body_bytes))
        .with_state(state)
}

/// Qdrant's answer, key for key (clients and Qdrant's REST suite check them): the title
/// Qdrant gives, the Qdrant version whose API this speaks, and the commit diskvec was built
/// from. diskvec's own version is in `/telemetry`.
async fn root() -> Response {
    axum::Json(json!({
        "title": "qdrant - vector search engine",
        "version": QDRANT_COMPATIBLE_VERSION,
        "commit": env!("DISKVEC_COMMIT"),
    }))
    .into_response()
}

/// `GET /issues`: Qdrant's list of performance issues it noticed; diskvec reports its
/// problems in `info()` and `/metrics` instead, so the list is empty.
async fn issues() -> Response {
    crate::envelope::ok(json!({"issues": []}), std::time::Instant::now())
}

/// `DELETE /issues`: nothing to clear.
async fn clear_issues() -> Response {
    crate::envelope::ok(json!(true), std::time::Instant::now())
}

/// `GET /cluster` of a node that is not in a cluster (a cluster's node answers it in
/// `cluster::route`): Qdrant's answer in standalone mode.
async fn standalone_cluster() -> Response {
    crate::envelope::ok(json!({"status": "disabled"}), std::time::Instant::now())
}

/// Recovering Qdrant's Raft state or removing a peer: a standalone node has neither (405,
/// Qdrant's answer); in a cluster, membership is etcd's (a node leaves when its lease lapses).
async fn cluster_membership_change(State(s): State<AppState>) -> ApiError {
    if s.cluster.is_some() {
        return ApiError::bad_request(
            "membership is kept in etcd: a node leaves when it stops (its lease lapses within 5 s)",
        );
    }
    ApiError {
        status: StatusCode::METHOD_NOT_ALLOWED,
        message: "Cluster is disabled: this operation is not available in standalone mode".into(),
        retry_after: None,
    }
}

async fn health() -> &'static str {
    "healthz check passed"
}

/// Every collection opens before the server listens, so a listening server is ready.
async fn ready() -> &'static str {
    "all shards are ready"
}

async fn prometheus(State(s): State<AppState>, RawQuery(query): RawQuery) -> Response {
    metrics::page(&s, true, query.as_deref()).await
}

/// `/telemetry`: diskvec's figures as JSON, or Qdrant's `TelemetryData` at `details_level`.
async fn telemetry(State(s): State<AppState>, RawQuery(query): RawQuery) -> Response {
    metrics::page(&s, false, query.as_deref()).await
}

/// The value of parameter `name` in a query string (`""` when it is given bare).
pub(crate) fn query_param<'q>(query: Option<&'q str>, name: &str) -> Option<&'q str> {
    query?.split('&').find_map(|kv| match kv.split_once('=') {
        Some((k, v)) if k == name => Some(v),
        None if kv == name => Some(""),
        _ => None,
    })
}

/// A collection's strict mode bounds the `?timeout=` a request on it may ask for.
async fn strict_timeout(State(s): State<AppState>, req: Request, next: Next) -> Response {
    let asked = query_param(req.uri().query(), "timeout").and_then(|t| t.parse::<u64>().ok());
    let collection = req
        .uri()
        .path()
        .strip_prefix("/collections/")
        .and_then(|rest| rest.split('/').next())
        .and_then(|name| s.db.collection(name).ok());
    if let (Some(seconds), Some(col)) = (asked, collection) {
        if let Err(e) = strict::timeout(&*col, seconds) {
            return e.into_response();
        }
    }
    next.run(req).await
}

/// Qdrant's `?timeout=SECONDS`: past it the client gets 408. The work itself is not
/// interrupted (a write may still be applied, as with Qdrant); only the wait ends.
/// A request's `timeout` parameter in seconds (`None` without one), or why it is refused.
pub(crate) fn timeout_param(req: &Request) -> Result<Option<u64>, ApiError> {
    let Some(asked) = query_param(req.uri().query(), "timeout") else {
        return Ok(None);
    };
    match asked.parse::<u64>() {
        Ok(s) if (1..=MAX_TIMEOUT_SECS).contains(&s) => Ok(Some(s)),
        // Qdrant's words for a zero timeout.
        Ok(0) => Err(ApiError::validation_in(
            "query parameters",
            "timeout: value 0 invalid, must be 1 or larger",
        )),
        _ => Err(ApiError::bad_request(format!(
            "timeout must be a whole number of seconds from 1 to {MAX_TIMEOUT_SECS}, not {asked:?}"
        ))),
    }
}

async fn deadline(req: Request, next: Next) -> Response {
    let secs = match timeout_param(&req) {
        Ok(Some(secs)) => secs,
        Ok(None) => return next.run(req).await,
        Err(e) => return e.into_response(),
    };
    match tokio::time::timeout(std::time::Duration::from_secs(secs), next.run(req)).await {
        Ok(response) => response,
        Err(_) => ApiError {
            status: StatusCode::REQUEST_TIMEOUT,
            message: format!(
                "Timeout error: no answer within {secs} s (a write may still be applied)"
            ),
            retry_after: None,
        }
        .into_response(),
    }
}

async fn not_found() -> ApiError {
    ApiError::not_found("no such route")
}

/// A route asked with a method it does not take: an error in the envelope clients parse.
async fn not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError {
        status: axum::http::StatusCode::METHOD_NOT_ALLOWED,
        message: format!("{method} is not allowed on {}", uri.path()),
        retry_after: None,
    }
}

/// Checks the API key: 401 without one, 403 for a write with the read-only key.
async fn authorize(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let Some(key) = &state.keys.api_key else {
        return next.run(req).await;
    };
    // The root only tells the version, which clients ask before they send a key.
    let open = matches!(req.uri().path(), "/" | "/healthz" | "/livez" | "/readyz");
    if open {
        return next.run(req).await;
    }
    let given = presented_key(req.headers());
    let matches = |wanted: &Option<String>| match (&given, wanted) {
        (Some(g), Some(w)) => same_key(g, w),
        _ => false,
    };
    if matches(&Some(key.clone())) {
        return next.run(req).await;
    }
    if matches(&state.keys.read_only_key) {
        if is_read(req.method(), req.uri().path()) {
            return next.run(req).await;
        }
        return ApiError {
            status: StatusCode::FORBIDDEN,
            message: "the read-only API key cannot write".into(),
            retry_after: None,
        }
        .into_response();
    }
    ApiError {
        status: StatusCode::UNAUTHORIZED,
        message: "missing or wrong API key (send it as the `api-key` header)".into(),
        retry_after: None,
    }
    .into_response()
}

/// Whether a presented key is the wanted one, in time that tells nothing of where they
/// differ nor of the key's length (their digests are compared, in constant time).
fn same_key(given: &str, wanted: &str) -> bool {
    use sha2::{Digest, Sha256};
    use subtle::ConstantTimeEq;
    let (g, w) = (Sha256::digest(given), Sha256::digest(wanted));
    g.ct_eq(&w).into()
}

fn presented_key(h: &HeaderMap) -> Option<String> {
    if let Some(k) = h.get("api-key").and_then(|v| v.to_str().ok()) {
        return Some(k.to_string());
    }
    h.get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(String::from)
}

/// Reads: GETs, and the POSTs that only look (retrieve, scroll, count, search, query,
/// facets, groups, distance matrices).
pub(crate) fn is_read(method: &Method, path: &str) -> bool {
    if method == Method::GET {
        return true;
    }
    method == Method::POST
        && (path.ends_with("/points")
            || [
                "/scroll",
                "/count",
                "/search",
                "/search/batch",
                "/query",
                "/query/batch",
                "/facet",
                "/query/groups",
                "/search/groups",
                "/matrix/pairs",
                "/matrix/offsets",
            ]
            .iter()
            .any(|s| path.ends_with(s)))
}

/// Serves `db` on `listener` until `shutdown` resolves, then finishes the requests in
/// flight and closes the database (every logged write made durable).
pub async fn serve(
    db: Arc<Database>,
    keys: Keys,
    limits: Limits,
    cluster: Option<Arc<ClusterState>>,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let mut state = AppState::with_limits(Arc::clone(&db), keys, limits.clone());
    state.cluster = cluster.clone();
    let app = router(state.clone());
    if let Some(c) = &cluster {
        c.set_router(app.clone());
        cluster::start_replicas(state);
    }
    let started = Instant::now();
    // A node of a cluster leaves first (its lease revoked: routers stop sending it requests
    // at once, not when the lease lapses), then finishes what is in flight.
    let leaving = cluster.clone();
    let shutdown = async move {
        shutdown.await;
        if let Some(c) = leaving {
            let node = Arc::clone(&c.node);
            let _ = tokio::task::spawn_blocking(move || node.leave()).await;
        }
    };
    listen::serve_connections(listener, app, &limits, shutdown).await?;
    let closing = tokio::task::spawn_blocking(move || db.close());
    match closing.await {
        Ok(Ok(())) => {
            log::info!(
                "closed the database after {:.0} s",
                started.elapsed().as_secs_f64()
            );
            Ok(())
        }
        Ok(Err(e)) => Err(std::io::Error::other(e.to_string())),
        Err(e) => Err(std::io::Error::other(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use tower::ServiceExt;

    async fn status_of(app: &Router, uri: &str) -> StatusCode {
        let req = axum::http::Request::builder()
            .uri(uri)
            .body(Body::empty())
            .unwrap();
        app.clone().oneshot(req).await.unwrap().status()
    }

    #[tokio::test]
    async fn a_request_past_its_timeout_gets_408_and_others_are_untouched() {
        let slow = || async {
            tokio::time::sleep(std::time::Duration::from_millis(2_500)).await;
            "done"
        };
        let app = Router::new()
            .route("/slow", get(slow))
            .route_layer(axum::middleware::from_fn(deadline));
        assert_eq!(
            status_of(&app, "/slow?timeout=1").await,
            StatusCode::REQUEST_TIMEOUT
        );
        assert_eq!(status_of(&app, "/slow?timeout=10").await, StatusCode::OK);
        assert_eq!(status_of(&app, "/slow").await, StatusCode::OK);
        assert_eq!(
            status_of(&app, "/slow?timeout=soon").await,
            StatusCode::BAD_REQUEST
        );
    }
}
