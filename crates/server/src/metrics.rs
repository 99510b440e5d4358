//! What the server counts about its requests, and the two views of it: `/metrics`
//! (Prometheus text) and `/telemetry` (JSON).
//!
//! Both speak Qdrant's shapes beside diskvec's own: `/metrics` adds Qdrant's families
//! (`app_info`, `collections_total`, `collection_points{id}`, `rest_responses_*` with
//! Qdrant's endpoint templates) after the `diskvec_*` ones, and `/telemetry?details_level=N`
//! answers Qdrant's `TelemetryData` at that level. Without `details_level`, `/telemetry`
//! is diskvec's own view: each collection's segments, WAL, builds and storage I/O, with
//! Qdrant's level-0 keys beside them.
//!
//! `page` answers both routes, with or without `details_level` and `per_collection`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use diskvec_db::{CollectionInfo, Database, PathIo};
use serde_json::{json, Map, Value};

use crate::{ApiError, AppState};

/// Upper edges of the latency histogram, in seconds.
const EDGES: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Requests of one route (method and path template) that ended with one status.
#[derive(Clone, Default)]
struct Outcome {
    count: u64,
    /// Requests per histogram bucket (the last one: above every edge).
    buckets: [u64; EDGES.len() + 1],
    total: Duration,
    min: Option<Duration>,
    max: Duration,
    /// When the last of them was answered.
    last: Option<SystemTime>,
}

impl Outcome {
    fn add(&mut self, took: Duration) {
        self.last = Some(SystemTime::now());
        self.count += 1;
        let secs = took.as_secs_f64();
        let bucket = EDGES.iter().position(|&e| secs <= e).unwrap_or(EDGES.len());
        self.buckets[bucket] += 1;
        self.total += took;
        self.min = Some(self.min.map_or(took, |m| m.min(took)));
        self.max = self.max.max(took);
    }
}

/// Route -> status -> outcome.
type Routes = BTreeMap<String, BTreeMap<u16, Outcome>>;

/// Route -> status -> outcome. A route is "METHOD /path/{template}", so the set is bounded
/// by the API, never by what clients send; the per-collection set only holds collections
/// that existed when their request was answered.
pub struct Metrics {
    started: Instant,
    /// Wall-clock time of `started` (Qdrant's `app.startup`).
    started_at: SystemTime,
    /// This process's telemetry id (Qdrant's `id`: a random UUID per start).
    id: String,
    routes: Mutex<Routes>,
    /// Collection -> its requests' routes (those whose path names a collection).
    per_collection: Mutex<BTreeMap<String, Routes>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            started: Instant::now(),
            started_at: SystemTime::now(),
            id: random_uuid(),
            routes: Mutex::new(BTreeMap::new()),
            per_collection: Mutex::new(BTreeMap::new()),
        }
    }
}

impl Metrics {
    fn record(&self, route: String, collection: Option<String>, status: u16, took: Duration) {
        if let Some(name) = collection {
            let mut per = self
                .per_collection
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            per.entry(name)
                .or_default()
                .entry(route.clone())
                .or_default()
                .entry(status)
                .or_default()
                .add(took);
        }
        let mut routes = self.routes.lock().unwrap_or_else(|e| e.into_inner());
        routes
            .entry(route)
            .or_default()
            .entry(status)
            .or_default()
            .add(took);
    }

    fn snapshot(&self) -> Routes {
        self.routes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The per-collection routes of the collections in `names` (a dropped collection's
    /// requests are not reported).
    fn per_collection_snapshot(&self, names: &[&str]) -> BTreeMap<String, Routes> {
        self.per_collection
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|(name, _)| names.contains(&name.as_str()))
            .map(|(name, routes)| (name.clone(), routes.clone()))
            .collect()
    }
}

/// A random version-4 UUID, from the standard library's randomly keyed hasher (the server
/// has no UUID crate; Qdrant's telemetry id is one random UUID per process).
fn random_uuid() -> String {
    use std::hash::{BuildHasher, Hasher};
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let word = |i: u8| {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u8(i);
        h.write_u128(nanos);
        h.write_u32(std::process::id());
        h.finish()
    };
    let (a, b) = (word(0), word(1));
    let b = (b & 0x3fff_ffff_ffff_ffff) | 0x8000_0000_0000_0000;
    format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0x0fff,
        b >> 48,
        b & 0xffff_ffff_ffff
    )
}

/// A UUID-shaped name for a segment: diskvec's segments have numeric ids, not UUIDs, so
/// this is the collection's name hashed (FNV-1a) and the segment's id, stable per segment.
fn segment_uuid(collection: &str, id: u64) -> String {
    let hash = collection.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    format!("{hash:08x}-0000-4000-8000-{:012x}", id & 0xffff_ffff_ffff)
}

/// RFC 3339 in UTC with microseconds (Qdrant's `last_responded`, `startup`).
fn rfc3339(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let t = diskvec_db::UtcTime::from_unix(d.as_secs());
    format!("{}.{:06}Z", t.iso(), d.subsec_micros())
}

/// A route as Qdrant names it: its path templates call the collection `{collection_name}`
/// and a payload index's field `{field_name}`, where diskvec's router says `{name}` and
/// `{field}`.
fn qdrant_route(route: &str) -> String {
    route
        .replace("{name}", "{collection_name}")
        .replace("{field}", "{field_name}")
}

