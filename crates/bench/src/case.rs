//! Runs one diskvec configuration through VectorDBBench's Performance case in this process:
//! load (read + build until searchable), then the concurrent phase, the serial phase and
//! the sweep. The harness runs each configuration in a child process of its own, so peak
//! RSS belongs to that configuration alone.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use diskvec_dataset::DatasetDir;
use diskvec_index::diskann::{self, DiskIndex, OpenOptions, SearchParams, SearchService};
use diskvec_index::hnsw::{HnswIndex, HnswParams};
use diskvec_index::Progress;
use diskvec_vector::Metric;

use crate::config::{Config, Kind};
use crate::machine::{bytes_under, peak_rss_bytes, reset_peak_rss};
use crate::phases::{run, Answer, Client, Searcher, Span};
use crate::raw::{CaseRaw, RunRaw};

#[derive(Clone, Debug)]
pub struct CaseOptions {
    pub k: usize,
    pub metric: Metric,
    pub concurrency: Vec<usize>,
    pub duration: Duration,
    /// How long each sweep point runs (at least one pass over the queries).
    pub sweep_duration: Duration,
    /// Search threads of the serving side (DISKANN's workers).
    pub threads: usize,
    /// This configuration's own directory, where its index is built (emptied first).
    pub workdir: PathBuf,
}

/// The search phases shared by every kind: concurrent levels, serial pass, sweep.
fn measure<'s>(
    make: &dyn Fn(usize) -> anyhow::Result<Box<dyn Searcher + 's>>,
    knob: usize,
    sweep: &[usize],
    queries: &[f32],
    dim: usize,
    o: &CaseOptions,
    progress: &dyn Progress,
) -> anyhow::Result<(Vec<RunRaw>, RunRaw, Vec<RunRaw>)> {
    let searcher = make(knob)?;
    let mut levels = Vec::new();
    for &c in &o.concurrency {
        progress.phase(&format!("concurrency {c}"), o.duration.as_secs().max(1));
        let ticker = SecondTicker::new(progress);
        levels.push(run(
            searcher.as_ref(),
            queries,
            dim,
            c,
            Span::Time(o.duration),
            knob,
            &|| ticker.tick(),
        ));
    }
    let nq = (queries.len() / dim) as u64;
    progress.phase("serial", nq);
    let serial = run(
        searcher.as_ref(),
        queries,
        dim,
        1,
        Span::OnePass,
        knob,
        &|| progress.advance(1),
    );
    drop(searcher);
    // Sweep points run at the concurrency that gave the most QPS.
    let best = levels
        .iter()
        .max_by(|a, b| a.qps().total_cmp(&b.qps()))
        .map_or(1, |l| l.concurrency);
    let mut points = Vec::new();
    for &v in sweep {
        let s = make(v)?;
        progress.phase(&format!("sweep {v}"), o.sweep_duration.as_secs().max(1));
        let ticker = SecondTicker::new(progress);
        points.push(run(
            s.as_ref(),
            queries,
            dim,
            best,
            Span::AtLeast(o.sweep_duration),
            v,
            &|| ticker.tick(),
        ));
    }
    Ok((levels, serial, points))
}

/// Advances a progress bar once per elapsed second, from any client thread.
struct SecondTicker<'a> {
    progress: &'a dyn Progress,
    start: Instant,
    shown: AtomicU64,
}

impl<'a> SecondTicker<'a> {
    fn new(progress: &'a dyn Progress) -> Self {
        Self {
            progress,
            start: Instant::now(),
            shown: AtomicU64::new(0),
        }
    }

    fn tick(&self) {
        let now = self.start.elapsed().as_secs();
        let shown = self.shown.load(Ordering::Relaxed);
        if now > shown
            && self
                .shown
                .compare_exchange(shown, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            self.progress.advance(now - shown);
        }
    }
}

struct HnswSearcher<'a> {
    index: &'a HnswIndex,
    k: usize,
    ef: usize,
}

impl Searcher for HnswSearcher<'_> {
    fn client(&self) -> Client<'_> {
        let mut scratch = self.index.scratch();
        Box::new(move |q: &[f32]| {
            let r = self.index.search_with(q, self.k, self.ef, &mut scratch)?;
            Ok(Answer {
                ids: r.ids,
                reads: None,
            })
        })
    }
}

struct DiskSearcher(SearchService);

impl Searcher for DiskSearcher {
    fn client(&self) -> Client<'_> {
        Box::new(move |q: &[f32]| {
            let r = self.0.search(q)?;
            Ok(Answer {
                ids: r.ids,
                reads: Some(r.reads as u64),
            })
        })
    }
}

