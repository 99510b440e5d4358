//! VectorDBBench's search phases over anything that answers queries: clients that each send
//! one query, wait for the answer and send the next.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::machine::{device_read_bytes, Rapl};
use crate::raw::RunRaw;

/// One answer.
pub struct Answer {
    pub ids: Vec<i64>,
    /// Node reads sent to storage, where the index counts them.
    pub reads: Option<u64>,
}

/// One client's search function.
pub type Client<'a> = Box<dyn FnMut(&[f32]) -> anyhow::Result<Answer> + 'a>;

/// Something to search; `client` gives each client thread its own handle (and scratch).
pub trait Searcher: Sync {
    fn client(&self) -> Client<'_>;
}

/// What one client thread recorded: latencies, and (test row, answer) of the first pass.
type ClientRecord = (Vec<f64>, Vec<(usize, Vec<i64>)>);

/// How long a run lasts.
#[derive(Clone, Copy, Debug)]
pub enum Span {
    /// Until this much time has passed (queries cycle through the test set).
    Time(Duration),
    /// Each test query once.
    OnePass,
    /// At least this long and at least one pass (for steadier QPS on sweeps).
    AtLeast(Duration),
}

/// Runs `queries` (rows of `dim`) by `concurrency` clients for `span`, recording latencies
/// and the answers of the first pass over the test queries (all of them unless a timed run
/// ends sooner). `tick` is called after each query (progress).
pub fn run(
    searcher: &dyn Searcher,
    queries: &[f32],
    dim: usize,
    concurrency: usize,
    span: Span,
    knob: usize,
    tick: &(dyn Fn() + Sync),
) -> RunRaw {
    let n = queries.len() / dim;
    let next = AtomicUsize::new(0);
    let errors = AtomicU64::new(0);
    let reads = AtomicU64::new(0);
    let counted = AtomicU64::new(0);
    let rapl = Rapl::open();
    let energy_before = rapl.as_ref().map(|r| r.read());
    let bytes_before = device_read_bytes();
    let start = Instant::now();
    let per_client: Vec<ClientRecord> = std::thread::scope(|s| {
        let clients: Vec<_> = (0..concurrency.max(1))
            .map(|_| {
                s.spawn(|| {
                    let mut search = searcher.client();
                    let mut latencies = Vec::new();
                    let mut answers = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        match span {
                            Span::OnePass if i >= n => break,
                            Span::Time(d) if start.elapsed() >= d => break,
                            Span::AtLeast(d) if i >= n && start.elapsed() >= d => break,
                            _ => {}
                        }
                        let row = i % n;
                        let t = Instant::now();
                        match search(&queries[row * dim..(row + 1) * dim]) {
                            Ok(a) => {
                                latencies.push(t.elapsed().as_secs_f64() * 1e3);
                                if let Some(r) = a.reads {
                                    reads.fetch_add(r, Ordering::Relaxed);
                                    counted.fetch_add(1, Ordering::Relaxed);
                                }
                                if i < n {
                                    answers.push((row, a.ids));
                                }
                            }
                            Err(e) => {
                                if errors.fetch_add(1, Ordering::Relaxed) == 0 {
                                    log::warn!("a query failed: {e:#}");
                                }
                            }
                        }
                        tick();
                    }
                    (latencies, answers)
                })
            })
            .collect();
        clients
            .into_iter()
            .map(|c| c.join().expect("a benchmark client panicked"))
            .collect()
    });
    let seconds = start.elapsed().as_secs_f64();
    let joules = rapl
        .as_ref()
        .zip(energy_before)
        .map(|(r, before)| r.joules_between(&before, &r.read()));
    let mut latencies_ms = Vec::new();
    let mut answers = vec![Vec::new(); n];
    for (lat, ans) in per_client {
        latencies_ms.extend(lat);
        for (row, ids) in ans {
            answers[row] = ids;
        }
    }
    let counted = counted.into_inner();
    RunRaw {
        concurrency,
        knob,
        seconds,
        queries: latencies_ms.len() as u64,
        errors: errors.into_inner(),
        latencies_ms,
        answers,
        joules,
        device_read_bytes: bytes_before
            .zip(device_read_bytes())
            .map(|(b, a)| a.saturating_sub(b)),
        index_reads: (counted > 0).then(|| reads.into_inner()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Answers each query with its first value as id, after a short sleep; fails on negatives.
    struct Echo {
        calls: Mutex<usize>,
    }

    impl Searcher for Echo {
        fn client(&self) -> Client<'_> {
            Box::new(|q: &[f32]| {
                *self.calls.lock().unwrap() += 1;
                std::thread::sleep(Duration::from_millis(2));
                anyhow::ensure!(q[0] >= 0.0, "negative");
                Ok(Answer {
                    ids: vec![q[0] as i64],
                    reads: Some(3),
                })
            })
        }
    }

    #[test]
    fn one_pass_answers_every_query_in_order() {
        let queries: Vec<f32> = (0..10).flat_map(|i| [i as f32, 0.0]).collect();
        let echo = Echo {
            calls: Mutex::new(0),
        };
        let r = run(&echo, &queries, 2, 3, Span::OnePass, 7, &|| {});
        assert_eq!(r.queries, 10);
        assert_eq!(r.knob, 7);
        assert_eq!(*echo.calls.lock().unwrap(), 10);
        let ids: Vec<i64> = r.answers.iter().map(|a| a[0]).collect();
        assert_eq!(ids, (0..10).collect::<Vec<_>>());
        assert_eq!(r.index_reads, Some(30));
        assert!(r.latencies_ms.iter().all(|&l| l >= 2.0));
    }

    #[test]
    fn timed_runs_cycle_and_count_failures() {
        let queries = [1.0f32, -1.0];
        let echo = Echo {
            calls: Mutex::new(0),
        };
        let r = run(
            &echo,
            &queries,
            1,
            2,
            Span::Time(Duration::from_millis(60)),
            1,
            &|| {},
        );
        assert!(r.seconds >= 0.06);
        assert!(r.queries >= 4, "{}", r.queries);
        assert!(r.errors >= 4 && r.errors.abs_diff(r.queries) <= 2);
        assert_eq!(r.answers, vec![vec![1], vec![]]);
    }
}
