use std::path::PathBuf;

use anyhow::{bail, Context};
use diskvec_dataset::Neighbors;
use diskvec_index::diskann::{DiskIndex, OpenOptions, SearchParams, SearchResult};
use diskvec_index::limits::{check_open_options, check_search_params};
use diskvec_io::EngineChoice;
use diskvec_vector::Rows;
use serde_json::json;

use diskvec_bench::machine::peak_rss_mib as peak_rss_mb;
use diskvec_bench::metrics::{recall_at, Latency};

#[derive(clap::Args)]
pub struct Args {
    #[arg(long)]
    pub index: PathBuf,
    /// Dataset directory with test queries and neighbors (ground truth).
    #[arg(long)]
    pub dataset: PathBuf,
    #[arg(long, default_value_t = 10)]
    pub k: usize,
    /// L, the candidate-list size; a comma-separated list runs a sweep. Raised to k if below.
    #[arg(long, default_value = "100", value_delimiter = ',')]
    pub search_list: Vec<usize>,
    /// W: reads one query keeps in flight (twice that while it is the only query running).
    #[arg(long, default_value_t = 4)]
    pub beam_width: usize,
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Queries one thread interleaves, overlapping one's I/O with another's compute.
    #[arg(long, default_value_t = 16)]
    pub queries_per_thread: usize,
    /// Node records cached in DRAM at most: entry nodes first for a graph search, then the
    /// records the searches read again, or the whole file when it covers every node (default:
    /// the file's first 1%, plus the entry nodes for a graph search).
    #[arg(long)]
    pub cache_nodes: Option<usize>,
    /// auto, uring or pread.
    #[arg(long, default_value = "auto")]
    pub engine: EngineChoice,
    /// Most reads one thread keeps in flight on one path; more wait in a queue (backpressure).
    #[arg(long, default_value_t = 64)]
    pub queue_depth: usize,
    /// Emulate slower paths, e.g. "latency_us=80,iops=20000,mbps=1500": one spec for every
    /// path, or one per path separated by ';'.
    #[arg(long, value_delimiter = ';')]
    pub emulate_path: Vec<diskvec_io::PathEmulation>,
    /// Seconds a node read may take before it is given up on (0: wait forever): a mirrored
    /// index then reads the copy and serves the path from it until the path answers; an
    /// unmirrored search fails with the path named. Needs the io_uring engine.
    #[arg(long, default_value_t = diskvec_io::DEFAULT_READ_DEADLINE.as_secs_f64())]
    pub read_deadline: f64,
    /// Start every query at the medoid only, not also at the closest entry nodes (for comparison).
    #[arg(long)]
    pub no_entry_set: bool,
    /// Read through the page cache instead of O_DIRECT.
    #[arg(long)]
    pub buffered: bool,
    /// Walk the graph in DRAM (loads the navigation file: every neighbour list and a 4-bit
    /// code per node) and read the SSD only to re-rank.
    #[arg(long)]
    pub navigation: bool,
    /// Steer the walk by the compact PQ codes (a quarter of the full codes' bytes), as the
    /// database does where memory cannot hold the full ones.
    #[arg(long)]
    pub compact_codes: bool,
    /// With --navigation: how many standard deviations of a 4-bit estimate's error decide
    /// a candidate without reading it ("inf" reads every candidate).
    #[arg(long, default_value_t = diskvec_index::diskann::DEFAULT_RERANK_SIGMAS)]
    pub rerank_sigmas: f32,
    /// With --navigation: return the 4-bit estimates as the distances of candidates that
    /// are surely in the answer instead of reading them (same ids, fewer reads).
    #[arg(long)]
    pub estimated_distances: bool,
    /// Also print one JSON object per search list; the last line of stdout is JSON.
    #[arg(long)]
    pub json: bool,
}

use diskvec_bench::truth::{check_truth_ids, load_queries};

/// Aggregates of one run over all test queries.
pub struct RunSummary {
    pub search_list: usize,
    pub recall: f64,
    pub qps: f64,
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub mean_ios: f64,
    pub mean_cache_hits: f64,
    pub mean_free: f64,
    pub reads_per_second: f64,
}

