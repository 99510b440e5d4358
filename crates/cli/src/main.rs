//! `diskvec`: build, search and inspect disk-resident vector indexes.

mod bench_cmd;
mod build_cmd;
mod cluster_access;
mod cluster_cmd;
mod dataset_cmd;
mod db_cmd;
mod demo_cmd;
mod groundtruth_cmd;
mod hnsw_cmd;
mod import_cmd;
mod inspect_cmd;
mod iobench_cmd;
mod payloads;
mod progress;
mod query_cmd;
mod query_recall;
mod search_cmd;
mod serve_cmd;
mod serve_guard;
mod verify_cmd;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "diskvec",
    version,
    about = "A disk-native vector database: DiskANN on NVMe, measured."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Build a DISKANN index from a dataset directory or a vector file.
    Build(build_cmd::Args),
    /// Run a dataset's test queries against an index and report recall, QPS and latency.
    Search(search_cmd::Args),
    /// Build an in-memory HNSW index (the baseline) on a dataset and run its test queries.
    Hnsw(hnsw_cmd::Args),
    /// Print an index's header, sizes and placement.
    Inspect(inspect_cmd::Args),
    /// Check every sector of an index, every copy, and name each damaged one.
    Verify(verify_cmd::Args),
    /// Measure storage like fio: IOPS, MB/s, latency and CPU for block sizes, mixes, depths.
    Iobench(iobench_cmd::Args),
    /// Compute exact nearest neighbours (FLAT) and write neighbors.parquet.
    Groundtruth(groundtruth_cmd::Args),
    /// Run VectorDBBench's Performance case on configurations (ours and peers) and report.
    Bench(bench_cmd::Args),
    /// Combine `bench` results files into the briefs' tables.
    Report(bench_cmd::ReportArgs),
    /// One configuration of `bench`, in a process of its own (started by `bench`).
    #[command(hide = true)]
    BenchCase(bench_cmd::CaseArgs),
    /// Make datasets: `dataset synth` writes a synthetic one with exact ground truth.
    #[command(subcommand)]
    Dataset(dataset_cmd::Command),
    /// Import a dataset's vectors and payloads into a database collection.
    Import(import_cmd::Args),
    /// Search a database collection, optionally filtered by payload.
    Query(query_cmd::Args),
    /// Inspect a database (`db info`) or drop a collection (`db drop`).
    #[command(subcommand)]
    Db(db_cmd::Command),
    /// Load the bundled WordNet sample into a database, then search, filter, delete, reopen.
    Demo(demo_cmd::Args),
    /// Serve a database over Qdrant's REST API (qdrant-client, VectorDBBench work unchanged).
    Serve(serve_cmd::Args),
    /// Operate a cluster of `serve --cluster` nodes (`cluster rebalance`).
    #[command(subcommand)]
    Cluster(cluster_cmd::Command),
}

fn main() {
    let cli = Cli::parse();
    let serving = matches!(cli.command, Command::Serve(_));
    if serving {
        survive_closed_connections();
    } else {
        quiet_on_closed_stdout();
    }
    // A server's log is read against other processes' (etcd's, NATS's, a client's): stamped.
    let mut logger =
        env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn"));
    if serving {
        logger.format_timestamp_millis();
    } else {
        logger.format_timestamp(None);
    }
    logger.init();
    let outcome = match cli.command {
        Command::Build(a) => build_cmd::run(a),
        Command::Search(a) => search_cmd::run(a),
        Command::Inspect(a) => inspect_cmd::run(a),
        Command::Verify(a) => verify_cmd::run(a),
        Command::Hnsw(a) => hnsw_cmd::run(a),
        Command::Groundtruth(a) => groundtruth_cmd::run(a),
        Command::Iobench(a) => iobench_cmd::run_cmd(a),
        Command::Demo(a) => demo_cmd::run(a),
        Command::Serve(a) => serve_cmd::run(a),
        Command::Cluster(c) => cluster_cmd::run(c),
        Command::Import(a) => import_cmd::run(a),
        Command::Query(a) => query_cmd::run(a),
        Command::Db(c) => db_cmd::run(c),
        Command::Dataset(c) => dataset_cmd::run(c),
        Command::Bench(a) => bench_cmd::run(a),
        Command::Report(a) => bench_cmd::report(a),
        Command::BenchCase(a) => bench_cmd::run_case_cmd(a),
    };
    if let Err(e) = outcome {
        eprintln!("error: {}", message(&e));
        std::process::exit(1);
    }
}

/// Ends the process quietly when stdout's reader goes away (`diskvec search ... | head`),
/// as Unix tools do, instead of panicking in `println!` on EPIPE.
fn quiet_on_closed_stdout() {
    // SAFETY: called in main right after parsing the arguments, before any other thread
    // exists, so nothing can race on the signal disposition; SIG_DFL is a valid
    // disposition for SIGPIPE.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// A server must outlive a client that hangs up mid-answer: a write to its socket fails
/// with EPIPE (the request ends) instead of SIGPIPE ending the process (vectored socket
/// writes, which hyper uses, raise the signal).
fn survive_closed_connections() {
    // SAFETY: as above, before any other thread exists; SIG_IGN is a valid disposition for
    // SIGPIPE.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
}

/// The error and its causes, each said once. Several error types name their cause in their
/// own message and also return it as their source, which `{:#}` would print a second time;
/// and a context like "opening X" need not be followed by "X: ..." again.
fn message(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let mut text = cause.to_string();
        if out == text || out.ends_with(&format!(": {text}")) {
            continue;
        }
        if let Some((head, rest)) = text.split_once(": ") {
            if !head.is_empty() && out.ends_with(&format!(" {head}")) {
                text = rest.to_string();
            }
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

/// Sizes the global thread pool; `None` keeps one thread per core.
pub(crate) fn set_threads(threads: Option<usize>) -> anyhow::Result<()> {
    if let Some(t) = threads {
        diskvec_index::limits::THREADS.check(t)?;
        rayon::ThreadPoolBuilder::new()
            .num_threads(t)
            .build_global()?;
    }
    Ok(())
}