/// Runs a diskvec configuration (hnsw or diskann) on `dataset`.
pub fn run_case(
    config: &Config,
    dataset: &Path,
    o: &CaseOptions,
    progress: &dyn Progress,
) -> anyhow::Result<CaseRaw> {
    anyhow::ensure!(
        !config.kind.is_peer(),
        "{} runs in the peer driver",
        config.label
    );
    let d = DatasetDir::open(dataset)?;
    let queries = d.test()?;
    let mut raw = CaseRaw {
        label: config.label.clone(),
        ..Default::default()
    };
    let t = Instant::now();
    let train = d.train()?;
    raw.insert_seconds = t.elapsed().as_secs_f64();
    anyhow::ensure!(
        train.dim == queries.dim,
        "train vectors have dimension {}, test queries {}",
        train.dim,
        queries.dim
    );
    let knob = config.knob_value()?;
    let sweep = config.sweep()?;
    let t = Instant::now();
    match config.kind {
        Kind::Hnsw => {
            let params = HnswParams {
                m: config.usize("m", 30)?,
                ef_construction: config.usize("ef_construction", 360)?,
                seed: 1,
            };
            let index = HnswIndex::build(
                &train.data,
                train.dim,
                &train.ids,
                o.metric,
                params,
                progress,
            )?;
            raw.build_seconds = t.elapsed().as_secs_f64();
            raw.load_peak_rss_bytes = peak_rss_bytes();
            drop(train);
            raw.serving_peak_is_clean = reset_peak_rss();
            raw.index_dram_bytes = Some(index.dram_bytes() as u64);
            raw.notes.push("in memory: nothing on disk".into());
            let make = |ef: usize| -> anyhow::Result<Box<dyn Searcher + '_>> {
                Ok(Box::new(HnswSearcher {
                    index: &index,
                    k: o.k,
                    ef,
                }))
            };
            (raw.levels, raw.serial, raw.sweep) =
                measure(&make, knob, &sweep, &queries.data, queries.dim, o, progress)?;
        }
        Kind::Diskann => {
            let dir = o.workdir.clone();
            let _ = std::fs::remove_dir_all(&dir);
            let paths: Vec<PathBuf> = match config.options.get("dirs") {
                Some(list) => list.split('+').map(PathBuf::from).collect(),
                None => match config.usize("paths", 1)? {
                    0 => anyhow::bail!("{}: paths must be at least 1", config.label),
                    1 => Vec::new(),
                    n => (0..n).map(|i| dir.join(format!("path{i}"))).collect(),
                },
            };
            for p in &paths {
                std::fs::create_dir_all(p).with_context(|| format!("creating {}", p.display()))?;
            }
            let params = diskann::BuildParams {
                metric: o.metric,
                max_degree: config.usize("r", 64)?,
                build_list: config.usize("l_build", 100)?,
                pq_bytes: config.optional_usize("pq_bytes")?,
                paths,
                stripe_bytes: config.usize("stripe_kib", 64)? as u64 * 1024,
                mirror: config.flag("mirror")?,
                ..Default::default()
            };
            let index_dir = dir.join("index");
            diskann::build(
                &train.data,
                train.dim,
                &train.ids,
                &params,
                &index_dir,
                progress,
            )?;
            raw.load_peak_rss_bytes = peak_rss_bytes();
            drop(train);
            raw.serving_peak_is_clean = reset_peak_rss();
            let open = OpenOptions {
                cache_nodes: config.optional_usize("cache_nodes")?,
                queue_depth: config.usize("queue_depth", 64)?,
                ..Default::default()
            };
            let index = Arc::new(DiskIndex::open(&index_dir, &open)?);
            raw.build_seconds = t.elapsed().as_secs_f64();
            raw.index_dram_bytes = Some(index.dram_bytes() as u64);
            raw.disk_bytes = bytes_under(&dir);
            raw.notes.push(format!(
                "{} search threads, each interleaving up to {} queries",
                o.threads,
                config.usize("queries_per_thread", 16)?
            ));
            let base = SearchParams {
                k: o.k,
                beam_width: config.usize("beam_width", 4)?,
                queries_per_thread: config.usize("queries_per_thread", 16)?,
                ..Default::default()
            };
            let make = |l: usize| -> anyhow::Result<Box<dyn Searcher + '_>> {
                let p = SearchParams {
                    search_list: l,
                    ..base
                };
                Ok(Box::new(DiskSearcher(SearchService::start(
                    index.clone(),
                    p,
                    o.threads,
                )?)))
            };
            (raw.levels, raw.serial, raw.sweep) =
                measure(&make, knob, &sweep, &queries.data, queries.dim, o, progress)?;
        }
        _ => unreachable!("peers are refused above"),
    }
    raw.serving_peak_rss_bytes = peak_rss_bytes();
    Ok(raw)
}
