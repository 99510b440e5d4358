use std::path::{Path, PathBuf};

use anyhow::Context;
use diskvec_index::diskann::{DiskIndex, OpenOptions, SearchParams};
use diskvec_vector::{Metric, Rows};

use crate::build_cmd;
use crate::search_cmd::{print_row, print_table_header, summarize};
use diskvec_bench::machine::peak_rss_mib as peak_rss_mb;
use diskvec_bench::truth::load_queries;

const BUNDLED: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../data/wordnet-minilm384-5k"
);

#[derive(clap::Args)]
pub struct Args {
    /// Dataset directory (default: the WordNet sample bundled in the repository).
    #[arg(long, default_value = BUNDLED)]
    pub dataset: PathBuf,
    /// Where to write the index.
    #[arg(long, default_value = "demo-index")]
    pub index: PathBuf,
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .map(|s| s.lines().map(str::to_string).collect())
        .unwrap_or_default()
}

pub fn run(args: Args) -> anyhow::Result<()> {
    println!(
        "diskvec demo: a DISKANN index on {} (WordNet glosses, all-MiniLM-L6-v2 embeddings)\n",
        args.dataset.display()
    );
    let train = build_cmd::load_train(&args.dataset).context("loading the demo dataset")?;
    let build_args = build_cmd::Args {
        dataset: args.dataset.clone(),
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

    let (test, gt) = load_queries(&args.dataset)?;
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

    let train_text = lines(&args.dataset.join("train.txt"));
    let test_text = lines(&args.dataset.join("test.txt"));
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