/// Decodes a percent-encoded path segment (a collection name with spaces or slashes).
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[i], bytes.get(i + 1), bytes.get(i + 2)) {
            (b'%', Some(&h), Some(&l)) if hex(h).is_some() && hex(l).is_some() => {
                out.push((hex(h).unwrap_or(0) * 16 + hex(l).unwrap_or(0)) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// What a `/telemetry` or `/metrics` request asks for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct View {
    /// Qdrant's `details_level`; `None`: diskvec's own view (with Qdrant's level-0 keys).
    level: Option<usize>,
    /// Qdrant's `per_collection`: request statistics per collection as well.
    per_collection: bool,
}

impl View {
    /// The view a query string asks for, `None` when it names none of `details_level` and
    /// `per_collection` (`anonymize` is accepted and ignored: nothing is hashed; `timeout`
    /// is left to the route's own handling).
    fn from_query(query: Option<&str>) -> Result<Option<View>, ApiError> {
        let mut view = View::default();
        let mut named = false;
        for kv in query.unwrap_or("").split('&').filter(|kv| !kv.is_empty()) {
            let (key, value) = kv.split_once('=').unwrap_or((kv, ""));
            match key {
                "details_level" => {
                    named = true;
                    view.level = Some(value.parse().map_err(|_| {
                        ApiError::bad_request(format!(
                            "Query deserialize error: details_level must be a whole number \
                             from 0 up, not {value:?}"
                        ))
                    })?);
                }
                "per_collection" => {
                    named = true;
                    view.per_collection = match value {
                        "true" => true,
                        "false" => false,
                        _ => {
                            return Err(ApiError::bad_request(format!(
                                "Query deserialize error: per_collection must be true or \
                                 false, not {value:?}"
                            )))
                        }
                    };
                }
                _ => {}
            }
        }
        Ok(named.then_some(view))
    }
}

enum Answer {
    Json(Value),
    Text(String),
}

/// `GET /telemetry` (`metrics_page` false) or `GET /metrics`, with the view `query` asks
/// for (none: diskvec's own, with Qdrant's level-0 keys).
pub(crate) async fn page(s: &AppState, metrics_page: bool, query: Option<&str>) -> Response {
    match View::from_query(query) {
        Ok(view) => answer(s, metrics_page, view.unwrap_or_default()).await,
        Err(e) => e.into_response(),
    }
}

async fn answer(s: &AppState, metrics_page: bool, view: View) -> Response {
    let t = Instant::now();
    let (db, metrics) = (s.db.clone(), s.metrics.clone());
    let cluster_collections: Option<Vec<(String, Value)>> = s.cluster.as_ref().map(|c| {
        c.node
            .view()
            .collections
            .iter()
            .map(|(name, (map, _))| (name.clone(), map.config.clone()))
            .collect()
    });
    let result = crate::blocking(move || {
        let mut figures = collection_figures(&db);
        if let Some(collections) = cluster_collections {
            figures = by_cluster_collection(figures, collections);
        }
        Ok(if metrics_page {
            Answer::Text(prometheus_view(&metrics, &figures, view))
        } else {
            Answer::Json(telemetry_view(&metrics, &figures, view))
        })
    })
    .await;
    match result {
        Ok(Answer::Json(telemetry)) => crate::envelope::ok(telemetry, t),
        Ok(Answer::Text(text)) => (
            [(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        Err(e) => e.into_response(),
    }
}

/// Times every request by the route it matched ("unmatched" for none), and for a route
/// under `/collections/{name}`, for that collection too (a cluster collection's, on a
/// cluster node).
pub async fn track(State(s): State<AppState>, req: Request, next: Next) -> Response {
    // What nodes of a cluster ask each other is not a client's request.
    if s.cluster
        .as_ref()
        .is_some_and(|c| c.is_internal(req.headers()))
    {
        return next.run(req).await;
    }
    let matched = req
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", |p| p.as_str())
        .to_string();
    // Methods beyond HTTP's own are one label, so that clients cannot grow the set.
    let method = match *req.method() {
        Method::GET
        | Method::POST
        | Method::PUT
        | Method::DELETE
        | Method::PATCH
        | Method::HEAD
        | Method::OPTIONS => req.method().as_str(),
        _ => "OTHER",
    };
    let route = format!("{method} {matched}");
    let named = matched
        .starts_with("/collections/{name}")
        .then(|| percent_decode(req.uri().path().split('/').nth(2).unwrap_or_default()));
    let started = Instant::now();
    let response = next.run(req).await;
    // Under its collection's own name (an alias resolves to it); a name that is no
    // collection is not kept.
    let collection = named.and_then(|name| {
        match &s.cluster {
            Some(c) => {
                let view = c.node.view();
                let name = view.resolve(&name);
                view.collection(name).map(|_| name.to_string())
            }
            None => None,
        }
        .or_else(|| s.db.collection(&name).ok().map(|c| c.name().to_string()))
    });
    s.metrics.record(
        route,
        collection,
        response.status().as_u16(),
        started.elapsed(),
    );
    response
}

/// What every collection reports, read on the blocking pool (it takes segment locks).
pub(crate) struct CollectionFigures {
    info: CollectionInfo,
    io: Vec<PathIo>,
}

pub(crate) fn collection_figures(db: &Database) -> Vec<CollectionFigures> {
    db.collection_names()
        .into_iter()
        .filter_map(|name| db.collection(&name).ok())
        .map(|c| CollectionFigures {
            info: c.info(),
            io: c.storage_io(),
        })
        .collect()
}

/// A cluster node's figures per cluster collection (`collections`: name and creation body),
/// as Qdrant's peers report every collection: its replicas here (`docs@0`, `docs@2`) summed
/// under its name, and a collection this node holds no replica of with no points. Local
/// collections of other names stay as they are.
fn by_cluster_collection(
    figures: Vec<CollectionFigures>,
    collections: Vec<(String, Value)>,
) -> Vec<CollectionFigures> {
    let mut merged: BTreeMap<String, CollectionFigures> = BTreeMap::new();
    let mut others = Vec::new();
    for mut f in figures {
        let base = f.info.name.rsplit_once('@').map(|(b, _)| b.to_string());
        match base.filter(|b| collections.iter().any(|(n, _)| n == b)) {
            Some(base) => match merged.get_mut(&base) {
                Some(into) => {
                    into.info.absorb(f.info);
                    into.io.extend(f.io);
                }
                None => {
                    f.info.name = base.clone();
                    merged.insert(base, f);
                }
            },
            None => others.push(f),
        }
    }
    for (name, config) in collections {
        if merged.contains_key(&name) {
            continue;
        }
        if let Ok(config) = crate::convert::collection_config(&config) {
            let info = CollectionInfo::empty(name.clone(), config);
            merged.insert(
                name,
                CollectionFigures {
                    info,
                    io: Vec::new(),
                },
            );
        }
    }
    others.extend(merged.into_values());
    others
}

/// Resident set of this process, from /proc (None elsewhere).
fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Prometheus label values escape backslash, quote and newline.
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// One metric family: its help and type lines, then one sample per (labels, value).
fn family(out: &mut String, name: &str, kind: &str, help: &str, samples: &[(String, f64)]) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
    for (labels, value) in samples {
        if labels.is_empty() {
            let _ = writeln!(out, "{name} {value}");
        } else {
            let _ = writeln!(out, "{name}{{{labels}}} {value}");
        }
    }
}

/// The Prometheus text exposition (format 0.0.4): diskvec's families, then Qdrant's.
fn prometheus_view(metrics: &Metrics, collections: &[CollectionFigures], view: View) -> String {
    let mut out = String::new();
    let routes = metrics.snapshot();
    let mut requests = Vec::new();
    for (route, statuses) in &routes {
        let (method, path) = route.split_once(' ').unwrap_or((route, ""));
        for (status, o) in statuses {
            let labels = format!(
                "method=\"{method}\",route=\"{}\",status=\"{status}\"",
                label(path)
            );
            requests.push((labels, o.count as f64));
        }
    }
    family(
        &mut out,
        "diskvec_http_requests_total",
        "counter",
        "HTTP requests answered, by route and status.",
        &requests,
    );
    let name = "diskvec_http_request_duration_seconds";
    let _ = writeln!(
        out,
        "# HELP {name} Time from request to response, by route."
    );
    let _ = writeln!(out, "# TYPE {name} histogram");
    for (route, statuses) in &routes {
        let (method, path) = route.split_once(' ').unwrap_or((route, ""));
        let labels = format!("method=\"{method}\",route=\"{}\"", label(path));
        let mut merged = Outcome::default();
        for o in statuses.values() {
            merged.count += o.count;
            merged.total += o.total;
            for (m, b) in merged.buckets.iter_mut().zip(o.buckets) {
                *m += b;
            }
        }
        let mut cumulative = 0;
        for (edge, n) in EDGES.iter().zip(merged.buckets) {
            cumulative += n;
            let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{edge}\"}} {cumulative}");
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels},le=\"+Inf\"}} {}",
            merged.count
        );
        let _ = writeln!(out, "{name}_sum{{{labels}}} {}", merged.total.as_secs_f64());
        let _ = writeln!(out, "{name}_count{{{labels}}} {}", merged.count);
    }

    let per = |f: &dyn Fn(&CollectionFigures) -> f64| -> Vec<(String, f64)> {
        collections
            .iter()
            .map(|c| (format!("collection=\"{}\"", label(&c.info.name)), f(c)))
            .collect()
    };
    family(
        &mut out,
        "diskvec_collections",
        "gauge",
        "Collections in the database.",
        &[(String::new(), collections.len() as f64)],
    );
    family(
        &mut out,
        "diskvec_collection_points",
        "gauge",
        "Live points.",
        &per(&|c| c.info.points as f64),
    );
    family(
        &mut out,
        "diskvec_collection_indexed_points",
        "gauge",
        "Live points in sealed (DiskANN) segments.",
        &per(&|c| c.info.indexed_points as f64),
    );
    let mut segments = Vec::new();
    let mut dram = Vec::new();
    let mut disk = Vec::new();
    for c in collections {
        let mut by_kind: BTreeMap<&str, (usize, usize, u64)> = ["growing", "frozen", "sealed"]
            .into_iter()
            .map(|k| (k, (0, 0, 0)))
            .collect();
        for s in &c.info.segments {
            let e = by_kind.entry(s.kind).or_default();
            e.0 += 1;
            e.1 += s.dram_bytes;
            e.2 += s.disk_bytes;
        }
        for (kind, (n, d, k)) in by_kind {
            let labels = format!("collection=\"{}\",kind=\"{kind}\"", label(&c.info.name));
            segments.push((labels.clone(), n as f64));
            dram.push((labels.clone(), d as f64));
            disk.push((labels, k as f64));
        }
    }
    family(
        &mut out,
        "diskvec_collection_segments",
        "gauge",
        "Segments, by kind (growing, frozen, sealed).",
        &segments,
    );
    family(
        &mut out,
        "diskvec_collection_dram_bytes",
        "gauge",
        "DRAM held by the segments' indexes, vectors and payloads, by kind.",
        &dram,
    );
    family(
        &mut out,
        "diskvec_collection_disk_bytes",
        "gauge",
        "Bytes of the sealed segments' files, by kind.",
        &disk,
    );
    let statuses: Vec<(String, f64)> = collections
        .iter()
        .flat_map(|c| {
            ["green", "yellow", "red"].into_iter().map(move |s| {
                (
                    format!("collection=\"{}\",status=\"{s}\"", label(&c.info.name)),
                    f64::from(u8::from(c.info.status.name() == s)),
                )
            })
        })
        .collect();
    family(
        &mut out,
        "diskvec_collection_status",
        "gauge",
        "1 for the collection's status (green: idle; yellow: seal or merge pending; red: a background task failed).",
        &statuses,
    );
    // The background builds of each collection (a seal, and a merge beside it): how far
    // each one's phase is, and the memory it was granted against what its plan expects to use.
    let mut progress = Vec::new();
    let mut build_memory = Vec::new();
    for c in collections {
        for t in &c.info.tasks {
            let name = label(&c.info.name);
            progress.push((
                format!(
                    "collection=\"{name}\",kind=\"{}\",phase=\"{}\"",
                    t.kind,
                    label(&t.phase)
                ),
                if t.total > 0 {
                    t.done as f64 / t.total as f64
                } else {
                    0.0
                },
            ));
            build_memory.push((
                format!("collection=\"{name}\",build=\"{}\",kind=\"budget\"", t.kind),
                t.memory_budget as f64,
            ));
            build_memory.push((
                format!(
                    "collection=\"{name}\",build=\"{}\",kind=\"estimated_peak\"",
                    t.kind
                ),
                t.estimated_peak as f64,
            ));
        }
    }
    family(
        &mut out,
        "diskvec_build_phase_progress",
        "gauge",
        "Share (0 to 1) of the running seal's or merge's current phase done.",
        &progress,
    );
    family(
        &mut out,
        "diskvec_build_memory_bytes",
        "gauge",
        "Memory the running seal or merge was granted (budget) and its plan's estimated peak.",
        &build_memory,
    );
    // What the sealed segments hold in DRAM for their searches, and what those read.
    let mut search_memory = Vec::new();
    for c in collections {
        let (name, m) = (label(&c.info.name), &c.info.search_memory);
        for (kind, bytes) in [
            ("navigation", m.navigation_bytes),
            ("node_cache", m.node_cache_bytes),
        ] {
            search_memory.push((
                format!("collection=\"{name}\",kind=\"{kind}\""),
                bytes as f64,
            ));
        }
    }
    family(
        &mut out,
        "diskvec_search_memory_bytes",
        "gauge",
        "DRAM the sealed segments hold for their searches beyond the compressed vectors, by kind.",
        &search_memory,
    );
    family(
        &mut out,
        "diskvec_cached_nodes",
        "gauge",
        "Node records of the sealed segments held in DRAM.",
        &per(&|c| c.info.search_memory.cached_nodes as f64),
    );
    family(
        &mut out,
        "diskvec_pq_code_bytes",
        "gauge",
        "Bytes of PQ codes the sealed segments hold in DRAM (full or compact).",
        &per(&|c| c.info.search_memory.code_bytes as f64),
    );
    family(
        &mut out,
        "diskvec_compact_code_segments",
        "gauge",
        "Sealed segments steering their searches by their compact PQ codes.",
        &per(&|c| c.info.search_memory.compact_code_segments as f64),
    );
    family(
        &mut out,
        "diskvec_graph_searches_total",
        "counter",
        "Graph searches of the sealed segments open now.",
        &per(&|c| c.info.search_memory.graph_searches as f64),
    );
    family(
        &mut out,
        "diskvec_node_reads_per_search",
        "gauge",
        "Node reads sent to the SSD per graph search, since the sealed segments opened.",
        &per(&|c| c.info.search_memory.reads_per_search),
    );
    family(
        &mut out,
        "diskvec_node_cache_hit_ratio",
        "gauge",
        "Share of node visits answered from DRAM instead of the SSD.",
        &per(&|c| c.info.search_memory.cache_hit_rate),
    );
    family(
        &mut out,
        "diskvec_wal_bytes",
        "gauge",
        "Bytes of the write-ahead log not yet checkpointed away.",
        &per(&|c| c.info.wal_bytes as f64),
    );
    family(
        &mut out,
        "diskvec_wal_syncs_total",
        "counter",
        "fdatasyncs of the write-ahead log since open.",
        &per(&|c| c.info.wal_syncs as f64),
    );
    family(
        &mut out,
        "diskvec_wal_last_op",
        "gauge",
        "Number of the last logged operation.",
        &per(&|c| c.info.last_op as f64),
    );
    family(
        &mut out,
        "diskvec_seals_total",
        "counter",
        "Growing segments sealed into DiskANN segments since open.",
        &per(&|c| c.info.seals_done as f64),
    );
    family(
        &mut out,
        "diskvec_rebuilds_total",
        "counter",
        "Merges and vacuums since open.",
        &per(&|c| c.info.rebuilds_done as f64),
    );
    type Counter = fn(&PathIo) -> u64;
    let io_families: [(&str, &str, Counter); 5] = [
        (
            "diskvec_storage_reads_total",
            "Node reads from each storage path.",
            |p| p.reads,
        ),
        (
            "diskvec_storage_read_bytes_total",
            "Bytes read from each storage path.",
            |p| p.bytes,
        ),
        (
            "diskvec_storage_waited_reads_total",
            "Reads that waited at the path's queue-depth cap.",
            |p| p.waited,
        ),
        (
            "diskvec_storage_failovers_total",
            "Reads that failed on the path and were served by its mirror.",
            |p| p.failovers,
        ),
        (
            "diskvec_storage_timeouts_total",
            "Reads of the path given up on after the read deadline.",
            |p| p.timeouts,
        ),
    ];
    for (name, help, value) in io_families {
        let samples: Vec<(String, f64)> = collections
            .iter()
            .flat_map(|c| {
                c.io.iter().map(move |p| {
                    (
                        format!(
                            "collection=\"{}\",path=\"{}\",location=\"{}\"",
                            label(&c.info.name),
                            p.path,
                            label(&p.location.display().to_string())
                        ),
                        value(p) as f64,
                    )
                })
            })
            .collect();
        family(&mut out, name, "counter", help, &samples);
    }
    if let Some(rss) = resident_bytes() {
        family(
            &mut out,
            "process_resident_memory_bytes",
            "gauge",
            "Resident set of the server process.",
            &[(String::new(), rss as f64)],
        );
    }
    family(
        &mut out,
        "diskvec_uptime_seconds",
        "gauge",
        "Seconds since the server started.",
        &[(String::new(), metrics.started.elapsed().as_secs_f64())],
    );
    qdrant_families(&mut out, metrics, collections, view.per_collection);
    out
}

/// Qdrant's endpoints whose requests its `/metrics` reports (searches, recommendations,
/// scrolls and writes), in its names; sorted.
const REST_ENDPOINTS: &[&str] = &[
    "/collections/{collection_name}/index",
    "/collections/{collection_name}/points",
    "/collections/{collection_name}/points/batch",
    "/collections/{collection_name}/points/count",
    "/collections/{collection_name}/points/delete",
    "/collections/{collection_name}/points/discover",
    "/collections/{collection_name}/points/discover/batch",
    "/collections/{collection_name}/points/facet",
    "/collections/{collection_name}/points/payload",
    "/collections/{collection_name}/points/payload/clear",
    "/collections/{collection_name}/points/payload/delete",
    "/collections/{collection_name}/points/query",
    "/collections/{collection_name}/points/query/batch",
    "/collections/{collection_name}/points/query/groups",
    "/collections/{collection_name}/points/recommend",
    "/collections/{collection_name}/points/recommend/batch",
    "/collections/{collection_name}/points/recommend/groups",
    "/collections/{collection_name}/points/scroll",
    "/collections/{collection_name}/points/search",
    "/collections/{collection_name}/points/search/batch",
    "/collections/{collection_name}/points/search/groups",
    "/collections/{collection_name}/points/search/matrix/offsets",
    "/collections/{collection_name}/points/search/matrix/pairs",
    "/collections/{collection_name}/points/vectors",
    "/collections/{collection_name}/points/vectors/delete",
    "/collections/{collection_name}/vectors/{vector_name}",
];

/// The families Qdrant's `/metrics` has that diskvec can fill with its own counts, under
/// Qdrant's names and labels (dashboards and alerts written for Qdrant read them).
/// Qdrant's families diskvec has no measure for (vectors by name, replicas, snapshots,
/// hardware counters, allocator memory) are left out rather than reported as 0.
fn qdrant_families(
    out: &mut String,
    metrics: &Metrics,
    collections: &[CollectionFigures],
    per_collection: bool,
) {
    // The API version the server speaks (as `GET /` reports it) under Qdrant's name for
    // the server, and diskvec's own version beside it.
    family(
        out,
        "app_info",
        "gauge",
        "information about qdrant server",
        &[(
            format!(
                "name=\"qdrant\",version=\"{}\",diskvec_version=\"{}\"",
                crate::QDRANT_COMPATIBLE_VERSION,
                env!("CARGO_PKG_VERSION")
            ),
            1.0,
        )],
    );
    // diskvec has no recovery mode.
    family(
        out,
        "app_status_recovery_mode",
        "gauge",
        "features enabled in qdrant server",
        &[(String::new(), 0.0)],
    );
    family(
        out,
        "collections_total",
        "gauge",
        "number of collections",
        &[(String::new(), collections.len() as f64)],
    );
    let by_id = |f: &dyn Fn(&CollectionInfo) -> f64| -> Vec<(String, f64)> {
        collections
            .iter()
            .map(|c| (format!("id=\"{}\"", label(&c.info.name)), f(&c.info)))
            .collect()
    };
    family(
        out,
        "collection_points",
        "gauge",
        "approximate amount of points per collection",
        &by_id(&|i| i.points as f64),
    );
    family(
        out,
        "collection_running_optimizations",
        "gauge",
        "number of currently running optimization tasks per collection",
        &by_id(&|i| i.tasks.len() as f64),
    );
    // Writes are applied before they are answered: no queue.
    family(
        out,
        "collection_update_queue_length",
        "gauge",
        "number of pending operations in update queues per collection",
        &by_id(&|_| 0.0),
    );
    // A single process, no cluster.
    family(
        out,
        "cluster_enabled",
        "gauge",
        "is cluster support enabled",
        &[(String::new(), 0.0)],
    );

    // REST responses of Qdrant's listed endpoints: all of them, or per collection (with a
    // `collection` label instead), as Qdrant does. Timings only of the 200s, as Qdrant.
    let sets: Vec<(Option<String>, Routes)> = if per_collection {
        let names: Vec<&str> = collections.iter().map(|c| c.info.name.as_str()).collect();
        metrics
            .per_collection_snapshot(&names)
            .into_iter()
            .map(|(name, routes)| (Some(name), routes))
            .collect()
    } else {
        vec![(None, metrics.snapshot())]
    };
    let (mut total, mut avg, mut min, mut max) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut histograms = String::new();
    let name = "rest_responses_duration_seconds";
    for (collection, routes) in &sets {
        for (route, statuses) in routes {
            let route = qdrant_route(route);
            let Some((method, endpoint)) = route.split_once(' ') else {
                continue;
            };
            if REST_ENDPOINTS.binary_search(&endpoint).is_err() {
                continue;
            }
            for (status, o) in statuses {
                let mut labels =
                    format!("method=\"{method}\",endpoint=\"{endpoint}\",status=\"{status}\"");
                if let Some(c) = collection {
                    let _ = write!(labels, ",collection=\"{}\"", label(c));
                }
                total.push((labels.clone(), o.count as f64));
                if *status != 200 {
                    continue;
                }
                let secs = o.total.as_secs_f64();
                avg.push((labels.clone(), secs / o.count.max(1) as f64));
                min.push((labels.clone(), o.min.unwrap_or_default().as_secs_f64()));
                max.push((labels.clone(), o.max.as_secs_f64()));
                let mut cumulative = 0;
                for (edge, n) in EDGES.iter().zip(o.buckets) {
                    cumulative += n;
                    let _ = writeln!(
                        histograms,
                        "{name}_bucket{{{labels},le=\"{edge}\"}} {cumulative}"
                    );
                }
                let _ = writeln!(
                    histograms,
                    "{name}_bucket{{{labels},le=\"+Inf\"}} {}",
                    o.count
                );
                let _ = writeln!(histograms, "{name}_sum{{{labels}}} {secs}");
                let _ = writeln!(histograms, "{name}_count{{{labels}}} {}", o.count);
            }
        }
    }
    family(
        out,
        "rest_responses_total",
        "counter",
        "total number of responses",
        &total,
    );
    family(
        out,
        "rest_responses_avg_duration_seconds",
        "gauge",
        "average response duration",
        &avg,
    );
    family(
        out,
        "rest_responses_min_duration_seconds",
        "gauge",
        "minimum response duration",
        &min,
    );
    family(
        out,
        "rest_responses_max_duration_seconds",
        "gauge",
        "maximum response duration",
        &max,
    );
    let _ = writeln!(out, "# HELP {name} response duration histogram");
    let _ = writeln!(out, "# TYPE {name} histogram");
    out.push_str(&histograms);
}

/// Qdrant's `OperationDurationStatistics` of one route and status: the count and mean
/// duration always, the extremes, total and last answer's time when `detailed`.
fn duration_stats(o: &Outcome, detailed: bool) -> Value {
    let micros = |d: Duration| d.as_secs_f64() * 1e6;
    let mut stats = json!({
        "count": o.count,
        "avg_duration_micros": micros(o.total) / o.count.max(1) as f64,
    });
    if detailed {
        stats["min_duration_micros"] = json!(o.min.map(micros));
        stats["max_duration_micros"] = json!(micros(o.max));
        stats["total_duration_micros"] = json!(o.total.as_micros() as u64);
        stats["last_responded"] = json!(o.last.map(rfc3339));
    }
    stats
}

/// Route -> status -> statistics, under Qdrant's route names (and diskvec's own too, where
/// they differ, when `own_names`).
fn responses(routes: &Routes, detailed: bool, own_names: bool) -> Value {
    let mut out = Map::new();
    for (route, statuses) in routes {
        let by_status: Map<String, Value> = statuses
            .iter()
            .map(|(status, o)| (status.to_string(), duration_stats(o, detailed)))
            .collect();
        let qdrant = qdrant_route(route);
        if own_names && qdrant != *route {
            out.insert(route.clone(), Value::Object(by_status.clone()));
        }
        out.insert(qdrant, Value::Object(by_status));
    }
    Value::Object(out)
}

/// Qdrant's `app` at `level`, with diskvec's own version, uptime and resident set beside.
fn app(metrics: &Metrics, level: usize) -> Value {
    let mut app = json!({
        "name": "diskvec",
        "version": crate::QDRANT_COMPATIBLE_VERSION,
        "startup": rfc3339(metrics.started_at),
        "diskvec_version": env!("CARGO_PKG_VERSION"),
        "uptime_seconds": metrics.started.elapsed().as_secs_f64(),
        "resident_bytes": resident_bytes(),
    });
    if level >= 1 {
        app["features"] = json!({
            "debug": cfg!(debug_assertions),
            // Qdrant's build features; diskvec has none of them.
            "service_debug_feature": false,
            "recovery_mode": false,
            "gpu": false,
            "rocksdb": false,
            "staging": false,
        });
        app["system"] = system();
    }
    app
}

/// Qdrant's `RunningEnvironmentTelemetry`: what this machine is, as far as the standard
/// library and /proc tell (the disk's size is not looked up: null).
fn system() -> Value {
    let release = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
    let field = |key: &str| {
        release.lines().find_map(|l| {
            l.strip_prefix(key)?
                .strip_prefix('=')
                .map(|v| v.trim_matches('"').to_string())
        })
    };
    let ram_kib = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        m.lines()
            .find(|l| l.starts_with("MemTotal:"))?
            .split_whitespace()
            .nth(1)?
            .parse::<u64>()
            .ok()
    });
    #[allow(unused_mut)]
    let mut flags: Vec<&str> = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        for (name, on) in [
            ("sse", std::arch::is_x86_feature_detected!("sse")),
            ("sse2", std::arch::is_x86_feature_detected!("sse2")),
            ("avx", std::arch::is_x86_feature_detected!("avx")),
            ("avx2", std::arch::is_x86_feature_detected!("avx2")),
            ("fma", std::arch::is_x86_feature_detected!("fma")),
            ("f16c", std::arch::is_x86_feature_detected!("f16c")),
            ("avx512f", std::arch::is_x86_feature_detected!("avx512f")),
        ] {
            if on {
                flags.push(name);
            }
        }
    }
    #[cfg(target_arch = "aarch64")]
    {
        if std::arch::is_aarch64_feature_detected!("neon") {
            flags.push("neon");
        }
    }
    json!({
        "distribution": field("ID"),
        "distribution_version": field("VERSION_ID"),
        "is_docker": std::path::Path::new("/.dockerenv").exists(),
        "cores": std::thread::available_parallelism().ok().map(|n| n.get()),
        "ram_size": ram_kib,
        "disk_size": null,
        "cpu_flags": flags.join(","),
        "cpu_endian": if cfg!(target_endian = "little") { "little" } else { "big" },
        "gpu_devices": [],
    })
}