pub fn summarize(
    results: &[SearchResult],
    gt: &Neighbors,
    k: usize,
    seconds: f64,
    search_list: usize,
) -> RunSummary {
    let n = results.len() as f64;
    let recall = results
        .iter()
        .zip(&gt.lists)
        .map(|(r, t)| recall_at(&r.ids, t, k))
        .sum::<f64>()
        / n;
    let lat: Vec<f64> = results.iter().map(|r| r.latency_us / 1000.0).collect();
    let latency = Latency::of(&lat);
    let reads: f64 = results.iter().map(|r| r.reads as f64).sum();
    RunSummary {
        search_list,
        recall,
        qps: n / seconds,
        mean_ms: latency.avg,
        p50_ms: latency.p50,
        p95_ms: latency.p95,
        p99_ms: latency.p99,
        mean_ios: reads / n,
        mean_cache_hits: results.iter().map(|r| r.cache_hits as f64).sum::<f64>() / n,
        mean_free: results
            .iter()
            .map(|r| r.free_expansions as f64)
            .sum::<f64>()
            / n,
        reads_per_second: reads / seconds,
    }
}

pub fn print_table_header() {
    println!(
        "{:>6} {:>9} {:>9} {:>8} {:>8} {:>8} {:>8} {:>9} {:>8} {:>10}",
        "L",
        "recall@k",
        "QPS",
        "mean ms",
        "p50 ms",
        "p95 ms",
        "p99 ms",
        "reads/q",
        "cache/q",
        "reads/s"
    );
}

pub fn print_row(s: &RunSummary) {
    println!(
        "{:>6} {:>9.4} {:>9.1} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>9.1} {:>8.1} {:>10.0}",
        s.search_list,
        s.recall,
        s.qps,
        s.mean_ms,
        s.p50_ms,
        s.p95_ms,
        s.p99_ms,
        s.mean_ios,
        s.mean_cache_hits,
        s.reads_per_second
    );
}

