//! Cluster mode (`diskvec serve --cluster etcd://... --log nats://...`): every node answers
//! every request of the API for every collection, and routes it.
//!
//! A collection of the cluster has shards; each shard has replicas on distinct nodes, and
//! each replica is an ordinary local collection `<name>@<shard>` on its node (reachable
//! through the API under that name, which is how nodes read each other's replicas). Writes
//! go through each shard's log (a JetStream stream) and every replica applies its log in
//! order (`replicas.rs`); reads go to one live replica of each shard and are merged
//! (`merge.rs`). The shard maps live in etcd (diskvec-cluster).

mod aliases;
mod calls;
mod collections;
mod groups;
mod limits;
mod lookups;
mod matrix;
mod merge;
mod mmr;
mod ordered;
mod queries;
mod reads;
mod replicas;
mod restores;
mod seeding;
mod shard_snapshots;
mod split;
mod transfers;
mod write_checks;
mod writes;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use diskvec_cluster::{ClusterNode, ClusterSecret, CollectionMap, Log};
use diskvec_db::{Database, DbError};
use serde_json::Value;

use crate::envelope::ApiError;
use crate::AppState;

pub use replicas::start as start_replicas;

/// A request a router forwards to a replica carries the collection's uid in this header: the
/// replica answers only if it is of that incarnation of the collection and has caught up
/// with its log (else 503, and the router asks another replica).
pub const ROUTED_HEADER: &str = "x-diskvec-routed";
/// A node's own work on its replicas (creating one, applying its log) carries this header:
/// other writes to a replica are refused, since a replica changes only through its log.
pub const APPLY_HEADER: &str = "x-diskvec-apply";
/// Every request a node makes of another (or of itself) carries the node token derived from
/// the cluster's secret (`ClusterSecret::node_token`; the secret itself never travels) in
/// this header: only such requests may apply writes to a replica, reach the `/cluster/`
/// endpoints nodes use among themselves, or be spared the strict-mode checks their router
/// already made.
pub const INTERNAL_HEADER: &str = "x-diskvec-internal";

pub struct ClusterState {
    pub node: Arc<ClusterNode>,
    db: Arc<Database>,
    pub log: Log,
    /// Where each local replica's applied mark lives (`<db>/cluster`).
    pub marks_dir: PathBuf,
    /// The node's own API, for replicas' local requests (set once the router is built).
    router: OnceLock<Router>,
    http: ureq::Agent,
    api_key: Option<String>,
    replicas: Mutex<HashMap<String, Arc<replicas::LocalReplica>>>,
    /// Replicas found behind their log (its next message gone, or a restore's file): made
    /// again by copying another replica, however short the log, since replaying it would
    /// meet the same gap.
    copy_next: Mutex<std::collections::HashSet<String>>,
    /// Spreads reads over a shard's replicas.
    turn: AtomicUsize,
    /// Messages a shard's log keeps below its slowest live replica (`--log-retain`).
    pub log_retain: u64,
    /// Whether every node mounts this node's database directory at the same path
    /// (`--shared-storage`): a new replica then links the sealed segments of another
    /// instead of copying them.
    pub shared_storage: bool,
    /// This node's strict-mode rates of each cluster collection (by uid) it routes.
    rates: Mutex<HashMap<u64, diskvec_db::Rates>>,
    /// The cluster's secret for requests among nodes (`INTERNAL_HEADER`).
    secret: ClusterSecret,
    /// Messages of the logs this node's replicas follow that were refused (no tag of this
    /// cluster, or a replay), since the node started (`GET /cluster`).
    pub refused_log_messages: std::sync::atomic::AtomicU64,
}

/// How a node takes part in its cluster, besides its control plane, log and database.
pub struct NodeSettings {
    /// The key the nodes' APIs take (all nodes of a cluster share it).
    pub api_key: Option<String>,
    /// `--log-retain`.
    pub log_retain: u64,
    /// `--shared-storage`.
    pub shared_storage: bool,
    /// The cluster's secret (`--cluster-secret-file` or `DISKVEC_CLUSTER_SECRET`).
    pub secret: ClusterSecret,
}

