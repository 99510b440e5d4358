//! `diskvec import`: a dataset's vectors and payloads into a collection, through the
//! database's write path (the log, then the growing segment), a batch per write.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, ensure, Context};
use diskvec_dataset::Matrix;
use diskvec_db::{
    Collection, CollectionConfig, Database, DbOptions, Durability, MemoryBudget, PointId,
    PointRecord,
};
use diskvec_index::Progress;
use diskvec_vector::Metric;
use serde_json::json;

use crate::build_cmd::{load_train, open_train_stream};
use crate::payloads::{read_payloads, Payloads};
use crate::progress::Bars;

/// Most points the database takes in one write.
const MAX_BATCH: usize = 100_000;

#[derive(clap::Args)]
pub struct Args {
    /// Database directory (created if missing).
    #[arg(long)]
    pub db: PathBuf,
    /// Collection to write into; created if missing, with the dimension of the data.
    #[arg(long)]
    pub collection: String,
    /// Dataset directory (VectorDBBench layout: train.parquet) or a .parquet/.fvecs/.bvecs/.npy file.
    #[arg(long)]
    pub dataset: PathBuf,
    /// Parquet file with an `id` column and scalar columns that become payload fields
    /// (default: train_payloads.parquet in the dataset directory, or FILE_payloads.parquet
    /// next to a FILE.parquet, when there).
    #[arg(long)]
    pub payloads: Option<PathBuf>,
    /// Points per write.
    #[arg(long, default_value_t = 100)]
    pub batch: usize,
    /// cosine, l2 or ip (for a new collection; default cosine).
    #[arg(long, value_parser = metric)]
    pub metric: Option<Metric>,
    /// Points a growing segment takes before it is sealed into DiskANN (new collection).
    #[arg(long)]
    pub seal_threshold: Option<usize>,
    /// Largest sealed segment a merge may make (new collection; default 2,000,000): a
    /// collection larger than it is searched as several segments.
    #[arg(long)]
    pub max_segment_points: Option<usize>,
    /// Directories to stripe sealed segments' nodes over (new collection).
    #[arg(long, value_delimiter = ',')]
    pub paths: Vec<PathBuf>,
    /// Flush the log every N ms instead of at every write (new collection).
    #[arg(long)]
    pub interval_ms: Option<u64>,
    /// Keep every node of the sealed segments in DRAM too, so searches read nothing from the
    /// SSD (new collection; Qdrant's `on_disk: false`).
    #[arg(long)]
    pub in_memory: bool,
    /// Keep only PQ codes of the sealed segments in DRAM (a sixteenth of the raw vectors),
    /// not their neighbour lists and 4-bit codes (about a quarter), and read every node a
    /// search expands: for a tight memory budget (new collection).
    #[arg(long)]
    pub no_navigation: bool,
    /// Payload indexes to create, as FIELD:KIND (keyword or integer), comma-separated.
    #[arg(long, value_delimiter = ',', value_parser = index_field)]
    pub index_fields: Vec<(String, String)>,
    /// Memory each seal and merge may use: bytes (768MiB, 2GiB) or a share of the build's raw
    /// vectors (25%); default: half of the available memory. Kept as the collection's
    /// `build_memory` when this creates it; bytes also bound the builds of this process.
    #[arg(long, value_parser = budget)]
    pub build_memory: Option<MemoryBudget>,
    /// DRAM the sealed segments' searches may hold beyond their compressed vectors:
    /// bytes (512MiB), 0, or a share of the raw vectors (25%); default: a share of the
    /// database's. Kept as the collection's `search_memory`
    /// when this creates it.
    #[arg(long, value_parser = search_budget)]
    pub search_memory: Option<MemoryBudget>,
    /// Seal everything into DiskANN segments before returning, and report the load duration.
    #[arg(long)]
    pub optimize: bool,
    /// Pause indexing while importing (Qdrant's `indexing_threshold: 0`): the points wait,
    /// unlinked and unsealed, in one growing segment in DRAM (searches scan it) and are
    /// built at once by --optimize (without it, by the seals that start when the import
    /// ends). Needs DRAM for every vector imported.
    #[arg(long)]
    pub defer_indexing: bool,
    /// Write at most this many points a second (a paced client; default: as fast as writes
    /// are acknowledged). With it, the write latencies reported are those of a load the
    /// seals can keep up with.
    #[arg(long)]
    pub max_rate: Option<f64>,
    /// Print the report as one JSON object on the last line.
    #[arg(long)]
    pub json: bool,
}

pub fn budget(text: &str) -> Result<MemoryBudget, String> {
    match text.parse() {
        Ok(MemoryBudget::Auto) => Err("give bytes or a share; leave it out for auto".into()),
        Ok(b) => Ok(b),
        Err(e) => Err(e.to_string()),
    }
}

