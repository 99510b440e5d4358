//! `diskvec bench`: checks the dataset, runs each configuration in a process of its own
//! (diskvec kinds in a child `diskvec bench-case`, peers in the Python driver), and turns
//! their raw records into one results file.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};

use crate::case::CaseOptions;
use crate::config::Config;
use crate::price::PriceTable;
use crate::raw::CaseRaw;
use crate::result::{summarize, CaseResult};
use crate::synth::SynthParams;
use crate::truth::load_workload;

/// The Python driver that runs peers, embedded so the binary needs no checkout.
pub const PEER_DRIVER: &str = include_str!("../../../benchmarks/peers/peer_driver.py");

#[derive(Clone, Debug)]
pub struct BenchOptions {
    pub dataset: PathBuf,
    pub configs: Vec<Config>,
    /// How each configuration is measured; its `workdir` holds one directory per configuration.
    pub case: CaseOptions,
    pub out: PathBuf,
    pub prices: PriceTable,
    /// The `diskvec` binary that runs diskvec configurations.
    pub diskvec: PathBuf,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DatasetInfo {
    pub name: String,
    pub path: String,
    pub vectors: usize,
    pub dim: usize,
    pub queries: usize,
    pub synthetic: Option<SynthParams>,
}

/// One `diskvec bench` run on one dataset.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunFile {
    pub date: String,
    pub machine: String,
    pub dataset: DatasetInfo,
    pub k: usize,
    pub metric: String,
    pub concurrency: Vec<usize>,
    pub duration_seconds: f64,
    pub threads: usize,
    pub prices: PriceTable,
    pub results: Vec<CaseResult>,
    /// Configurations that could not run, with the reason.
    pub skipped: Vec<(String, String)>,
}

fn today() -> String {
    Command::new("date")
        .arg("+%Y-%m-%d")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn safe_name(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Runs every configuration; a configuration that fails is reported, not fatal.
pub fn bench(o: &BenchOptions) -> anyhow::Result<RunFile> {
    if o.configs.is_empty() {
        bail!("give at least one --config");
    }
    let workload = load_workload(&o.dataset, o.case.metric, o.case.k)?;
    let name = o
        .dataset
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "dataset".into());
    let raw_dir = o.out.join("raw");
    std::fs::create_dir_all(&raw_dir).with_context(|| format!("creating {}", raw_dir.display()))?;
    std::fs::create_dir_all(&o.case.workdir)
        .with_context(|| format!("creating {}", o.case.workdir.display()))?;
    let mut run = RunFile {
        date: today(),
        machine: crate::machine::describe(),
        dataset: DatasetInfo {
            name: name.clone(),
            path: o.dataset.display().to_string(),
            vectors: workload.train_len,
            dim: workload.queries.dim,
            queries: workload.queries.len(),
            synthetic: workload.synthetic.clone(),
        },
        k: o.case.k,
        metric: o.case.metric.to_string(),
        concurrency: o.case.concurrency.clone(),
        duration_seconds: o.case.duration.as_secs_f64(),
        threads: o.case.threads,
        prices: o.prices.clone(),
        results: Vec::new(),
        skipped: Vec::new(),
    };
    for config in &o.configs {
        eprintln!("== {} on {name}", config.label);
        let raw_path = raw_dir.join(format!(
            "{}-{}.json",
            safe_name(&name),
            safe_name(&config.label)
        ));
        let _ = std::fs::remove_file(&raw_path);
        match run_one(o, config, &raw_path) {
            Ok(raw) => {
                let r = summarize(
                    &raw,
                    &workload.truth.lists,
                    o.case.k,
                    config.knob(),
                    config.knob_value()?,
                    &o.prices,
                );
                eprintln!(
                    "   {}: load {:.1} s, max QPS {:.0} (at {}), recall@{} {:.4}, serial p99 {:.2} ms",
                    r.label, r.load_duration, r.qps, r.qps_concurrency, o.case.k, r.recall, r.serial_latency_p99
                );
                run.results.push(r);
            }
            Err(e) => {
                eprintln!("   {} skipped: {e:#}", config.label);
                run.skipped.push((config.label.clone(), format!("{e:#}")));
            }
        }
    }
    Ok(run)
}

fn common_args(o: &BenchOptions, config: &Config, workdir: &Path, out: &Path) -> Vec<String> {
    vec![
        format!("--dataset={}", o.dataset.display()),
        format!("--k={}", o.case.k),
        format!("--metric={}", o.case.metric),
        format!(
            "--concurrency={}",
            o.case
                .concurrency
                .iter()
                .map(|c| c.to_string())
                .collect::<Vec<_>>()
                .join(",")
        ),
        format!("--duration={}", o.case.duration.as_secs_f64()),
        format!("--sweep-duration={}", o.case.sweep_duration.as_secs_f64()),
        format!("--threads={}", o.case.threads),
        format!("--workdir={}", workdir.display()),
        format!("--out={}", out.display()),
        format!("--label={}", config.label),
    ]
}

fn run_one(o: &BenchOptions, config: &Config, raw_path: &Path) -> anyhow::Result<CaseRaw> {
    let workdir = o.case.workdir.join(safe_name(&config.label));
    let mut cmd = if config.kind.is_peer() {
        let python = config
            .options
            .get("python")
            .cloned()
            .or_else(|| std::env::var("DISKVEC_PEER_PYTHON").ok())
            .unwrap_or_else(|| "python3".into());
        let module = match config.kind.name() {
            "milvus" => "milvus, pymilvus",
            other => other,
        };
        let probe = Command::new(&python)
            .args(["-c", &format!("import numpy, pyarrow, {module}")])
            .output()
            .with_context(|| format!("running {python}"))?;
        if !probe.status.success() {
            bail!(
                "{python} cannot import {module} (with numpy and pyarrow): install them, or name another \
                 interpreter with python=PATH in the configuration or DISKVEC_PEER_PYTHON"
            );
        }
        let driver = o.case.workdir.join("peer_driver.py");
        std::fs::write(&driver, PEER_DRIVER)
            .with_context(|| format!("writing {}", driver.display()))?;
        let mut c = Command::new(python);
        c.arg(&driver)
            .arg(format!("--kind={}", config.kind.name()))
            .arg(format!("--options={}", config.options_json()));
        c
    } else {
        let mut c = Command::new(&o.diskvec);
        c.arg("bench-case")
            .arg(format!("--config={}", config.spec()));
        c
    };
    cmd.args(common_args(o, config, &workdir, raw_path));
    let status = cmd
        .status()
        .context("starting the configuration's process")?;
    if !status.success() {
        // The peer driver leaves {"error": ...} behind when it can say what went wrong.
        let reason = std::fs::read_to_string(raw_path)
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(String::from))
            .unwrap_or_else(|| "its messages are above".into());
        bail!("its process failed ({status}): {reason}");
    }
    let text = std::fs::read_to_string(raw_path)
        .with_context(|| format!("reading {}", raw_path.display()))?;
    let raw: CaseRaw = serde_json::from_str(&text)
        .with_context(|| format!("{}: not a raw case record", raw_path.display()))?;
    let _ = std::fs::remove_dir_all(&workdir);
    Ok(raw)
}
