use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use diskvec_index::limits;
use diskvec_io::iobench::{prepare_targets, run, BenchSpec};
use serde_json::json;

#[derive(clap::Args)]
pub struct Args {
    /// Directories (a test file is laid out in each), files, or block devices (reads only).
    #[arg(long, value_delimiter = ',', required = true)]
    pub paths: Vec<PathBuf>,
    /// Block sizes in KiB.
    #[arg(long, value_delimiter = ',', default_value = "4")]
    pub bs: Vec<usize>,
    /// Read/write mixes: read100 (random read), read75 (75% reads, 25% writes), readN.
    #[arg(long, value_delimiter = ',', default_value = "read100")]
    pub mix: Vec<String>,
    /// Operations in flight per job.
    #[arg(long, value_delimiter = ',', default_value = "1,32")]
    pub qd: Vec<usize>,
    /// Jobs (threads), each with its own io_uring ring.
    #[arg(long, default_value_t = 1)]
    pub jobs: usize,
    /// Seconds per measurement.
    #[arg(long, default_value_t = 10.0)]
    pub seconds: f64,
    /// Size of the test file laid out in each directory, MiB.
    #[arg(long, default_value_t = 1024)]
    pub size_mib: u64,
    /// Also print one JSON object per measurement; the last line of stdout is JSON.
    #[arg(long)]
    pub json: bool,
}

fn read_percent(mix: &str) -> anyhow::Result<u32> {
    let pct = mix
        .strip_prefix("read")
        .and_then(|n| n.parse::<u32>().ok())
        .filter(|&n| n <= 100)
        .with_context(|| {
            format!(
                "unknown mix {mix:?}: expected readN with N from 0 to 100, e.g. read100 or read75"
            )
        })?;
    Ok(pct)
}

pub fn run_cmd(args: Args) -> anyhow::Result<()> {
    // Duration::from_secs_f64 panics on values it cannot hold; a day is plenty.
    if !(args.seconds > 0.0 && args.seconds <= 86_400.0) {
        bail!(
            "--seconds must be above 0 and at most 86400, got {}",
            args.seconds
        );
    }
    for &bs in &args.bs {
        if bs == 0 || bs % 4 != 0 || bs > 1024 {
            bail!("--bs must be a multiple of 4 (KiB) between 4 and 1024, got {bs}");
        }
    }
    for &qd in &args.qd {
        limits::QUEUE_DEPTH.check(qd)?;
    }
    limits::THREADS.check(args.jobs)?;
    let size_bytes = match args.size_mib.checked_mul(1 << 20) {
        Some(b) if b > 0 => b,
        _ => bail!(
            "--size-mib must be between 1 and {}, got {}",
            u64::MAX >> 20,
            args.size_mib
        ),
    };
    let mixes: Vec<(String, u32)> = args
        .mix
        .iter()
        .map(|m| read_percent(m).map(|p| (m.clone(), p)))
        .collect::<anyhow::Result<_>>()?;
    let writes = mixes.iter().any(|(_, p)| *p < 100);
    let targets = prepare_targets(&args.paths, size_bytes, writes)?;
    println!(
        "{:>5} {:>6} {:>8} {:>4} {:>4} {:>10} {:>9} {:>9} {:>9} {:>6}",
        "paths", "bs KiB", "mix", "qd", "jobs", "IOPS", "MB/s", "p50 us", "p99 us", "CPU %"
    );
    let mut lines = Vec::new();
    for &bs in &args.bs {
        for (name, pct) in &mixes {
            for &qd in &args.qd {
                let spec = BenchSpec {
                    block_bytes: bs * 1024,
                    read_percent: *pct,
                    queue_depth: qd,
                    jobs: args.jobs,
                    duration: Duration::from_secs_f64(args.seconds),
                };
                let r = run(&targets, &spec)?;
                println!(
                    "{:>5} {:>6} {:>8} {:>4} {:>4} {:>10.0} {:>9.1} {:>9.0} {:>9.0} {:>6.1}",
                    targets.len(),
                    bs,
                    name,
                    qd,
                    args.jobs,
                    r.iops,
                    r.mb_per_s,
                    r.p50_us,
                    r.p99_us,
                    r.cpu_percent
                );
                lines.push(json!({
                    "paths": targets.iter().map(|t| t.display().to_string()).collect::<Vec<_>>(),
                    "bs_kib": bs, "mix": name, "read_percent": pct, "qd": qd, "jobs": args.jobs,
                    "seconds": args.seconds, "iops": r.iops, "mb_per_s": r.mb_per_s,
                    "p50_us": r.p50_us, "p99_us": r.p99_us, "cpu_percent": r.cpu_percent,
                    "per_path_iops": r.per_path.iter().map(|p| p.reads as f64 / args.seconds).collect::<Vec<_>>(),
                }));
            }
        }
    }
    if args.json {
        for l in lines {
            println!("{l}");
        }
    }
    Ok(())
}
