use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use diskvec_bench::case::{run_case, CaseOptions};
use diskvec_bench::charts::draw_run;
use diskvec_bench::config::Config;
use diskvec_bench::harness::{bench, BenchOptions, RunFile};
use diskvec_bench::price::PriceTable;
use diskvec_bench::report::{merge_by_dataset, render_briefs, render_run};
use diskvec_vector::Metric;

use crate::progress::Bars;

fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get())
}

/// How every configuration is measured; `bench` hands the same values to its children.
#[derive(clap::Args)]
pub struct MethodArgs {
    #[arg(long, default_value_t = 100)]
    pub k: usize,
    #[arg(long, default_value = "cosine")]
    pub metric: Metric,
    /// Concurrency levels of the concurrent phase.
    #[arg(long, default_value = "1,5,10,20,30,40,60,80", value_delimiter = ',')]
    pub concurrency: Vec<usize>,
    /// Seconds per concurrency level.
    #[arg(long, default_value_t = 30.0)]
    pub duration: f64,
    /// Seconds per sweep point (at least one pass over the queries).
    #[arg(long, default_value_t = 10.0)]
    pub sweep_duration: f64,
    /// Search threads on the serving side (default: one per core).
    #[arg(long, default_value_t = default_threads())]
    pub threads: usize,
}

impl MethodArgs {
    fn case_options(&self, workdir: PathBuf) -> anyhow::Result<CaseOptions> {
        anyhow::ensure!(self.duration > 0.0, "--duration must be positive");
        anyhow::ensure!(
            !self.concurrency.is_empty() && self.concurrency.iter().all(|&c| c > 0),
            "--concurrency levels must be at least 1"
        );
        anyhow::ensure!(self.threads > 0, "--threads must be at least 1");
        Ok(CaseOptions {
            k: self.k,
            metric: self.metric,
            concurrency: self.concurrency.clone(),
            duration: Duration::from_secs_f64(self.duration),
            sweep_duration: Duration::from_secs_f64(self.sweep_duration),
            threads: self.threads,
            workdir,
        })
    }
}

#[derive(clap::Args)]
pub struct Args {
    /// Dataset directory (train, test, neighbors) in VectorDBBench's layout.
    #[arg(long)]
    pub dataset: PathBuf,
    /// A configuration: hnsw, diskann, hnswlib, diskannpy or milvus, with options after a
    /// colon, e.g. diskann:paths=4 or hnsw:m=30,ef=100,sweep=32/64/100/200. Repeat it.
    #[arg(long = "config", required = true)]
    pub configs: Vec<Config>,
    #[command(flatten)]
    pub method: MethodArgs,
    /// Where results, the report and charts go.
    #[arg(long, default_value = "results")]
    pub out: PathBuf,
    /// Where indexes are built (default: OUT/work); removed after each configuration.
    #[arg(long)]
    pub workdir: Option<PathBuf>,
    /// A JSON price table (dram_usd_per_gb, ssd_usd_per_gb, source) instead of the defaults.
    #[arg(long)]
    pub prices: Option<PathBuf>,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let case = a
        .method
        .case_options(a.workdir.unwrap_or_else(|| a.out.join("work")))?;
    let prices = match &a.prices {
        Some(p) => PriceTable::load(p)?,
        None => PriceTable::default(),
    };
    let o = BenchOptions {
        dataset: a.dataset.clone(),
        configs: a.configs,
        case,
        out: a.out.clone(),
        prices,
        diskvec: std::env::current_exe().context("locating the diskvec binary")?,
    };
    let run = bench(&o)?;
    let stem = format!("{}-{}", run.dataset.name, run.date);
    let json_path = a.out.join(format!("{stem}.json"));
    std::fs::write(&json_path, serde_json::to_string_pretty(&run)?)
        .with_context(|| format!("writing {}", json_path.display()))?;
    let md = render_run(&run);
    let md_path = a.out.join(format!("{stem}.md"));
    std::fs::write(&md_path, &md).with_context(|| format!("writing {}", md_path.display()))?;
    println!("{md}");
    println!(
        "results: {}\nreport: {}",
        json_path.display(),
        md_path.display()
    );
    draw_charts(std::slice::from_ref(&run), &a.out);
    Ok(())
}

/// Draws each run's chart into `dir`, naming the images written; a chart that cannot be
/// drawn is a note, not an error, as the results are already written.
fn draw_charts(runs: &[RunFile], dir: &Path) {
    for run in runs {
        let charted = draw_run(run, dir);
        for note in &charted.notes {
            eprintln!("chart: {note}");
        }
        if let Some(p) = &charted.path {
            println!("chart: {}", p.display());
        }
    }
}

/// Runs one diskvec configuration for `diskvec bench` (which starts it as a child process).
#[derive(clap::Args)]
pub struct CaseArgs {
    #[arg(long)]
    pub config: Config,
    #[arg(long)]
    pub label: String,
    #[arg(long)]
    pub dataset: PathBuf,
    #[command(flatten)]
    pub method: MethodArgs,
    #[arg(long)]
    pub workdir: PathBuf,
    #[arg(long)]
    pub out: PathBuf,
}

pub fn run_case_cmd(a: CaseArgs) -> anyhow::Result<()> {
    let o = a.method.case_options(a.workdir)?;
    crate::set_threads(Some(o.threads))?;
    let bars = Bars::new();
    let mut raw = run_case(&a.config, &a.dataset, &o, &bars)?;
    bars.finish();
    raw.label = a.label;
    std::fs::write(&a.out, serde_json::to_string(&raw)?)
        .with_context(|| format!("writing {}", a.out.display()))?;
    Ok(())
}

/// Combines results files of several runs into the briefs' tables.
#[derive(clap::Args)]
pub struct ReportArgs {
    /// Results files written by `diskvec bench`.
    #[arg(required = true)]
    pub results: Vec<PathBuf>,
    /// Markdown file to write (default: print).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Also write each dataset's merged runs (DATASET.json) and draw their charts into this
    /// directory.
    #[arg(long)]
    pub charts: Option<PathBuf>,
}

pub fn report(a: ReportArgs) -> anyhow::Result<()> {
    let runs: Vec<RunFile> = a
        .results
        .iter()
        .map(|p| {
            let text =
                std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
            serde_json::from_str(&text)
                .with_context(|| format!("{}: not a diskvec bench results file", p.display()))
        })
        .collect::<anyhow::Result<_>>()?;
    let runs = merge_by_dataset(runs);
    let mut md = render_briefs(&runs);
    for run in &runs {
        md.push('\n');
        md.push_str(&render_run(run));
    }
    match &a.out {
        Some(p) => std::fs::write(p, &md).with_context(|| format!("writing {}", p.display()))?,
        None => println!("{md}"),
    }
    if let Some(dir) = &a.charts {
        std::fs::create_dir_all(dir)?;
        for run in &runs {
            let path = dir.join(format!("{}.json", run.dataset.name));
            std::fs::write(&path, serde_json::to_string_pretty(run)?)
                .with_context(|| format!("writing {}", path.display()))?;
        }
        // The merged runs, so configurations benched separately share a chart.
        draw_charts(&runs, dir);
    }
    Ok(())
}