pub fn search_budget(text: &str) -> Result<MemoryBudget, String> {
    match diskvec_db::parse_search_memory(text) {
        Ok(MemoryBudget::Auto) => Err("give bytes or a share; leave it out for auto".into()),
        Ok(b) => Ok(b),
        Err(e) => Err(e.to_string()),
    }
}

pub fn metric(name: &str) -> Result<Metric, String> {
    diskvec_db::parse_metric(name).map_err(|e| e.to_string())
}

fn index_field(spec: &str) -> Result<(String, String), String> {
    match spec.split_once(':') {
        Some((field, kind)) if !field.is_empty() && matches!(kind, "keyword" | "integer") => {
            Ok((field.to_string(), kind.to_string()))
        }
        _ => Err(format!(
            "{spec:?}: expected FIELD:KIND with KIND keyword or integer, e.g. lexname:keyword"
        )),
    }
}

/// Settings of a collection that does not exist yet.
#[derive(Default)]
pub struct NewCollection {
    pub metric: Option<Metric>,
    pub seal_threshold: Option<usize>,
    pub max_segment_points: Option<usize>,
    pub paths: Vec<PathBuf>,
    pub interval_ms: Option<u64>,
    pub in_memory: bool,
    pub no_navigation: bool,
    pub build_memory: Option<MemoryBudget>,
    pub search_memory: Option<MemoryBudget>,
}

impl NewCollection {
    fn given(&self) -> bool {
        self.metric.is_some()
            || self.seal_threshold.is_some()
            || self.max_segment_points.is_some()
            || !self.paths.is_empty()
            || self.interval_ms.is_some()
            || self.in_memory
            || self.no_navigation
            || self.build_memory.is_some()
            || self.search_memory.is_some()
    }

    fn config(&self, dim: usize) -> CollectionConfig {
        let mut c = CollectionConfig::new(dim, self.metric.unwrap_or(Metric::Cosine));
        if let Some(s) = self.seal_threshold {
            c.seal_threshold = s;
        }
        if let Some(m) = self.max_segment_points {
            c.max_segment_points = m;
        }
        c.paths = self.paths.clone();
        if let Some(interval_ms) = self.interval_ms {
            c.durability = Durability::Interval { interval_ms };
        }
        c.on_disk = !self.in_memory;
        c.navigation = !self.no_navigation;
        c.build_memory = self.build_memory;
        c.search_memory = self.search_memory;
        c
    }
}

/// The payload file that goes with `dataset` when none is named: `train_payloads.parquet`
/// in a dataset directory, `NAME_payloads.parquet` next to a `NAME.parquet`.
pub fn default_payloads(dataset: &Path) -> Option<PathBuf> {
    let candidate = if dataset.is_dir() {
        dataset.join("train_payloads.parquet")
    } else {
        let stem = dataset.file_stem()?.to_str()?;
        dataset.with_file_name(format!("{stem}_payloads.parquet"))
    };
    candidate.is_file().then_some(candidate)
}

/// Vectors and, if there are any, their payloads and where they came from.
pub struct Source {
    pub vectors: Matrix,
    pub payloads: Option<(PathBuf, Payloads)>,
}

pub fn load_source(dataset: &Path, payloads: Option<&Path>) -> anyhow::Result<Source> {
    let vectors = load_train(dataset)?;
    if let Some(pos) = vectors.ids.iter().position(|&id| id < 0) {
        bail!(
            "{}: vector {pos} has id {}; point ids are unsigned",
            dataset.display(),
            vectors.ids[pos]
        );
    }
    let file = payloads
        .map(Path::to_path_buf)
        .or_else(|| default_payloads(dataset));
    let payloads = match file {
        Some(f) => {
            let p = read_payloads(&f)?;
            Some((f, p))
        }
        None => None,
    };
    Ok(Source { vectors, payloads })
}

/// The collection `name`, created with `settings` if missing; an existing one must take
/// vectors of `dim` (and the metric, when one is given). Also says whether it was created.
pub fn open_or_create(
    db: &Database,
    name: &str,
    dim: usize,
    settings: &NewCollection,
) -> anyhow::Result<(Arc<Collection>, bool)> {
    if !db.collection_names().iter().any(|n| n == name) {
        let c = db
            .create_collection(name, settings.config(dim))
            .with_context(|| format!("creating collection {name:?}"))?;
        return Ok((c, true));
    }
    let c = db.collection(name)?;
    let Some(space) = c.config().unnamed().cloned() else {
        bail!(
            "collection {name:?} has no unnamed vector space ({}); import writes one vector \
             per point into it",
            c.config().describe_spaces()
        );
    };
    ensure!(
        space.dim == dim,
        "collection {name:?} holds vectors of dimension {}, the data has dimension {dim}",
        space.dim
    );
    if let Some(m) = settings.metric {
        ensure!(
            m == space.metric,
            "collection {name:?} uses metric {}, not {}",
            space.metric.name(),
            m.name()
        );
    }
    if settings.given() {
        eprintln!(
            "note: collection {name:?} exists; its settings are kept and the data is appended"
        );
    }
    Ok((c, false))
}

