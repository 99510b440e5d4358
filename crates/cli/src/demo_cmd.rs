use std::path::{Path, PathBuf};

use anyhow::Context;
use diskvec_index::diskann::{DiskIndex, OpenOptions, SearchParams};
use diskvec_vector::{Metric, Rows};

use crate::build_cmd;
use crate::search_cmd::{print_row, print_table_header, summarize};
use diskvec_bench::machine::peak_rss_mib as peak_rss_mb;
use diskvec_bench::truth::{check_truth_ids, load_queries};

/// Where the repository keeps the sample, relative to its root.
const SAMPLE: &str = "data/wordnet-minilm384-5k";

#[derive(clap::Args)]
pub struct Args {
    /// Dataset directory (default: data/wordnet-minilm384-5k of the repository, looked for
    /// under the current directory, then next to the executable and its parent directories).
    #[arg(long)]
    pub dataset: Option<PathBuf>,
    /// Where to write the index.
    #[arg(long, default_value = "demo-index")]
    pub index: PathBuf,
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
}

/// The bundled sample: under the current directory (a checkout's root, as `cargo run`
/// starts from there), else under the executable's directory or one of its parents (as
/// `target/release/diskvec` sits two levels below the root). The binary carries no path
/// fixed at compile time, so it works wherever it and the checkout are.
fn find_sample() -> anyhow::Result<PathBuf> {
    let mut tried = Vec::new();
    if let Ok(cwd) = std::env::current_dir() {
        tried.push(cwd.join(SAMPLE));
    }
    if let Ok(exe) = std::env::current_exe().and_then(|e| e.canonicalize()) {
        tried.extend(exe.ancestors().skip(1).map(|d| d.join(SAMPLE)));
    }
    if let Some(found) = tried.iter().find(|p| p.is_dir()) {
        return Ok(found.clone());
    }
    let places: Vec<String> = tried.iter().map(|p| format!("  {}", p.display())).collect();
    anyhow::bail!(
        "the demo's sample dataset ({SAMPLE}) is not in any of the places looked:\n{}\n\
         run the demo from the repository's root, or pass --dataset <directory>",
        places.join("\n")
    )
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .map(|s| s.lines().map(str::to_string).collect())
        .unwrap_or_default()
}

pub fn run(args: Args) -> anyhow::Result<()> {
    diskvec_index::limits::THREADS.check(args.threads)?;
    let dataset = match args.dataset {
        Some(d) => d,
        None => find_sample()?,
    };
    println!(
        "diskvec demo: a DISKANN index on {} (WordNet glosses, all-MiniLM-L6-v2 embeddings)\n",
        dataset.display()
    );
    let train = build_cmd::load_train(&dataset).context("loading the demo dataset")?;
    let (test, gt) = load_queries(&dataset, 10)?;
    check_truth_ids(&gt, 10, &train.ids, "the train vectors")
        .with_context(|| format!("checking the ground truth in {}", dataset.display()))?;
    let build_args = build_cmd::Args {
        dataset: dataset.clone(),
        index: args.index.clone(),
        metric: Metric::Cosine,
        max_degree: 64,
        build_list: 100,
        alpha: 1.2,
        pq_bytes: None,
        paths: Vec::new(),
        stripe_kib: 64,
        mirror: false,
        threads: None,
        json: false,
    };
    let report = build_cmd::build_index(&train, &build_args)?;
    build_cmd::print_report(&report, &args.index, peak_rss_mb());

    let index = DiskIndex::open(&args.index, &OpenOptions::default())?;
    println!(
        "\nsearching {} test queries, k=10, beam width 4, {} threads, engine {}, {}, {} cached nodes:",
        test.len(),
        args.threads,
        index.engine_kind()?,
        if index.direct_io() { "O_DIRECT" } else { "buffered (O_DIRECT unsupported here)" },
        index.cached_nodes()
    );
    print_table_header();
    for l in [10, 20, 50, 100] {
        let params = SearchParams {
            k: 10,
            search_list: l,
            ..Default::default()
        };
        let (results, stats) =
            index.search_batch(Rows::new(&test.data, test.dim), &params, args.threads)?;
        print_row(&summarize(&results, &gt, 10, stats.seconds, l));
    }

    let train_text = lines(&dataset.join("train.txt"));
    let test_text = lines(&dataset.join("test.txt"));
    if train_text.is_empty() || test_text.is_empty() {
        return Ok(());
    }
    println!("\nwhat the index returns (L=50):");
    for qi in [0usize, 1, 2] {
        let Some(query) = test_text.get(test.ids[qi] as usize) else {
            continue;
        };
        let r = index.search(
            test.row(qi),
            &SearchParams {
                k: 3,
                search_list: 50,
                ..Default::default()
            },
        )?;
        println!("  query: {query}");
        for (id, d) in r.ids.iter().zip(&r.distances) {
            let text = train_text
                .get(*id as usize)
                .map(String::as_str)
                .unwrap_or("?");
            println!("    {:.3}  {text}", 1.0 - d);
        }
    }
    Ok(())
}