/// One collection as Qdrant's telemetry shows it at `level` (1: aggregated; 2: config;
/// 3: its one local shard; 4 and up: the shard's segments).
fn qdrant_collection(c: &CollectionFigures, level: usize) -> Value {
    let i = &c.info;
    // Qdrant's `config` (params, HNSW, optimizer and WAL settings, strict mode, metadata)
    // as `GET /collections/{name}` reports it.
    let config = crate::convert::collection_info(i, &[])["config"].take();
    let optimizers_status = match &i.error {
        None => json!("ok"),
        Some(e) => json!({"error": e}),
    };
    if level < 2 {
        return json!({
            // Qdrant counts the collection's vectors (all names); diskvec keeps no count
            // of vectors per name (a point may lack one), so 0 rather than a guess.
            "vectors": 0,
            "optimizers_status": optimizers_status,
            "params": config["params"],
        });
    }
    let mut collection = json!({
        "id": i.name,
        // Collections open before the server listens; their open time is not kept.
        "init_time_ms": null,
        "config": config,
    });
    if level < 3 {
        return collection;
    }
    let mut local = json!({
        "variant_name": "local",
        "status": i.status.name(),
        // Points rebuilt by optimizations are not counted (builds are: `optimizations`).
        "total_optimized_points": 0,
        // diskvec's byte figures are per segment and do not split vectors from payloads
        // (they are in each segment's `ram_usage_bytes` and `disk_usage_bytes`).
        "vectors_size_bytes": null,
        "payloads_size_bytes": null,
        "num_points": i.points,
        // No count of vectors per name (see `vectors` above).
        "num_vectors": null,
        "num_vectors_by_name": {},
        "optimizations": {
            "status": optimizers_status,
            // Seals, vacuums and merges finished since open (their durations are not kept).
            "optimizations": {"count": i.seals_done + i.rebuilds_done},
        },
        // diskvec has no async scorer setting.
        "async_scorer": null,
        // Writes are applied before they are answered: nothing waits in a queue.
        "update_queue": {"length": 0, "op_num": i.last_op, "deferred_points": 0},
    });
    if level >= 4 {
        local["segments"] = Value::Array(i.segments.iter().map(|s| segment(&i.name, s)).collect());
        // diskvec has no `indexed_only` search, so no vector is left out of one.
        local["indexed_only_excluded_vectors"] = json!({});
    }
    collection["shards"] = json!([{
        "id": 0,
        "key": null,
        "local": local,
        "remote": [],
        // A single process: no peers, so no replica states.
        "replicate_states": {},
        // diskvec takes no partial snapshots.
        "partial_snapshot": {
            "ongoing_create_snapshot_requests": 0,
            "is_recovering": false,
            "recovery_timestamp": 0,
        },
    }]);
    collection["transfers"] = json!([]);
    collection["resharding"] = json!([]);
    collection
}

