use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;
use diskvec_dataset::{read_vectors, DatasetDir, Matrix};
use diskvec_index::diskann::{build, BuildParams, BuildReport};
use diskvec_index::limits;
use diskvec_vector::Metric;

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

pub fn run(args: Args) -> anyhow::Result<()> {
    // Refuse bad sizes before a possibly long load; the dimension-dependent ones wait for it.
    limits::MAX_DEGREE.check(args.max_degree)?;
    limits::BUILD_LIST.check(args.build_list)?;
    crate::set_threads(args.threads)?;
    let start = Instant::now();
    let train = load_train(&args.dataset)?;
    let load_seconds = start.elapsed().as_secs_f64();
    eprintln!(
        "loaded {} vectors of dimension {} in {load_seconds:.1} s",
        train.len(),
        train.dim
    );
    let report = build_index(&train, &args)?;
    let rss = peak_rss_mb();
    if args.json {
        let j = serde_json::json!({
            "count": report.count, "dim": report.dim, "pq_bytes": report.pq_bytes,
            "max_degree": args.max_degree, "build_list": args.build_list, "alpha": args.alpha,
            "load_seconds": load_seconds, "pq_seconds": report.pq_seconds,
            "graph_seconds": report.graph_seconds, "write_seconds": report.write_seconds,
            "build_seconds": report.total_seconds, "nodes_file_bytes": report.nodes_file_bytes,
            "meta_file_bytes": report.meta_file_bytes, "peak_rss_mb": rss,
        });
        println!("{j}");
    } else {
        print_report(&report, &args.index, rss);
    }
    Ok(())
}

pub fn build_index(train: &Matrix, args: &Args) -> anyhow::Result<BuildReport> {
    let params = BuildParams {
        metric: args.metric,
        max_degree: args.max_degree,
        build_list: args.build_list,
        alpha: args.alpha,
        pq_bytes: args.pq_bytes,
        paths: args.paths.clone(),
        stripe_bytes: args.stripe_kib * 1024,
        mirror: args.mirror,
        ..Default::default()
    };
    let bars = Bars::new();
    let report = build(
        &train.data,
        train.dim,
        &train.ids,
        &params,
        &args.index,
        &bars,
    )
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
    println!(
        "  on disk {:.1} MiB (nodes) + {:.1} MiB (DRAM part)",
        r.nodes_file_bytes as f64 / 1048576.0,
        r.meta_file_bytes as f64 / 1048576.0
    );
}
