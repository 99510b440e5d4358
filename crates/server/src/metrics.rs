//! What the server counts about its requests, and the two views of it: `/metrics`
//! (Prometheus text) and `/telemetry` (JSON, Qdrant's shape for the request part).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use diskvec_db::{CollectionInfo, Database, PathIo};
use serde_json::{json, Map, Value};

use crate::AppState;

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
}

impl Outcome {
    fn add(&mut self, took: Duration) {
        self.count += 1;
        let secs = took.as_secs_f64();
        let bucket = EDGES.iter().position(|&e| secs <= e).unwrap_or(EDGES.len());
        self.buckets[bucket] += 1;
        self.total += took;
        self.min = Some(self.min.map_or(took, |m| m.min(took)));
        self.max = self.max.max(took);
    }
}

/// Route -> status -> outcome. A route is "METHOD /path/{template}", so the set is bounded
/// by the API, never by what clients send.
pub struct Metrics {
    started: Instant,
    routes: Mutex<BTreeMap<String, BTreeMap<u16, Outcome>>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            started: Instant::now(),
            routes: Mutex::new(BTreeMap::new()),
        }
    }
}

impl Metrics {
    fn record(&self, route: String, status: u16, took: Duration) {
        let mut routes = self.routes.lock().unwrap_or_else(|e| e.into_inner());
        routes
            .entry(route)
            .or_default()
            .entry(status)
            .or_default()
            .add(took);
    }

    fn snapshot(&self) -> BTreeMap<String, BTreeMap<u16, Outcome>> {
        self.routes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// Route layer: times every request that matched a route.
pub async fn track(State(s): State<AppState>, req: Request, next: Next) -> Response {
    let route = format!(
        "{} {}",
        req.method(),
        req.extensions()
            .get::<MatchedPath>()
            .map_or("unmatched", |p| p.as_str())
    );
    let started = Instant::now();
    let response = next.run(req).await;
    s.metrics
        .record(route, response.status().as_u16(), started.elapsed());
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

/// The Prometheus text exposition (format 0.0.4).
pub(crate) fn prometheus(metrics: &Metrics, collections: &[CollectionFigures]) -> String {
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
    let io_families: [(&str, &str, Counter); 4] = [
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
    out
}

/// `/telemetry`'s result: the app, each collection's segments and counters, and per-route
/// response counts and durations (as Qdrant reports them under `requests.rest.responses`).
pub(crate) fn telemetry(metrics: &Metrics, collections: &[CollectionFigures]) -> Value {
    let mut responses = Map::new();
    for (route, statuses) in metrics.snapshot() {
        let mut by_status = Map::new();
        for (status, o) in statuses {
            let micros = |d: Duration| d.as_secs_f64() * 1e6;
            by_status.insert(
                status.to_string(),
                json!({
                    "count": o.count,
                    "avg_duration_micros": micros(o.total) / o.count.max(1) as f64,
                    "min_duration_micros": o.min.map(micros),
                    "max_duration_micros": micros(o.max),
                }),
            );
        }
        responses.insert(route, Value::Object(by_status));
    }
    let collections_json: Vec<Value> = collections
        .iter()
        .map(|c| {
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
        })
        .collect();
    json!({
        "app": {
            "name": "diskvec",
            "version": crate::QDRANT_COMPATIBLE_VERSION,
            "diskvec_version": env!("CARGO_PKG_VERSION"),
            "uptime_seconds": metrics.started.elapsed().as_secs_f64(),
            "resident_bytes": resident_bytes(),
        },
        "collections": {
            "number_of_collections": collections.len(),
            "collections": collections_json,
        },
        "requests": {"rest": {"responses": responses}},
    })
}
