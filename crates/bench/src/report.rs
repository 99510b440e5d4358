//! Markdown reports: one run's full table, and the briefs' tables over several runs (rows:
//! dataset scale; columns: configurations, with the change against the HNSW baseline).

use std::fmt::Write;

use crate::harness::RunFile;
use crate::result::CaseResult;

/// The baseline the briefs compare against: diskvec's HNSW, else hnswlib, else Milvus HNSW.
fn baseline(results: &[CaseResult]) -> Option<&CaseResult> {
    ["hnsw", "hnswlib", "milvus"].iter().find_map(|kind| {
        results.iter().find(|r| {
            let k = r.label.split(':').next().unwrap_or("");
            k == *kind && r.knob == "ef"
        })
    })
}

/// The most QPS a configuration reached at a recall at least `target` (less half a
/// thousandth, the noise of 1,000 queries), over its headline run and its sweep points,
/// with the knob value that gave it.
pub fn qps_at_recall(r: &CaseResult, target: f64) -> Option<(f64, usize)> {
    let headline = (r.qps, r.recall, r.knob_value);
    std::iter::once(headline)
        .chain(r.sweep.iter().map(|p| (p.qps, p.recall, p.knob)))
        .filter(|&(_, recall, _)| recall >= target - 5e-4)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(q, _, k)| (q, k))
}

fn at_recall_cell(r: &CaseResult, base: Option<&CaseResult>) -> String {
    let Some(b) = base else {
        return "n/a".into();
    };
    let base_qps = qps_at_recall(b, b.recall).map(|x| x.0);
    match qps_at_recall(r, b.recall) {
        Some((q, knob)) => format!("{q:.0}{} ({} = {knob})", ratio(Some(q), base_qps), r.knob),
        None => "not reached".into(),
    }
}

/// A Markdown table's header: the first column's name, then one column per label.
fn table_header(s: &mut String, first: &str, labels: &[String]) {
    let _ = write!(s, "| {first} |");
    for l in labels {
        let _ = write!(s, " {l} |");
    }
    let _ = write!(s, "\n|---|");
    for _ in labels {
        let _ = write!(s, "---|");
    }
    s.push('\n');
}

fn mib(b: Option<u64>) -> String {
    b.map_or("n/a".into(), |b| format!("{:.0} MiB", b as f64 / 1048576.0))
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or("n/a".into(), |v| format!("{v:.digits$}"))
}

/// A ratio against the baseline, written like the briefs: "1.85x" (higher) or "0.42x".
fn ratio(v: Option<f64>, base: Option<f64>) -> String {
    match (v, base) {
        (Some(v), Some(b)) if b > 0.0 && v.is_finite() => format!(" ({:.2}x)", v / b),
        _ => String::new(),
    }
}

fn scale(run: &RunFile) -> String {
    let n = run.dataset.vectors;
    let n = if n >= 1_000_000 && n.is_multiple_of(1_000_000) {
        format!("{}M", n / 1_000_000)
    } else if n >= 1000 && n.is_multiple_of(1000) {
        format!("{}k", n / 1000)
    } else {
        n.to_string()
    };
    let synthetic = if run.dataset.synthetic.is_some() {
        ", synthetic"
    } else {
        ""
    };
    format!(
        "{} ({n} x {}{synthetic})",
        run.dataset.name, run.dataset.dim
    )
}