/// Upserts every vector `next_chunk` delivers (of the `rows` announced) with its payload,
/// `batch` points per write, behind a progress bar (JSON lines with `json_progress`). Takes the payloads out of `payloads`:
/// what is left there had no vector. Returns the points written, those that had a payload,
/// and the seconds the writes took.
/// What writing the points took: how many, how many had a payload, the seconds, and each
/// write's latency.
pub struct Written {
    pub points: usize,
    pub with_payload: usize,
    pub seconds: f64,
    /// Seconds each write (one batch) took until acknowledged.
    pub latencies: Vec<f64>,
}

impl Written {
    /// The latency at quantile `q` (0..=1) in milliseconds, 0 without writes.
    pub fn latency_ms(&self, q: f64) -> f64 {
        let mut l = self.latencies.clone();
        l.sort_by(f64::total_cmp);
        if l.is_empty() {
            return 0.0;
        }
        l[((l.len() - 1) as f64 * q).round() as usize] * 1e3
    }
}

pub fn write_points(
    col: &Collection,
    rows: usize,
    next_chunk: &mut dyn FnMut() -> anyhow::Result<Option<Matrix>>,
    payloads: &mut Payloads,
    batch: usize,
    json_progress: bool,
    max_rate: Option<f64>,
) -> anyhow::Result<Written> {
    let bars = Bars::for_output(json_progress);
    bars.phase("importing", rows as u64);
    let started = Instant::now();
    let (mut written, mut with_payload) = (0, 0);
    let mut latencies = Vec::with_capacity(rows.div_ceil(batch.max(1)));
    while let Some(chunk) = next_chunk()? {
        if let Some(pos) = chunk.ids.iter().position(|&id| id < 0) {
            bail!(
                "vector {} has id {}; point ids are unsigned",
                written + pos,
                chunk.ids[pos]
            );
        }
        for (first, ids) in (0..).step_by(batch).zip(chunk.ids.chunks(batch)) {
            let points = ids
                .iter()
                .enumerate()
                .map(|(i, &id)| {
                    let payload = payloads.remove(&(id as u64)).unwrap_or_default();
                    with_payload += usize::from(!payload.is_empty());
                    PointRecord::new(
                        PointId::Num(id as u64),
                        chunk.row(first + i).to_vec(),
                        payload,
                    )
                })
                .collect();
            let at = written + first;
            if let Some(rate) = max_rate {
                // Paced: this batch is due once the points before it took their share.
                let due = std::time::Duration::from_secs_f64(at as f64 / rate);
                if let Some(wait) = due.checked_sub(started.elapsed()) {
                    std::thread::sleep(wait);
                }
            }
            let call = Instant::now();
            col.upsert(points)
                .with_context(|| format!("writing points {at} to {}", at + ids.len() - 1))?;
            latencies.push(call.elapsed().as_secs_f64());
            bars.advance(ids.len() as u64);
        }
        written += chunk.len();
    }
    bars.finish();
    Ok(Written {
        points: written,
        with_payload,
        seconds: started.elapsed().as_secs_f64(),
        latencies,
    })
}

/// Upserts the vectors of `vectors` (held whole, as the demo does) like `write_points`.
pub fn write_matrix(
    col: &Collection,
    vectors: &Matrix,
    payloads: &mut Payloads,
    batch: usize,
) -> anyhow::Result<(usize, f64)> {
    let mut whole = Some(vectors.clone());
    let done = write_points(
        col,
        vectors.len(),
        &mut || Ok(whole.take()),
        payloads,
        batch,
        false,
        None,
    )?;
    let (with_payload, seconds) = (done.with_payload, done.seconds);
    Ok((with_payload, seconds))
}