/// One segment as Qdrant's `SegmentTelemetry`, with diskvec's own figures under `diskvec`.
fn segment(collection: &str, s: &diskvec_db::SegmentInfo) -> Value {
    json!({
        "info": {
            "uuid": segment_uuid(collection, s.id),
            // Sealed segments are DiskANN-indexed; growing ones are appendable.
            "segment_type": if s.kind == "sealed" { "indexed" } else { "plain" },
            "num_points": s.points - s.deleted,
            // Vectors per name are not counted per segment, nor their bytes apart from
            // the payloads': 0 (the points and the segment's bytes are true).
            "num_vectors": 0,
            "num_indexed_vectors": 0,
            "num_deleted_vectors": 0,
            "vectors_size_bytes": 0,
            "payloads_size_bytes": 0,
            "num_deferred_points": 0,
            "ram_usage_bytes": s.dram_bytes,
            "disk_usage_bytes": s.disk_bytes,
            "is_appendable": s.kind == "growing",
            // Payload indexes are the collection's (GET /collections/{name}), not counted
            // per segment.
            "index_schema": {},
            "vector_data": {},
            "diskvec": s,
        },
        // Payloads are held in DRAM and kept in the segment's files.
        "config": {"payload_storage_type": {"type": "in_ram_mmap"}},
        // Searches are counted per collection (/metrics), not per segment and index.
        "vector_index_searches": [],
        "payload_field_indices": [],
    })
}

