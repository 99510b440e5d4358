//! `diskvec query --test-queries DS`: every test query of a dataset against a collection,
//! at each search list given, with recall against the dataset's ground truth, QPS,
//! latency and the nodes read from SSD a query: how a database (several segments, a
//! write buffer) compares with one index (`diskvec search`) on the same data.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use anyhow::{bail, Context};
use diskvec_bench::metrics::recall_at;
use diskvec_dataset::DatasetDir;
use diskvec_db::{Collection, PointId, SearchRequest};
use serde_json::json;

/// One search list's measurements.
struct Row {
    search_list: Option<usize>,
    recall: f64,
    qps: f64,
    p50_ms: f64,
    p99_ms: f64,
    reads_per_query: f64,
}

/// Runs `dataset`'s test queries (the first `limit`, 0: all) on `threads` threads at each
/// of `lists` (empty: the collection's own), printing a table or JSON lines.
pub fn run(
    col: &Collection,
    dataset: &std::path::Path,
    k: usize,
    lists: &[usize],
    threads: usize,
    limit: usize,
    as_json: bool,
) -> anyhow::Result<()> {
    let d = DatasetDir::open(dataset)?;
    let queries = d.test()?;
    let truth = d.neighbors()?;
    let count = match limit {
        0 => queries.len(),
        n => n.min(queries.len()),
    };
    if truth.lists.len() < count {
        bail!(
            "{}: ground truth for {} queries, {count} asked",
            dataset.display(),
            truth.lists.len()
        );
    }
    let lists: Vec<Option<usize>> = match lists {
        [] => vec![None],
        l => l.iter().copied().map(Some).collect(),
    };
    if !as_json {
        println!(
            "{count} test queries of {}, k = {k}, {threads} threads; CPU: {}",
            dataset.display(),
            diskvec_bench::machine::describe()
        );
        println!(
            "{:>6}  {:>8}  {:>8}  {:>8}  {:>8}  {:>10}",
            "L", "recall", "QPS", "p50 ms", "p99 ms", "reads/q"
        );
    }
    for list in lists {
        let row = measure(col, &queries, &truth.lists, count, k, list, threads)?;
        if as_json {
            println!(
                "{}",
                json!({"search_list": row.search_list, "k": k, "queries": count,
                       "threads": threads, "recall": row.recall, "qps": row.qps,
                       "p50_ms": row.p50_ms, "p99_ms": row.p99_ms,
                       "reads_per_query": row.reads_per_query})
            );
        } else {
            let l = row.search_list.map_or("coll".into(), |l| l.to_string());
            println!(
                "{l:>6}  {:>8.4}  {:>8.1}  {:>8.2}  {:>8.2}  {:>10.1}",
                row.recall, row.qps, row.p50_ms, row.p99_ms, row.reads_per_query
            );
        }
    }
    Ok(())
}

fn measure(
    col: &Collection,
    queries: &diskvec_dataset::Matrix,
    truth: &[Vec<i64>],
    count: usize,
    k: usize,
    search_list: Option<usize>,
    threads: usize,
) -> anyhow::Result<Row> {
    let reads_before: u64 = col.storage_io().iter().map(|p| p.reads).sum();
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<(f64, f64)>> = Mutex::new(Vec::with_capacity(count));
    let started = Instant::now();
    std::thread::scope(|s| -> anyhow::Result<()> {
        let workers: Vec<_> = (0..threads.max(1))
            .map(|_| {
                s.spawn(|| -> anyhow::Result<()> {
                    loop {
                        let q = next.fetch_add(1, Ordering::Relaxed);
                        if q >= count {
                            return Ok(());
                        }
                        let request = SearchRequest {
                            search_list,
                            ..SearchRequest::new(k)
                        };
                        let t = Instant::now();
                        let hits = col
                            .search(queries.row(q), &request)
                            .with_context(|| format!("test query {q}"))?;
                        let ms = t.elapsed().as_secs_f64() * 1e3;
                        let got: Vec<i64> = hits
                            .iter()
                            .map(|h| match h.id {
                                PointId::Num(n) => n as i64,
                                PointId::Uuid(_) => -1,
                            })
                            .collect();
                        let recall = recall_at(&got, &truth[q], k);
                        results.lock().unwrap().push((recall, ms));
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().expect("a query thread panicked")?;
        }
        Ok(())
    })?;
    let seconds = started.elapsed().as_secs_f64();
    let reads_after: u64 = col.storage_io().iter().map(|p| p.reads).sum();
    let results = results.into_inner().unwrap();
    let mut ms: Vec<f64> = results.iter().map(|r| r.1).collect();
    ms.sort_by(f64::total_cmp);
    let at = |q: f64| ms[((ms.len() as f64 * q) as usize).min(ms.len() - 1)];
    Ok(Row {
        search_list,
        recall: results.iter().map(|r| r.0).sum::<f64>() / count as f64,
        qps: count as f64 / seconds,
        p50_ms: at(0.5),
        p99_ms: at(0.99),
        reads_per_query: (reads_after - reads_before) as f64 / count as f64,
    })
}