type Metric = (&'static str, fn(&CaseResult) -> Option<f64>, usize);

fn metrics() -> Vec<Metric> {
    vec![
        (
            "Load duration, s (lower is better)",
            |r| Some(r.load_duration),
            1,
        ),
        (
            "QPS, max over concurrency levels (higher is better)",
            |r| Some(r.qps),
            0,
        ),
        (
            "Recall@k, serial phase (higher is better)",
            |r| Some(r.recall),
            4,
        ),
        ("NDCG@k, serial phase", |r| Some(r.ndcg), 4),
        (
            "Serial p95 latency, ms (lower is better)",
            |r| Some(r.serial_latency_p95),
            2,
        ),
        (
            "Serial p99 latency, ms (lower is better)",
            |r| Some(r.serial_latency_p99),
            2,
        ),
        (
            "DRAM: peak RSS while serving, MiB (lower is better)",
            |r| r.serving_peak_rss_bytes.map(|b| b as f64 / 1048576.0),
            0,
        ),
        ("Disk, MiB", |r| Some(r.disk_bytes as f64 / 1048576.0), 0),
        (
            "QPS per dollar of DRAM + SSD (higher is better)",
            |r| r.qps_per_dollar,
            1,
        ),
        ("QPS per watt (higher is better)", |r| r.qps_per_watt, 2),
    ]
}

/// The full report of one run.
pub fn render_run(run: &RunFile) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "## {} — {}\n", scale(run), run.date);
    let _ = writeln!(
        s,
        "Machine: {}. k = {}, metric {}, concurrency levels {:?} x {:.0} s, {} search threads. \
         Prices: DRAM ${}/GB, SSD ${}/GB ({}).\n",
        run.machine,
        run.k,
        run.metric,
        run.concurrency,
        run.duration_seconds,
        run.threads,
        run.prices.dram_usd_per_gb,
        run.prices.ssd_usd_per_gb,
        run.prices.source
    );
    let base = baseline(&run.results);
    let labels: Vec<String> = run.results.iter().map(|r| r.label.clone()).collect();
    table_header(&mut s, "metric", &labels);
    for (name, get, digits) in metrics() {
        let _ = write!(s, "| {name} |");
        for r in &run.results {
            let _ = write!(
                s,
                " {}{} |",
                opt(get(r), digits),
                ratio(get(r), base.and_then(get))
            );
        }
        s.push('\n');
    }
    type Row = (&'static str, Box<dyn Fn(&CaseResult) -> String>);
    let rows: Vec<Row> = vec![
        (
            "search knob",
            Box::new(|r| format!("{} = {}", r.knob, r.knob_value)),
        ),
        (
            "QPS reached at concurrency",
            Box::new(|r| r.qps_concurrency.to_string()),
        ),
        (
            "serial p50 ms",
            Box::new(|r| format!("{:.2}", r.serial_latency_p50)),
        ),
        (
            "node reads per query",
            Box::new(|r| opt(r.reads_per_query, 1)),
        ),
        (
            "4 KiB read from storage per query",
            Box::new(|r| opt(r.device_reads_per_query, 1)),
        ),
        (
            "index DRAM (own count)",
            Box::new(|r| mib(r.index_dram_bytes)),
        ),
        (
            "peak RSS while loading",
            Box::new(|r| mib(r.load_peak_rss_bytes)),
        ),
    ];
    if let Some(b) = base {
        let _ = write!(
            s,
            "| QPS at recall >= {:.4} (the baseline's), from the sweeps |",
            b.recall
        );
        for r in &run.results {
            let _ = write!(s, " {} |", at_recall_cell(r, base));
        }
        s.push('\n');
    }
    for (name, get) in rows {
        let _ = write!(s, "| {name} |");
        for r in &run.results {
            let _ = write!(s, " {} |", get(r));
        }
        s.push('\n');
    }
    if let Some(b) = base {
        let _ = writeln!(s, "\nRatios in brackets are against `{}`.", b.label);
    }
    let _ = writeln!(s, "\nConcurrent phase, QPS / p99 ms per level:\n");
    table_header(&mut s, "concurrency", &labels);
    for (i, c) in run.concurrency.iter().enumerate() {
        let _ = write!(s, "| {c} |");
        for r in &run.results {
            match (r.conc_qps_list.get(i), r.conc_latency_p99_list.get(i)) {
                (Some(q), Some(p)) => {
                    let _ = write!(s, " {q:.0} / {p:.1} |");
                }
                _ => s.push_str(" |"),
            }
        }
        s.push('\n');
    }
    if run.results.iter().any(|r| !r.sweep.is_empty()) {
        let _ = writeln!(s, "\nSweeps (QPS at the best concurrency, recall@k):\n");
        let _ = writeln!(s, "| configuration | knob | concurrency | QPS | recall | p99 ms |\n|---|---|---|---|---|---|");
        for r in &run.results {
            for p in &r.sweep {
                let _ = writeln!(
                    s,
                    "| {} | {} = {} | {} | {:.0} | {:.4} | {:.2} |",
                    r.label, r.knob, p.knob, p.concurrency, p.qps, p.recall, p.latency_p99
                );
            }
        }
    }
    let notes: Vec<String> = run
        .results
        .iter()
        .flat_map(|r| r.notes.iter().map(move |n| format!("- `{}`: {n}", r.label)))
        .chain(
            run.results
                .iter()
                .filter(|r| !r.serving_peak_is_clean)
                .map(|r| {
                    format!(
                        "- `{}`: serving peak RSS includes loading (could not reset it)",
                        r.label
                    )
                }),
        )
        .chain(
            run.skipped
                .iter()
                .map(|(l, why)| format!("- `{l}` did not run: {why}")),
        )
        .collect();
    if !notes.is_empty() {
        let _ = writeln!(s, "\nNotes:\n\n{}", notes.join("\n"));
    }
    s
}