impl ClusterState {
    pub fn new(
        node: Arc<ClusterNode>,
        db: Arc<Database>,
        log: Log,
        marks_dir: PathBuf,
        settings: NodeSettings,
    ) -> Arc<Self> {
        let NodeSettings {
            api_key,
            log_retain,
            shared_storage,
            secret,
        } = settings;
        Arc::new(Self {
            node,
            db,
            log,
            marks_dir,
            router: OnceLock::new(),
            http: ureq::AgentBuilder::new()
                .timeout_connect(std::time::Duration::from_secs(1))
                .timeout(std::time::Duration::from_secs(60))
                .build(),
            api_key,
            replicas: Mutex::new(HashMap::new()),
            copy_next: Mutex::default(),
            turn: AtomicUsize::new(0),
            log_retain,
            shared_storage,
            rates: Mutex::default(),
            secret,
            refused_log_messages: Default::default(),
        })
    }

    /// Whether a request comes from a node of this cluster (it carries the node token),
    /// compared in constant time.
    pub fn is_internal(&self, headers: &axum::http::HeaderMap) -> bool {
        headers
            .get(INTERNAL_HEADER)
            .is_some_and(|v| self.secret.is_node_token(v.as_bytes()))
    }

    /// Hands over the node's own API (built after this state, which it holds).
    pub fn set_router(&self, router: Router) {
        let _ = self.router.set(router);
    }

    fn collection(&self, name: &str) -> Result<CollectionMap, ApiError> {
        crate::points::check_name_length(name)?;
        self.node
            .view()
            .collection(name)
            .cloned()
            .ok_or_else(|| DbError::UnknownCollection(name.to_string()).into())
    }
}