/// diskvec's own view of a collection (the default `/telemetry`).
fn own_collection(c: &CollectionFigures) -> Value {
    let i = &c.info;
    json!({
        "id": i.name,
        "status": i.status.name(),
        "error": i.error,
        "points": i.points,
        "indexed_points": i.indexed_points,
        "segments": i.segments,
        "wal_bytes": i.wal_bytes,
        "wal_syncs": i.wal_syncs,
        "last_op": i.last_op,
        "seals_done": i.seals_done,
        "rebuilds_done": i.rebuilds_done,
        "task": i.task,
        "tasks": i.tasks,
        "storage_io": c.io,
    })
}

/// `/telemetry`'s result: Qdrant's `TelemetryData` at `view.level`, or (no level) diskvec's
/// own view: Qdrant's level-0 keys with each collection's segments, WAL, builds and
/// storage I/O, and the request statistics under diskvec's route names as well.
fn telemetry_view(metrics: &Metrics, collections: &[CollectionFigures], view: View) -> Value {
    let level = view.level.unwrap_or(0);
    let detailed = view.level.is_none_or(|l| l >= 1);
    let mut rest = json!({
        "responses": responses(&metrics.snapshot(), detailed, view.level.is_none()),
    });
    if view.per_collection {
        let names: Vec<&str> = collections.iter().map(|c| c.info.name.as_str()).collect();
        let per: Map<String, Value> = metrics
            .per_collection_snapshot(&names)
            .iter()
            .map(|(name, routes)| (name.clone(), responses(routes, detailed, false)))
            .collect();
        if !per.is_empty() {
            rest["per_collection_responses"] = Value::Object(per);
        }
    }
    let mut collections_json = json!({"number_of_collections": collections.len()});
    match view.level {
        None => {
            collections_json["collections"] =
                Value::Array(collections.iter().map(own_collection).collect());
        }
        Some(0) => {}
        Some(level) => {
            collections_json["collections"] = Value::Array(
                collections
                    .iter()
                    .map(|c| qdrant_collection(c, level))
                    .collect(),
            );
            // diskvec keeps no snapshot statistics.
            collections_json["snapshots"] = json!([]);
        }
    }
    let mut result = json!({
        "id": metrics.id,
        "app": app(metrics, level),
        "collections": collections_json,
        // A single process, no cluster.
        "cluster": {"enabled": false},
        // diskvec serves no gRPC.
        "requests": {"rest": rest, "grpc": {"responses": {}}},
        // diskvec enforces no resource quota.
        "quota": {"config": {"enabled": false}, "exceeded": {}},
    });
    if level >= 1 {
        // Qdrant's allocator statistics (jemalloc) have no counterpart here; the process's
        // resident set is `app.resident_bytes`.
        result["memory"] = Value::Null;
        // No per-collection CPU and I/O accounting of requests.
        result["hardware"] = json!({"collection_data": {}});
        // Qdrant's search thread pool settings; diskvec's search threads are not reported.
        result["search_pool"] = Value::Null;
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_dates() {
        let at = |secs: u64, micros: u64| {
            rfc3339(UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_micros(micros))
        };
        assert_eq!(at(0, 0), "1970-01-01T00:00:00.000000Z");
        assert_eq!(at(951_782_400, 5), "2000-02-29T00:00:00.000005Z");
        assert_eq!(at(1_700_000_000, 123_456), "2023-11-14T22:13:20.123456Z");
        assert_eq!(at(4_107_542_399, 0), "2100-02-28T23:59:59.000000Z");
    }

    #[test]
    fn ids_and_names() {
        let (a, b) = (random_uuid(), random_uuid());
        assert_ne!(a, b);
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "4");
        assert_eq!(segment_uuid("c", 7).len(), 36);
        assert_ne!(segment_uuid("c", 7), segment_uuid("d", 7));
        assert_eq!(
            qdrant_route("DELETE /collections/{name}/index/{field}"),
            "DELETE /collections/{collection_name}/index/{field_name}"
        );
        assert_eq!(percent_decode("a%20b%2Fc%zz"), "a b/c%zz");
        assert_eq!(
            View::from_query(Some("details_level=3&timeout=5")).unwrap(),
            Some(View {
                level: Some(3),
                per_collection: false
            })
        );
        assert_eq!(View::from_query(Some("timeout=5")).unwrap(), None);
        assert!(View::from_query(Some("per_collection=maybe")).is_err());
    }
}