/// Puts runs of the same dataset with the same method (k, levels, duration) into one run, so
/// configurations measured in separate `bench` invocations share a row of the briefs' tables.
pub fn merge_by_dataset(runs: Vec<RunFile>) -> Vec<RunFile> {
    let mut merged: Vec<RunFile> = Vec::new();
    for run in runs {
        let same = merged.iter_mut().find(|m| {
            m.dataset.name == run.dataset.name
                && m.dataset.vectors == run.dataset.vectors
                && m.k == run.k
                && m.concurrency == run.concurrency
                && m.duration_seconds == run.duration_seconds
        });
        match same {
            Some(m) => {
                m.results.extend(run.results);
                m.skipped.extend(run.skipped);
                if !m.date.contains(&run.date) {
                    m.date = format!("{}, {}", m.date, run.date);
                }
            }
            None => merged.push(run),
        }
    }
    merged
}

/// A configuration's column in the briefs' tables: its label without the search knob, so
/// runs that chose a different ef or L per dataset share a column (the knob is in the
/// per-run tables and in the equal-recall table).
fn column_of(label: &str) -> String {
    let Some((kind, options)) = label.split_once(':') else {
        return label.to_string();
    };
    let kept: Vec<&str> = options
        .split(',')
        .filter(|o| !o.starts_with("ef=") && !o.starts_with("search_list="))
        .collect();
    if kept.is_empty() {
        kind.to_string()
    } else {
        format!("{kind}:{}", kept.join(","))
    }
}