/// The routing layer: requests on the cluster's collections are answered here; requests on a
/// replica (`<name>@<shard>`) and everything else go on to the node's own API.
pub async fn route(State(s): State<AppState>, req: Request, next: Next) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().replace("%40", "@");
    let replica = path
        .strip_prefix("/collections/")
        .map(|rest| decoded(rest.split('/').next().unwrap_or("")))
        .filter(|name| name.contains('@'));
    let internal = s
        .cluster
        .as_ref()
        .is_some_and(|c| c.is_internal(req.headers()));
    let applying = internal && req.headers().contains_key(APPLY_HEADER);
    let routed = req
        .headers()
        .get(ROUTED_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(calls::Route::parse);
    if let Some(name) = &replica {
        // A replica changes only through its log: reads are open (a router forwards reads
        // only), writes only to the node itself.
        let read = crate::is_read(&method, &path);
        // Snapshots change no point: made and removed by routers on the holder replica.
        let snapshot = (method == Method::POST && path.ends_with("/snapshots"))
            || (method == Method::DELETE && path.contains("/snapshots/"));
        if !applying && !read && !snapshot {
            return ApiError::bad_request(format!(
                "{name} is a replica of a cluster collection ('@' names are kept for them): write to the collection"
            ))
            .into_response();
        }
    }
    let Some(cluster) = s.cluster.clone() else {
        return next.run(req).await;
    };
    // Refused here as the node's own routes refuse it (they do not see what is routed).
    if let Err(e) = crate::timeout_param(&req) {
        return e.into_response();
    }
    let started = Instant::now();
    let query = req.uri().query().map(str::to_string);
    if path == "/cluster" && method == Method::GET {
        return collections::cluster_info(&cluster, started).await;
    }
    let among_nodes = [
        "/cluster/applied/",
        "/cluster/snapshot/",
        "/cluster/restore/",
    ];
    if !internal && among_nodes.iter().any(|p| path.starts_with(p)) {
        return ApiError {
            status: axum::http::StatusCode::FORBIDDEN,
            message: format!("{path} is for the cluster's nodes only"),
            retry_after: None,
        }
        .into_response();
    }
    if let Some(local) = path.strip_prefix("/cluster/applied/") {
        return writes::applied_endpoint(&cluster, local, query.as_deref()).await;
    }
    if let Some(rest) = path.strip_prefix("/cluster/snapshot/") {
        return match (method.as_str(), rest.split_once('/')) {
            ("POST", None) => seeding::snapshot_endpoint(&cluster, rest, query.as_deref()).await,
            ("POST", Some((local, name))) => {
                seeding::download_endpoint(&cluster, local, name, query.as_deref()).await
            }
            _ => ApiError::not_found(format!("{method} {path}")).into_response(),
        };
    }
    if let Some(file) = path.strip_prefix("/cluster/restore/") {
        if method == Method::POST {
            return restores::file_endpoint(&cluster, file).await;
        }
    }
    if path == "/collections" && method == Method::GET {
        return collections::list(&cluster, started);
    }
    if path == "/aliases" && method == Method::GET {
        return aliases::list(&cluster, None, started);
    }
    if path == "/collections/aliases" && method == Method::POST {
        return match axum::body::to_bytes(req.into_body(), crate::MAX_BODY_BYTES).await {
            Ok(body) => aliases::update(&cluster, &body, started).await,
            Err(e) => ApiError::bad_request(format!("reading the body: {e}")).into_response(),
        };
    }
    if let Some(name) = replica {
        if let Some(route) = routed {
            if let Err(why) = replicas::serve_routed(&cluster, &name, route).await {
                return ApiError::unavailable(format!("replica {name} {why}")).into_response();
            }
        }
        if internal {
            return next.run(req).await;
        }
        // A client reading a replica itself is checked as a router checks the collection's
        // requests (the replica checks only what its data answers).
        let (parts, body) = req.into_parts();
        let body = match axum::body::to_bytes(body, crate::MAX_BODY_BYTES).await {
            Ok(b) => b,
            Err(e) => {
                return ApiError::bad_request(format!("reading the body: {e}")).into_response()
            }
        };
        let base = name.rsplit_once('@').map_or(name.as_str(), |(b, _)| b);
        if let Ok(map) = cluster.collection(base) {
            let direct = Routed {
                method: parts.method.clone(),
                name: base.to_string(),
                tail: path
                    .strip_prefix("/collections/")
                    .and_then(|rest| rest.find('/').map(|at| rest[at..].to_string()))
                    .unwrap_or_default(),
                query,
                body: body.clone(),
                started,
            };
            if let Err(e) = limits::check(&cluster, &map, &direct) {
                return e.into_response();
            }
        }
        return next.run(Request::from_parts(parts, body.into())).await;
    }
    let Some(rest) = path.strip_prefix("/collections/") else {
        return next.run(req).await;
    };
    let (name, tail) = match rest.find('/') {
        Some(at) => (decoded(&rest[..at]), rest[at..].to_string()),
        None => (decoded(rest), String::new()),
    };
    // An alias means its collection, except to create or drop a collection of that name.
    let name = if tail.is_empty() && (method == Method::PUT || method == Method::DELETE) {
        name
    } else {
        cluster.node.view().resolve(&name).to_string()
    };
    if method == Method::POST && tail.ends_with("/snapshots/upload") {
        if let Some((shelf, _)) = shard_snapshots::parse(&tail) {
            return shard_snapshots::upload(&cluster, name, shelf, query, req)
                .await
                .unwrap_or_else(|e| e.into_response());
        }
    }
    let body = match axum::body::to_bytes(req.into_body(), crate::MAX_BODY_BYTES).await {
        Ok(b) => b,
        Err(e) => return ApiError::bad_request(format!("reading the body: {e}")).into_response(),
    };
    let request = Routed {
        method,
        name,
        tail,
        query,
        body,
        started,
    };
    match handle(&cluster, request).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

/// A collection name as a path segment carries it, percent-decoded (as the node's own API
/// decodes it).
fn decoded(segment: &str) -> String {
    percent_encoding::percent_decode_str(segment)
        .decode_utf8_lossy()
        .into_owned()
}

/// A request on a cluster collection, as the router handles it.
pub(crate) struct Routed {
    pub method: Method,
    pub name: String,
    /// The path after `/collections/<name>`: empty, or starting with `/`.
    pub tail: String,
    pub query: Option<String>,
    pub body: Bytes,
    pub started: Instant,
}

impl Routed {
    /// The body as JSON (`{}` when empty).
    pub fn json(&self) -> Result<Value, ApiError> {
        if self.body.iter().all(u8::is_ascii_whitespace) {
            return Ok(Value::Object(Default::default()));
        }
        serde_json::from_slice(&self.body)
            .map_err(|e| ApiError::bad_request(format!("the body is not JSON: {e}")))
    }

    /// Whether the read asks for a `consistency` above one replica (`majority`, `quorum`,
    /// `all`, or a number over 1): it is answered by replicas that applied everything their
    /// log held when it began, so it never sees data older than a write acknowledged before.
    pub fn wants_fresh(&self) -> bool {
        crate::query_param(self.query.as_deref(), "consistency").is_some_and(|v| v != "1")
    }

    /// Whether the request asks to wait until the write is applied (Qdrant's `wait`, bare or
    /// `=true`).
    pub fn waits(&self) -> bool {
        matches!(
            crate::query_param(self.query.as_deref(), "wait"),
            Some("true" | "")
        )
    }

    /// A read of a shard's replica with this request's method, path, query and `consistency`.
    pub fn shard_read(&self, body: Bytes) -> calls::ShardRead {
        self.shard_read_at(&self.tail, body)
    }

    /// A POST to `tail` of a shard's replica, with this request's query and `consistency`:
    /// a step of a request the router answers from several reads.
    pub fn shard_read_at(&self, tail: &str, body: Bytes) -> calls::ShardRead {
        calls::ShardRead {
            method: if tail == self.tail {
                self.method.clone()
            } else {
                Method::POST
            },
            tail: match &self.query {
                Some(q) if !q.is_empty() => format!("{tail}?{q}"),
                _ => tail.to_string(),
            },
            body,
            fresh: self.wants_fresh(),
        }
    }
}

const WRITES: &[(&str, &str)] = &[
    ("PUT", "/points"),
    ("POST", "/points/delete"),
    ("POST", "/points/payload"),
    ("PUT", "/points/payload"),
    ("POST", "/points/payload/delete"),
    ("POST", "/points/payload/clear"),
    ("PUT", "/points/vectors"),
    ("POST", "/points/vectors/delete"),
    ("POST", "/points/batch"),
    ("PUT", "/index"),
    ("PATCH", ""),
];

/// Whether a write changes the collection itself (its settings, payload indexes, vector
/// spaces) rather than points: it goes to every shard, whatever key it names.
pub(crate) fn is_schema_change(method: &str, tail: &str) -> bool {
    (method == "PATCH" && tail.is_empty())
        || (method == "PUT" && tail == "/index")
        || (method == "DELETE" && tail.starts_with("/index/"))
        || ((method == "PUT" || method == "DELETE") && tail.starts_with("/vectors/"))
}

async fn handle(c: &Arc<ClusterState>, r: Routed) -> Result<Response, ApiError> {
    let m = r.method.as_str();
    let tail = r.tail.as_str();
    match (m, tail) {
        ("PUT", "") => return collections::create(c, r).await,
        ("DELETE", "") => return collections::delete(c, r).await,
        ("GET", "/exists") => return Ok(collections::exists(c, &r)),
        _ => {}
    }
    if let Some((shelf, rest)) = shard_snapshots::parse(tail) {
        let (rest, map) = (rest.to_string(), c.node.view().collection(&r.name).cloned());
        return shard_snapshots::handle(c, map.as_ref(), r, shelf, &rest).await;
    }
    let map = c.collection(&r.name)?;
    limits::check(c, &map, &r)?;
    if is_schema_change(m, tail) || WRITES.contains(&(m, tail)) {
        return writes::write(c, &map, r).await;
    }
    match (m, tail) {
        ("GET", "") => collections::info(c, &map, r).await,
        ("GET", "/cluster") => Ok(collections::collection_cluster(c, &map, &r).await),
        ("GET", "/aliases") => Ok(aliases::list(c, Some(&r.name), r.started)),
        ("POST", "/cluster") => {
            let op = r.json()?;
            if let Some(args) = op.get("create_sharding_key") {
                collections::create_key(c, &r.name, args, r.started).await
            } else if let Some(args) = op.get("drop_sharding_key") {
                collections::drop_key(c, &r.name, args, r.started).await
            } else {
                transfers::update(c, r).await
            }
        }
        ("PUT", "/shards") => collections::create_key(c, &r.name, &r.json()?, r.started).await,
        ("POST", "/shards/delete") => {
            collections::drop_key(c, &r.name, &r.json()?, r.started).await
        }
        ("GET", "/shards") => Ok(collections::list_keys(&map, r.started)),
        ("POST", "/points") => reads::retrieve(c, &map, r).await,
        ("POST", "/points/scroll") => reads::scroll(c, &map, r).await,
        ("POST", "/points/count") => reads::count(c, &map, r).await,
        ("POST", "/points/search") => reads::scored(c, &map, r).await,
        ("POST", "/points/query") => queries::query(c, &map, r).await,
        ("POST", "/points/search/batch") => reads::scored_batch(c, &map, r).await,
        ("POST", "/points/query/batch") => queries::batch(c, &map, r).await,
        ("POST", "/points/query/groups") | ("POST", "/points/search/groups") => {
            groups::groups(c, &map, r).await
        }
        ("POST", "/facet") => groups::facet(c, &map, r).await,
        ("POST", "/points/search/matrix/pairs") | ("POST", "/points/search/matrix/offsets") => {
            matrix::matrix(c, &map, r).await
        }
        ("GET", t) if t.starts_with("/points/") => reads::get_one(c, &map, r).await,
        // What reaches one shard is that shard's replica's to answer.
        _ if m == "GET" || m == "POST" => reads::forward_whole(c, &map, r).await,
        _ => Err(ApiError::bad_request(format!(
            "{m} /collections/{}{tail} is not supported on a cluster collection",
            r.name
        ))),
    }
}
