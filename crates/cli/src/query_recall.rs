//! `diskvec query --test-queries DS`: every test query of a dataset against a collection,
//! at each search list given, with recall against the dataset's ground truth, QPS,
//! latency and the nodes read from SSD a query: how a database (several segments, a
//! write buffer) compares with one index (`diskvec search`) on the same data.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use anyhow::{bail, Context};
use diskvec_bench::metrics::{recall_at, Latency};
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
    if count == 0 {
        bail!("{}: no test queries", dataset.display());
    }
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
    let started = Instant::now();
    // Each thread keeps its queries' (recall, milliseconds).
    let results: Vec<(f64, f64)> = std::thread::scope(|s| -> anyhow::Result<_> {
        let workers: Vec<_> = (0..threads.max(1))
            .map(|_| {
                s.spawn(|| -> anyhow::Result<Vec<(f64, f64)>> {
                    let mut mine = Vec::new();
                    loop {
                        let q = next.fetch_add(1, Ordering::Relaxed);
                        if q >= count {
                            return Ok(mine);
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
                        mine.push((recall_at(&got, &truth[q], k), ms));
                    }
                })
            })
            .collect();
        let mut all = Vec::with_capacity(count);
        for w in workers {
            let mine = w
                .join()
                .map_err(|_| anyhow::anyhow!("a query thread panicked"))??;
            all.extend(mine);
        }
        Ok(all)
    })?;
    let seconds = started.elapsed().as_secs_f64();
    let reads_after: u64 = col.storage_io().iter().map(|p| p.reads).sum();
    let ms: Vec<f64> = results.iter().map(|r| r.1).collect();
    let latency = Latency::of(&ms);
    Ok(Row {
        search_list,
        recall: results.iter().map(|r| r.0).sum::<f64>() / count as f64,
        qps: count as f64 / seconds,
        p50_ms: latency.p50,
        p99_ms: latency.p99,
        reads_per_query: (reads_after - reads_before) as f64 / count as f64,
    })
}