/// The briefs' tables over several runs: one table per metric, a row per dataset.
pub fn render_briefs(runs: &[RunFile]) -> String {
    let mut labels: Vec<String> = Vec::new();
    for run in runs {
        for r in &run.results {
            let column = column_of(&r.label);
            if !labels.contains(&column) {
                labels.push(column);
            }
        }
    }
    let mut s = String::new();
    for (name, get, digits) in metrics() {
        let _ = writeln!(s, "**{name}**\n");
        table_header(&mut s, "dataset", &labels);
        for run in runs {
            let base = baseline(&run.results).and_then(get);
            let _ = write!(s, "| {} |", scale(run));
            for l in &labels {
                match run.results.iter().find(|r| &column_of(&r.label) == l) {
                    Some(r) => {
                        let _ = write!(s, " {}{} |", opt(get(r), digits), ratio(get(r), base));
                    }
                    None => s.push_str(" — |"),
                }
            }
            s.push('\n');
        }
        s.push('\n');
    }
    let _ = writeln!(
        s,
        "**QPS at equal recall: the best sweep point reaching the HNSW baseline's recall**\n"
    );
    table_header(&mut s, "dataset", &labels);
    for run in runs {
        let base = baseline(&run.results);
        let _ = write!(s, "| {} |", scale(run));
        for l in &labels {
            match run.results.iter().find(|r| &column_of(&r.label) == l) {
                Some(r) => {
                    let _ = write!(s, " {} |", at_recall_cell(r, base));
                }
                None => s.push_str(" — |"),
            }
        }
        s.push('\n');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::price::PriceTable;
    use crate::raw::{CaseRaw, RunRaw};
    use crate::result::summarize;

    fn result(label: &str, knob: &str, qps_queries: u64) -> CaseResult {
        let raw = CaseRaw {
            label: label.into(),
            build_seconds: 2.0,
            serving_peak_rss_bytes: Some(1 << 30),
            levels: vec![RunRaw {
                concurrency: 1,
                seconds: 1.0,
                queries: qps_queries,
                latencies_ms: vec![1.0; 4],
                ..Default::default()
            }],
            serial: RunRaw {
                queries: 1,
                latencies_ms: vec![1.0],
                answers: vec![vec![1]],
                ..Default::default()
            },
            ..Default::default()
        };
        summarize(&raw, &[vec![1]], 1, knob, 100, &PriceTable::default())
    }

    fn run_file(results: Vec<CaseResult>) -> RunFile {
        RunFile {
            date: "2026-11-21".into(),
            machine: "test".into(),
            dataset: crate::harness::DatasetInfo {
                name: "set".into(),
                path: "/x".into(),
                vectors: 50_000,
                dim: 384,
                queries: 1,
                synthetic: None,
            },
            k: 1,
            metric: "cosine".into(),
            concurrency: vec![1],
            duration_seconds: 1.0,
            threads: 2,
            prices: PriceTable::default(),
            results,
            skipped: vec![("milvus".into(), "not installed".into())],
        }
    }

    #[test]
    fn ratios_are_against_the_hnsw_baseline() {
        let run = run_file(vec![
            result("diskann:paths=1", "search_list", 300),
            result("hnsw", "ef", 100),
        ]);
        let md = render_run(&run);
        assert!(md.contains("set (50k x 384)"), "{md}");
        assert!(md.contains("| 300 (3.00x) | 100 (1.00x) |"), "{md}");
        assert!(md.contains("`milvus` did not run: not installed"), "{md}");
        let briefs = render_briefs(&[run]);
        assert!(
            briefs.contains("| set (50k x 384) | 300 (3.00x) | 100 (1.00x) |"),
            "{briefs}"
        );
        // Equal recall: the disk kind's sweep reaches the baseline's recall at knob 200.
        let mut disk = result("diskann", "search_list", 300);
        disk.recall = 0.9;
        disk.sweep = vec![
            crate::result::SweepPoint {
                knob: 200,
                concurrency: 1,
                qps: 150.0,
                recall: 0.9996,
                ndcg: 1.0,
                latency_p99: 1.0,
            },
            crate::result::SweepPoint {
                knob: 300,
                concurrency: 1,
                qps: 120.0,
                recall: 1.0,
                ndcg: 1.0,
                latency_p99: 1.0,
            },
        ];
        assert_eq!(qps_at_recall(&disk, 1.0), Some((150.0, 200)));
        assert_eq!(qps_at_recall(&disk, 0.8), Some((300.0, 100)));
        let hnsw = result("hnsw", "ef", 100);
        assert_eq!(
            at_recall_cell(&disk, Some(&hnsw)),
            "150 (1.50x) (search_list = 200)"
        );
        disk.sweep.clear();
        assert_eq!(at_recall_cell(&disk, Some(&hnsw)), "not reached");
        assert_eq!(
            column_of("diskann:paths=4,search_list=200"),
            "diskann:paths=4"
        );
        assert_eq!(column_of("hnsw:ef=64"), "hnsw");
        // Without an HNSW configuration there is no ratio.
        let alone = render_run(&run_file(vec![result("diskann", "search_list", 300)]));
        assert!(alone.contains("| 300 |"), "{alone}");
    }
}
