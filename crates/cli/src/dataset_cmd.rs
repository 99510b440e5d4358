use std::path::PathBuf;

use diskvec_bench::head::{write_head, HeadParams};
use diskvec_bench::synth::{synthetic_params, write_more_rows, write_synthetic, SynthParams};

use crate::progress::Bars;

#[derive(clap::Subcommand)]
pub enum Command {
    /// Write a synthetic dataset (clustered, low intrinsic dimension, cosine) with exact
    /// ground truth, in VectorDBBench's layout.
    Synth(SynthArgs),
    /// Cut a smaller dataset from a larger one: its first N train vectors (ids and vectors),
    /// the same test queries and their exact ground truth over those N. The first N rows of
    /// a synthetic set are the set `synth --n N` writes.
    Head(HeadArgs),
    /// Write N more train vectors of a synthetic set: rows of the same generator that the set
    /// does not hold (new points of the same distribution, e.g. to write into a collection
    /// loaded from the set), as a train.parquet without queries or truth.
    More(MoreArgs),
}

#[derive(clap::Args)]
pub struct MoreArgs {
    /// The synthetic dataset directory whose generator writes the rows.
    #[arg(long)]
    pub like: PathBuf,
    #[arg(long)]
    pub n: usize,
    /// Most train vectors held in memory at once, in MiB.
    #[arg(long, default_value_t = 512)]
    pub memory_mib: usize,
    #[arg(long)]
    pub out: PathBuf,
}

#[derive(clap::Args)]
pub struct HeadArgs {
    /// The dataset directory to cut from.
    #[arg(long)]
    pub from: PathBuf,
    #[arg(long)]
    pub n: usize,
    /// Neighbours per query in the ground truth.
    #[arg(long, default_value_t = 100)]
    pub k: usize,
    #[arg(long, default_value = "cosine")]
    pub metric: diskvec_vector::Metric,
    /// How the train vectors are stored (default: the source's synthetic type, else float32).
    #[arg(long)]
    pub dtype: Option<diskvec_vector::ElementType>,
    /// Most train vectors held in memory at once, in MiB.
    #[arg(long, default_value_t = 512)]
    pub memory_mib: usize,
    #[arg(long)]
    pub out: PathBuf,
}

#[derive(clap::Args)]
pub struct SynthArgs {
    #[arg(long, default_value_t = 1_000_000)]
    pub n: usize,
    #[arg(long, default_value_t = 768)]
    pub dim: usize,
    #[arg(long, default_value_t = 1000)]
    pub queries: usize,
    #[arg(long, default_value_t = 1024)]
    pub clusters: usize,
    #[arg(long, default_value_t = 32)]
    pub intrinsic_dim: usize,
    /// Neighbours per query in the ground truth.
    #[arg(long, default_value_t = 100)]
    pub k: usize,
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// How the train vectors are stored: float32, or float16 (half the bytes; rounded after
    /// normalization, and the ground truth is of the rounded values). Queries stay float32.
    #[arg(long, default_value = "float32")]
    pub dtype: diskvec_vector::ElementType,
    /// Most train vectors held in memory at once, in MiB (the truth is computed a block at a time).
    #[arg(long, default_value_t = 512)]
    pub memory_mib: usize,
    #[arg(long)]
    pub out: PathBuf,
}

pub fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Synth(a) => {
            let p = SynthParams {
                n: a.n,
                dim: a.dim,
                queries: a.queries,
                clusters: a.clusters,
                intrinsic_dim: a.intrinsic_dim,
                k: a.k,
                seed: a.seed,
                dtype: a.dtype.name().to_string(),
            };
            let start = std::time::Instant::now();
            let bars = Bars::new();
            write_synthetic(&p, &a.out, a.memory_mib << 20, &bars)?;
            bars.finish();
            println!(
                "wrote a synthetic dataset of {} x {} {} (+{} queries, exact top-{}) to {} in {:.1} s",
                p.n,
                p.dim,
                p.dtype,
                p.queries,
                p.k,
                a.out.display(),
                start.elapsed().as_secs_f64()
            );
            Ok(())
        }
        Command::More(a) => {
            let Some(p) = synthetic_params(&a.like) else {
                anyhow::bail!(
                    "{} is not a synthetic dataset (no readable synthetic.json): only a synthetic \
                     set's generator can write more of its rows",
                    a.like.display()
                );
            };
            let start = std::time::Instant::now();
            let bars = Bars::new();
            let first = write_more_rows(&p, a.n, &a.out, a.memory_mib << 20, &bars)?;
            bars.finish();
            println!(
                "wrote {} more train vectors of {} (rows {} to {}, not in it) to {} in {:.1} s",
                a.n,
                a.like.display(),
                first,
                first + a.n - 1,
                a.out.display(),
                start.elapsed().as_secs_f64()
            );
            Ok(())
        }
        Command::Head(a) => {
            diskvec_index::limits::K.check(a.k)?;
            let p = HeadParams {
                n: a.n,
                k: a.k,
                metric: a.metric,
                dtype: a.dtype,
            };
            let start = std::time::Instant::now();
            let bars = Bars::new();
            write_head(&a.from, &p, &a.out, a.memory_mib << 20, &bars)?;
            bars.finish();
            println!(
                "wrote the first {} train vectors of {} (+ its test queries, exact top-{}) to {} in {:.1} s",
                a.n,
                a.from.display(),
                a.k.min(a.n),
                a.out.display(),
                start.elapsed().as_secs_f64()
            );
            Ok(())
        }
    }
}
