use std::path::PathBuf;

use anyhow::bail;
use diskvec_dataset::{write_neighbors, DatasetDir, Neighbors};
use diskvec_index::flat;
use diskvec_vector::{Metric, Rows};

use crate::progress::Bars;

#[derive(clap::Args)]
pub struct Args {
    /// Dataset directory with train and test vectors.
    #[arg(long)]
    pub dataset: PathBuf,
    #[arg(long, default_value_t = 100)]
    pub k: usize,
    #[arg(long, default_value = "cosine")]
    pub metric: Metric,
    /// Where to write (default: DATASET/neighbors.parquet).
    #[arg(long)]
    pub out: Option<PathBuf>,
    #[arg(long)]
    pub threads: Option<usize>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    diskvec_index::limits::K.check(args.k)?;
    crate::set_threads(args.threads)?;
    let d = DatasetDir::open(&args.dataset)?;
    let (mut train, mut test) = (d.train()?, d.test()?);
    if train.dim != test.dim {
        bail!(
            "train vectors have dimension {}, test vectors {}",
            train.dim,
            test.dim
        );
    }
    train
        .data
        .chunks_exact_mut(train.dim)
        .for_each(|v| args.metric.prepare(v));
    test.data
        .chunks_exact_mut(test.dim)
        .for_each(|v| args.metric.prepare(v));
    let bars = Bars::new();
    let found = flat::search(
        Rows::new(&train.data, train.dim),
        Rows::new(&test.data, test.dim),
        args.metric,
        args.k,
        &bars,
    )?;
    bars.finish();
    let lists = found
        .into_iter()
        .map(|r| {
            r.into_iter()
                .map(|(row, _)| train.ids[row as usize])
                .collect()
        })
        .collect();
    let out = args
        .out
        .unwrap_or_else(|| args.dataset.join("neighbors.parquet"));
    write_neighbors(
        &out,
        &Neighbors {
            query_ids: test.ids.clone(),
            lists,
        },
    )?;
    println!(
        "wrote exact top-{} of {} queries over {} vectors to {}",
        args.k,
        test.len(),
        train.len(),
        out.display()
    );
    Ok(())
}