/// The parameters of each run of the sweep, checked before anything is loaded, with the
/// search list each run actually uses. Says once when the search raises L to k.
fn sweep(args: &Args) -> anyhow::Result<Vec<SearchParams>> {
    diskvec_index::limits::THREADS.check(args.threads)?;
    let runs = args
        .search_list
        .iter()
        .map(|&l| {
            check_search_params(&SearchParams {
                k: args.k,
                search_list: l,
                beam_width: args.beam_width,
                lone_query_widens: true,
                queries_per_thread: args.queries_per_thread,
                entry_set: !args.no_entry_set,
                rerank_sigmas: args.rerank_sigmas,
                exact_distances: !args.estimated_distances,
                query_prepared: false,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    if args.search_list.iter().any(|&l| l < args.k) {
        eprintln!(
            "note: search list raised to k={} where below it (the search needs at least k candidates)",
            args.k
        );
    }
    Ok(runs)
}

/// `--read-deadline` in seconds; 0 for none.
fn read_deadline(seconds: f64) -> anyhow::Result<Option<std::time::Duration>> {
    if !seconds.is_finite() || seconds < 0.0 {
        anyhow::bail!("--read-deadline must be a number of seconds, 0 or more (got {seconds})");
    }
    Ok((seconds > 0.0).then(|| std::time::Duration::from_secs_f64(seconds)))
}

/// Whether the full PQ codes (about the size of `meta.dvm`) would not fit in nine tenths of
/// the memory available (to this process's cgroup, if it has one) while the index has
/// compact codes: then the search steers by those rather than be killed loading the full
/// ones (measured: 10M x 768 in a 1.5 GB cgroup, 2 GB of full codes, OOM-killed).
fn full_codes_crowd(meta_bytes: u64, available: u64, has_compact: bool) -> bool {
    has_compact && meta_bytes as f64 > available as f64 * 0.9
}

/// The index's `meta.dvm` size (what its full codes take in DRAM, nearly) and whether it
/// has a compact code file.
fn code_files(index: &std::path::Path) -> (u64, bool) {
    let meta =
        std::fs::metadata(index.join(diskvec_index::diskann::META_FILE)).map_or(0, |m| m.len());
    (meta, diskvec_index::diskann::has_compact_file(index))
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let runs = sweep(&args)?;
    let mut compact_codes = args.compact_codes;
    if !compact_codes {
        let (meta, has_compact) = code_files(&args.index);
        let available = diskvec_index::diskann::available_memory();
        if full_codes_crowd(meta, available, has_compact) {
            eprintln!(
                "note: the full PQ codes ({}) do not fit in the memory available ({}): \
                 searching with the compact codes (--compact-codes)",
                diskvec_index::diskann::mib(meta),
                diskvec_index::diskann::mib(available)
            );
            compact_codes = true;
        }
    }
    let options = OpenOptions {
        engine: args.engine,
        direct: !args.buffered,
        cache_nodes: args.cache_nodes,
        queue_depth: args.queue_depth,
        emulate: args.emulate_path.clone(),
        read_deadline: read_deadline(args.read_deadline)?,
        navigation: args.navigation,
        compact_codes,
        ..OpenOptions::default()
    };
    check_open_options(&options)?;
    let (test, gt) = load_queries(&args.dataset, args.k)?;
    let index = DiskIndex::open(&args.index, &options)
        .with_context(|| format!("opening the index {}", args.index.display()))?;
    if let (true, Some(problem)) = (compact_codes, index.compact_problem()) {
        eprintln!(
            "note: --compact-codes: the index {}: {problem}; searching with the full codes",
            args.index.display()
        );
    }
    if let (true, Some(problem)) = (args.navigation, index.navigation_problem()) {
        bail!(
            "--navigation: the index {}: {problem}; rebuild it, or search without --navigation",
            args.index.display()
        );
    }
    if let (true, Some(off)) = (args.navigation, index.navigation_stepped_aside()) {
        eprintln!("note: --navigation: the build left navigation off ({off}); searching the graph");
    }
    if test.dim != index.dim() {
        bail!(
            "the test queries have dimension {}, the index has {}",
            test.dim,
            index.dim()
        );
    }
    check_truth_ids(&gt, args.k, &index.ids(), "the index")
        .with_context(|| format!("checking the ground truth in {}", args.dataset.display()))?;
    let engine = index.engine_kind()?;
    println!(
        "index {}: {} vectors x {} dims, {} cached nodes, engine {engine}, {}; k={}, W={}, {} threads x {} queries in flight",
        args.index.display(),
        index.len(),
        index.dim(),
        index.cached_nodes(),
        if index.direct_io() { "O_DIRECT" } else { "buffered" },
        args.k,
        args.beam_width,
        args.threads,
        args.queries_per_thread
    );
    print_table_header();
    let mut json_lines = Vec::new();
    for params in &runs {
        let l = params.search_list;
        index.reset_path_stats();
        let (results, stats) =
            index.search_batch(Rows::new(&test.data, test.dim), params, args.threads)?;
        let (files, _) = index.placement();
        let paths: Vec<serde_json::Value> = files
            .iter()
            .zip(index.path_stats())
            .map(|(f, p)| {
                json!({
                    "path": f.display().to_string(), "reads": p.reads,
                    "iops": p.reads as f64 / stats.seconds,
                    "mb_per_s": p.bytes as f64 / stats.seconds / 1e6,
                    "max_in_flight": p.max_in_flight, "waited_at_cap": p.waited, "failovers": p.failovers, "timeouts": p.timeouts,
                    "p50_us": p.p50_us, "p99_us": p.p99_us,
                })
            })
            .collect();
        let s = summarize(&results, &gt, args.k, stats.seconds, l);
        print_row(&s);
        json_lines.push(json!({
            "k": args.k, "search_list": l, "beam_width": args.beam_width, "threads": args.threads,
            "queries_per_thread": args.queries_per_thread, "entry_set": !args.no_entry_set, "cache_nodes": index.cached_nodes(),
            "engine": engine.to_string(), "direct_io": index.direct_io(),
            "recall": s.recall, "qps": s.qps, "mean_ms": s.mean_ms, "p50_ms": s.p50_ms,
            "p95_ms": s.p95_ms, "p99_ms": s.p99_ms, "mean_ios": s.mean_ios,
            "mean_cache_hits": s.mean_cache_hits, "mean_free_expansions": s.mean_free,
            "reads_per_second": s.reads_per_second, "max_in_flight": stats.max_in_flight,
            "dram_index_bytes": index.dram_bytes(), "peak_rss_mb": peak_rss_mb(),
            "queue_depth": args.queue_depth, "paths": paths,
            "emulate_path": args.emulate_path.iter().map(|e| format!("{e:?}")).collect::<Vec<_>>(),
        }));
    }
    println!(
        "peak RSS {:.0} MiB; index DRAM {:.1} MiB",
        peak_rss_mb(),
        index.dram_bytes() as f64 / 1048576.0
    );
    if args.json {
        for j in json_lines {
            println!("{j}");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compact_codes_are_taken_only_where_the_full_ones_crowd_and_exist() {
        let gib = 1u64 << 30;
        assert!(full_codes_crowd(2 * gib, gib + gib / 2, true));
        assert!(!full_codes_crowd(2 * gib, gib + gib / 2, false));
        assert!(!full_codes_crowd(gib, 4 * gib, true));
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(code_files(dir.path()), (0, false));
        std::fs::write(dir.path().join("meta.dvm"), [0u8; 10]).unwrap();
        let compact = diskvec_index::diskann::compact_file_name(0xff);
        std::fs::write(dir.path().join(compact), []).unwrap();
        assert_eq!(code_files(dir.path()), (10, true));
    }
}
