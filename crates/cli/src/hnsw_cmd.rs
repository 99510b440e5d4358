use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context};
use diskvec_index::hnsw::{HnswIndex, HnswParams};
use diskvec_index::limits;
use diskvec_vector::{Metric, Rows};
use serde_json::json;

use crate::build_cmd::load_train;
use crate::progress::Bars;
use crate::search_cmd::{print_row, print_table_header, summarize};
use diskvec_bench::machine::peak_rss_mib as peak_rss_mb;
use diskvec_bench::truth::{check_truth_ids, load_queries};

#[derive(clap::Args)]
pub struct Args {
    /// Dataset directory (train, test and neighbors).
    #[arg(long)]
    pub dataset: PathBuf,
    #[arg(long, default_value = "cosine")]
    pub metric: Metric,
    /// M: links per node (level 0 keeps 2M). The briefs use 30.
    #[arg(long, default_value_t = 30)]
    pub m: usize,
    /// The briefs use 360.
    #[arg(long, default_value_t = 360)]
    pub ef_construction: usize,
    /// ef at search; a comma-separated list runs a sweep. Raised to k if below. The briefs use 100.
    #[arg(long, default_value = "100", value_delimiter = ',')]
    pub ef: Vec<usize>,
    #[arg(long, default_value_t = 10)]
    pub k: usize,
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Also print one JSON object per ef; the last line of stdout is JSON.
    #[arg(long)]
    pub json: bool,
}

/// Builds an in-memory HNSW index on the dataset and runs its test queries: the baseline
/// the disk index is compared with.
pub fn run(args: Args) -> anyhow::Result<()> {
    limits::HNSW_M.check(args.m)?;
    limits::EF_CONSTRUCTION.check(args.ef_construction)?;
    limits::K.check(args.k)?;
    limits::THREADS.check(args.threads)?;
    for &ef in &args.ef {
        limits::EF.check(ef)?;
    }
    if args.ef.iter().any(|&ef| ef < args.k) {
        eprintln!(
            "note: ef raised to k={} where below it (the search needs at least k candidates)",
            args.k
        );
    }
    let train = load_train(&args.dataset)?;
    let (test, gt) = load_queries(&args.dataset, args.k)?;
    if test.dim != train.dim {
        bail!(
            "test queries have dimension {}, train vectors {}",
            test.dim,
            train.dim
        );
    }
    check_truth_ids(&gt, args.k, &train.ids, "the train vectors")
        .with_context(|| format!("checking the ground truth in {}", args.dataset.display()))?;
    let start = Instant::now();
    let bars = Bars::new();
    let params = HnswParams {
        m: args.m,
        ef_construction: args.ef_construction,
        seed: 1,
    };
    let index = HnswIndex::build(
        &train.data,
        train.dim,
        &train.ids,
        args.metric,
        params,
        &bars,
    )?;
    bars.finish();
    let build_seconds = start.elapsed().as_secs_f64();
    println!(
        "HNSW in memory: {} vectors x {} dims, M={}, efConstruction={}, built in {build_seconds:.1} s, {:.1} MiB in DRAM",
        index.len(),
        index.dim(),
        args.m,
        args.ef_construction,
        index.dram_bytes() as f64 / 1048576.0
    );
    print_table_header();
    let mut lines = Vec::new();
    for &ef in &args.ef {
        let ef = ef.max(args.k);
        let (results, seconds) =
            index.search_batch(Rows::new(&test.data, test.dim), args.k, ef, args.threads)?;
        let s = summarize(&results, &gt, args.k, seconds, ef);
        print_row(&s);
        lines.push(json!({
            "index": "hnsw", "m": args.m, "ef_construction": args.ef_construction, "ef": ef, "k": args.k,
            "threads": args.threads, "build_seconds": build_seconds, "recall": s.recall, "qps": s.qps,
            "mean_ms": s.mean_ms, "p50_ms": s.p50_ms, "p95_ms": s.p95_ms, "p99_ms": s.p99_ms,
            "dram_index_bytes": index.dram_bytes(), "peak_rss_mb": peak_rss_mb(),
        }));
    }
    if args.json {
        for l in lines {
            println!("{l}");
        }
    }
    Ok(())
}