pub fn run(args: Args) -> anyhow::Result<()> {
    ensure!(
        (1..=MAX_BATCH).contains(&args.batch),
        "--batch must be between 1 and {MAX_BATCH}, got {}",
        args.batch
    );
    diskvec_db::check_name(&args.collection)?;
    // The vectors are streamed a chunk at a time (a file larger than RAM imports); the
    // payloads are read whole, a few bytes per point.
    let mut stream = open_train_stream(&args.dataset, MemoryBudget::Bytes(256 << 20))?;
    let dim = stream.dim();
    let payload_file = args
        .payloads
        .clone()
        .or_else(|| default_payloads(&args.dataset));
    let mut payloads = match &payload_file {
        Some(f) => read_payloads(f)?,
        None => Payloads::new(),
    };
    let options = DbOptions {
        // A share of the raw vectors is the collection's; the database's stays automatic.
        build_memory: match args.build_memory {
            Some(b @ MemoryBudget::Bytes(_)) => b,
            _ => MemoryBudget::Auto,
        },
        // An import loads and exits: node caches filled between its seals would be read for
        // no search and take memory from its builds (a collection's own setting still holds).
        search_memory: MemoryBudget::Bytes(0),
        ..Default::default()
    };
    let db = Database::open_with_options(&args.db, options)?;
    let settings = NewCollection {
        build_memory: args.build_memory,
        search_memory: args.search_memory,
        metric: args.metric,
        seal_threshold: args.seal_threshold,
        max_segment_points: args.max_segment_points,
        paths: args.paths.clone(),
        interval_ms: args.interval_ms,
        in_memory: args.in_memory,
        no_navigation: args.no_navigation,
    };
    let (col, created) = open_or_create(&db, &args.collection, dim, &settings)?;
    for (field, kind) in &args.index_fields {
        col.create_payload_index(field, kind)
            .with_context(|| format!("indexing payload field {field:?}"))?;
    }
    let rows = stream.rows();
    if args.defer_indexing {
        col.set_indexing(false);
    }
    if let Some(rate) = args.max_rate {
        anyhow::ensure!(
            rate.is_finite() && rate > 0.0,
            "--max-rate must be a positive number of points a second, got {rate}"
        );
    }
    let done = write_points(
        &col,
        rows,
        &mut || Ok(stream.next_chunk()?),
        &mut payloads,
        args.batch,
        args.json,
        args.max_rate,
    )?;
    let (n, with_payload, seconds) = (done.points, done.with_payload, done.seconds);
    // The reader's buffers (a Parquet row group) and the payloads left over go before
    // `optimize`, whose merge is granted a share of the memory left.
    drop(stream);
    let unmatched = payloads.len();
    drop(payloads);
    let (p50, p99, slowest) = (
        done.latency_ms(0.5),
        done.latency_ms(0.99),
        done.latency_ms(1.0),
    );
    if args.defer_indexing {
        col.set_indexing(true);
    }
    let optimize_seconds = if args.optimize {
        let started = Instant::now();
        crate::progress::optimize(&col, args.json).context("sealing into DiskANN segments")?;
        Some(started.elapsed().as_secs_f64())
    } else {
        None
    };
    let info = col.info();
    drop(col);
    db.close()?;
    let rate = n as f64 / seconds.max(1e-9);
    if args.json {
        let j = json!({
            "db": args.db.display().to_string(), "collection": args.collection,
            "created": created, "dim": dim, "spaces": info.config.describe_spaces(),
            "points": n, "with_payload": with_payload, "payload_rows_without_vector": unmatched,
            "payloads": payload_file.map(|f| f.display().to_string()),
            "seconds": seconds, "points_per_second": rate, "max_rate": args.max_rate,
            "write_ms": {"p50": p50, "p99": p99, "max": slowest},
            "optimize_seconds": optimize_seconds,
            "load_seconds": optimize_seconds.map(|o| seconds + o),
            "total_points": info.points, "indexed_points": info.indexed_points,
            "segments": info.segments.len(),
            "last_build": info.last_task,
        });
        println!("{j}");
        return Ok(());
    }
    let payload_note = match &payload_file {
        Some(f) => format!("{with_payload} with payloads from {}", f.display()),
        None => "no payloads".to_string(),
    };
    println!(
        "imported {n} points ({payload_note}) into {} collection {:?} in {seconds:.2} s: {rate:.0} points/s",
        if created { "new" } else { "existing" },
        args.collection
    );
    println!(
        "  writes of {} points: p50 {p50:.2} ms, p99 {p99:.2} ms, slowest {slowest:.0} ms",
        args.batch
    );
    if unmatched > 0 {
        println!("  {unmatched} payload rows have no vector with their id and were left out");
    }
    if let Some(o) = optimize_seconds {
        println!(
            "optimized in {o:.2} s: load duration (until fully indexed) {:.2} s",
            seconds + o
        );
    }
    println!(
        "collection {:?}: {} points, {} indexed, {} segments",
        args.collection,
        info.points,
        info.indexed_points,
        info.segments.len()
    );
    Ok(())
}
