use std::path::{Path, PathBuf};

use anyhow::Context;
use diskvec_dataset::{open_stream, read_vectors, DatasetDir, Matrix, VectorStream};
use diskvec_index::diskann::{
    build_from, BuildParams, BuildReport, GraphBuilder, GraphPrecision, MemoryBudget, VectorSource,
};
use diskvec_index::limits;
use diskvec_vector::{ElementType, Metric};

use crate::progress::Bars;
use diskvec_bench::machine::peak_rss_mib as peak_rss_mb;

#[derive(clap::Args)]
pub struct Args {
    /// Dataset directory (VectorDBBench layout: train.parquet) or a .parquet/.fvecs/.bvecs/.npy file.
    #[arg(long)]
    pub dataset: PathBuf,
    /// Directory to write the index into.
    #[arg(long)]
    pub index: PathBuf,
    #[arg(long, default_value = "cosine")]
    pub metric: Metric,
    /// R: out-degree bound of the graph.
    #[arg(long, default_value_t = 64)]
    pub max_degree: usize,
    /// L: candidate-list size while building.
    #[arg(long, default_value_t = 100)]
    pub build_list: usize,
    #[arg(long, default_value_t = 1.2)]
    pub alpha: f32,
    /// PQ code bytes per vector kept in DRAM (default: dimension / 4).
    #[arg(long)]
    pub pq_bytes: Option<usize>,
    /// Directories to stripe the nodes over, one per device or NVMe-oF namespace
    /// (default: the index directory alone).
    #[arg(long, value_delimiter = ',')]
    pub paths: Vec<PathBuf>,
    /// Stripe size in KiB when striping over several paths.
    #[arg(long, default_value_t = 64)]
    pub stripe_kib: u64,
    /// Keep a copy of every stripe on the next path, so searches survive a failed path.
    #[arg(long)]
    pub mirror: bool,
    /// Peak memory of the build: bytes with a unit (768MiB, 2GiB) or a share of the raw
    /// vectors (25%); `auto` takes half of the memory available. A build larger than the
    /// budget runs in shards; one below what the smallest shards need is refused.
    #[arg(long, default_value = "auto")]
    pub memory_budget: MemoryBudget,
    /// What the graph's distances are computed on while it is built: `sq8`, 8-bit codes (a
    /// quarter of the memory traffic), or `f32`, the vectors themselves. The index stores
    /// the full vectors either way.
    #[arg(long, default_value = "sq8")]
    pub graph_precision: GraphPrecision,
    /// The algorithm the graph comes from: `vamana` (each vector inserted by a search of
    /// the graph so far) or `pipnn` (vectors carved into small overlapping leaves, all
    /// distances within a leaf computed at once; faster, see docs/benchmarks.md).
    #[arg(long, default_value = "vamana")]
    pub graph_builder: GraphBuilder,
    /// How the node records on SSD store the full vectors: float32, float16 (half the
    /// bytes: a 768-d record fits two to a 4 KiB sector) or uint8 (whole numbers 0-255, not
    /// with cosine). Values are rounded once, after cosine's normalization; float16 refuses
    /// values beyond 65504 and uint8 anything but whole numbers from 0 to 255.
    #[arg(long, default_value = "float32")]
    pub dtype: ElementType,
    /// Build threads (default: one per core).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Print the report as one JSON object on the last line.
    #[arg(long)]
    pub json: bool,
}

/// Loads the training vectors of a dataset directory or a single vector file.
pub fn load_train(path: &Path) -> anyhow::Result<Matrix> {
    let m = if path.is_dir() {
        DatasetDir::open(path)?.train()?
    } else {
        read_vectors(path)?
    };
    Ok(m)
}

/// The training vectors of a dataset directory or a vector file, opened for streaming.
/// Chunks are sized to a 192nd of the budget: a parquet reader holds several times its
/// chunk while decoding it, and its decoding threads (`open_stream`) hold up to two chunks
/// each besides the one the build works on.
pub fn open_train_stream(path: &Path, budget: MemoryBudget) -> anyhow::Result<VectorStream> {
    let file = if path.is_dir() {
        DatasetDir::open(path)?.train_path()?
    } else {
        path.to_path_buf()
    };
    let probe = open_stream(&file, 1)?;
    let bytes = budget.resolve(probe.raw_bytes()) / 192;
    let rows =
        (bytes / (4 * probe.dim() as u64)).clamp(64, diskvec_dataset::DEFAULT_CHUNK_ROWS as u64);
    drop(probe);
    Ok(open_stream(&file, rows as usize)?)
}

/// A dataset stream as the index build reads it.
pub struct StreamSource(pub VectorStream);

impl VectorSource for StreamSource {
    fn dim(&self) -> usize {
        self.0.dim()
    }
    fn rows(&self) -> usize {
        self.0.rows()
    }
    fn next_chunk(&mut self, data: &mut Vec<f32>, ids: &mut Vec<i64>) -> Result<usize, String> {
        data.clear();
        ids.clear();
        match self.0.next_chunk() {
            Ok(Some(m)) => {
                *data = m.data;
                *ids = m.ids;
                Ok(ids.len())
            }
            Ok(None) => Ok(0),
            Err(e) => Err(e.to_string()),
        }
    }

    fn rewind(&mut self) -> Result<(), String> {
        self.0 = self.0.reopen().map_err(|e| e.to_string())?;
        Ok(())
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    // Refuse bad sizes before a possibly long load; the dimension-dependent ones wait for it.
    limits::MAX_DEGREE.check(args.max_degree)?;
    limits::BUILD_LIST.check(args.build_list)?;
    crate::set_threads(args.threads)?;
    let stream = open_train_stream(&args.dataset, args.memory_budget)?;
    eprintln!(
        "building from {} vectors of dimension {} ({}) within {}",
        stream.rows(),
        stream.dim(),
        stream.path().display(),
        match args.memory_budget {
            MemoryBudget::Auto => format!(
                "{} (auto: half of the memory available)",
                diskvec_index::diskann::mib(args.memory_budget.resolve(stream.raw_bytes()))
            ),
            b => format!(
                "{b} ({})",
                diskvec_index::diskann::mib(b.resolve(stream.raw_bytes()))
            ),
        }
    );
    let report = build_index(StreamSource(stream), &args)?;
    let rss = peak_rss_mb();
    if args.json {
        let j = serde_json::json!({
            "count": report.count, "dim": report.dim, "pq_bytes": report.pq_bytes,
            "max_degree": args.max_degree, "build_list": args.build_list, "alpha": args.alpha,
            "graph_precision": args.graph_precision.name(),
            "graph_builder": args.graph_builder.name(), "dtype": args.dtype.name(),
            "pq_seconds": report.pq_seconds,
            "graph_seconds": report.graph_seconds, "write_seconds": report.write_seconds,
            "build_seconds": report.total_seconds, "nodes_file_bytes": report.nodes_file_bytes,
            "meta_file_bytes": report.meta_file_bytes, "peak_rss_mb": rss,
            "shards": report.shards, "memory_budget_bytes": report.memory_budget,
            "resumed_shards": report.resumed_shards,
            "disk_peak_estimate_bytes": report.disk_peak_estimate,
            "navigation_off": report.navigation_off.map(|off| off.to_string()),
        });
        println!("{j}");
    } else {
        print_report(&report, &args.index, rss);
    }
    Ok(())
}

pub fn build_index(mut source: impl VectorSource, args: &Args) -> anyhow::Result<BuildReport> {
    let params = BuildParams {
        metric: args.metric,
        max_degree: args.max_degree,
        build_list: args.build_list,
        alpha: args.alpha,
        pq_bytes: args.pq_bytes,
        paths: args.paths.clone(),
        stripe_bytes: args.stripe_kib * 1024,
        mirror: args.mirror,
        graph_precision: args.graph_precision,
        graph_builder: args.graph_builder,
        element: args.dtype,
        ..Default::default()
    };
    let bars = Bars::for_output(args.json);
    let report = build_from(&mut source, &params, args.memory_budget, &args.index, &bars)
        .with_context(|| format!("building the index in {}", args.index.display()))?;
    bars.finish();
    Ok(report)
}

pub fn print_report(r: &BuildReport, index: &Path, rss: f64) {
    println!(
        "built {} ({} vectors x {} dims, PQ {} B)",
        index.display(),
        r.count,
        r.dim,
        r.pq_bytes
    );
    println!(
        "  PQ {:.1} s, graph {:.1} s, layout write {:.1} s, total {:.1} s; peak RSS {rss:.0} MiB",
        r.pq_seconds, r.graph_seconds, r.write_seconds, r.total_seconds
    );
    if r.shards > 1 {
        println!(
            "  built in {} overlapping shards to stay within {}",
            r.shards,
            diskvec_index::diskann::mib(r.memory_budget)
        );
    }
    if let Some(peak) = r.disk_peak_estimate {
        println!(
            "  disk at its peak (estimated before it began): {:.1} GB",
            peak as f64 / 1e9
        );
    }
    if r.resumed_shards > 0 {
        println!(
            "  resumed: {} of the {} shard graphs were kept from an interrupted build",
            r.resumed_shards, r.shards
        );
    }
    if let Some(off) = &r.navigation_off {
        println!("  navigation left off: {off}");
    }
    println!(
        "  on disk {:.1} MiB (nodes) + {:.1} MiB (DRAM part)",
        r.nodes_file_bytes as f64 / 1048576.0,
        r.meta_file_bytes as f64 / 1048576.0
    );
}
