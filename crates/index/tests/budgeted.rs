//! The build within a memory budget: a build in shards answers as well as one in memory,
//! for every metric, and bad input or a budget too small is refused with nothing left
//! behind and the previous index intact. (Shards are forced by `SHARD_CAPACITY_VAR`: data
//! small enough for a test fits any budget the process itself fits in.)

mod common;

use std::path::Path;

use common::{clustered, exact_ids_10, file_names};
use diskvec_index::diskann::{
    build_from, BuildParams, DiskIndex, GraphBuilder, GraphPrecision, MemoryBudget, OpenOptions,
    SliceSource, VectorSource,
};
use diskvec_index::NoProgress;
use diskvec_vector::Metric;

const DIM: usize = 32;

fn params(metric: Metric) -> BuildParams {
    BuildParams {
        metric,
        max_degree: 24,
        build_list: 60,
        pq_bytes: Some(8),
        ..Default::default()
    }
}

fn build_with(
    data: &[f32],
    ids: &[i64],
    metric: Metric,
    dir: &Path,
    shard_capacity: Option<usize>,
) -> diskvec_index::Result<diskvec_index::diskann::BuildReport> {
    build_on(data, ids, &params(metric), dir, shard_capacity)
}

fn build_on(
    data: &[f32],
    ids: &[i64],
    params: &BuildParams,
    dir: &Path,
    shard_capacity: Option<usize>,
) -> diskvec_index::Result<diskvec_index::diskann::BuildReport> {
    common::build_in(data, DIM, ids, params, dir, shard_capacity)
}

fn recall_at_10(dir: &Path, queries: &[f32], truth: &[Vec<i64>], navigation: bool) -> f64 {
    common::recall_at_10(dir, queries, DIM, truth, 100, navigation)
}

#[test]
fn a_build_in_shards_answers_like_the_build_in_memory() {
    let n = 6000;
    let data = clustered(n, DIM, 5);
    let ids: Vec<i64> = (0..n as i64).map(|i| 7 + 2 * i).collect();
    // 240 queries: with 60 the two recalls differed by up to 0.022 between runs of the same
    // code (one query's ten results are 0.017 of the total), and the test failed by chance.
    let queries = clustered(240, DIM, 77);
    for metric in [Metric::Cosine, Metric::L2, Metric::InnerProduct] {
        let truth = exact_ids_10(&data, &queries, DIM, metric, &ids);
        let root = tempfile::tempdir().unwrap();
        let (whole, sharded) = (root.path().join("whole"), root.path().join("sharded"));
        let report = build_with(&data, &ids, metric, &whole, None).unwrap();
        assert_eq!(report.shards, 1);
        let a = recall_at_10(&whole, &queries, &truth, false);
        // Nodes placed by position (codes through scratch files), and in input order (codes
        // streamed into the index files as they are encoded).
        for input_order in [false, true] {
            let params = params(metric);
            let report = common::build_in_order(
                &data,
                DIM,
                &ids,
                &params,
                &sharded,
                Some(1500),
                input_order,
            );
            let report = report.unwrap();
            assert!(report.shards >= 9, "{metric:?}: {} shards", report.shards);
            let b = recall_at_10(&sharded, &queries, &truth, false);
            let how = if input_order { "input order" } else { "placed" };
            eprintln!("{metric:?}: recall@10 in memory {a:.4}, in shards ({how}) {b:.4}");
            // In input order a sector's other records (17 here, at 32 dimensions) are
            // unrelated to the node read, so a read rarely expands them for free as it does
            // in the in-memory build's placement: recall at equal L is lower (measured
            // 0.965-0.968 against 0.963-0.990 in memory, over three runs of each metric).
            let tolerance = if input_order { 0.04 } else { 0.02 };
            assert!(
                b >= a - tolerance && b > 0.9,
                "{metric:?} {how}: {b} vs {a}"
            );
            // The navigation file the sharded build wrote opens and walks.
            let nav = recall_at_10(&sharded, &queries, &truth, true);
            assert!(nav > 0.9, "{metric:?} {how}: navigation recall {nav}");
            let options = OpenOptions {
                compact_codes: true,
                ..Default::default()
            };
            let index = DiskIndex::open(&sharded, &options).unwrap();
            assert!(
                index.uses_compact_codes(),
                "{metric:?} {how}: {:?}",
                index.compact_problem()
            );
            drop(index);
            let report = diskvec_index::diskann::verify(&sharded, &NoProgress).unwrap();
            assert!(report.damage.is_empty(), "{how}");
            let left: Vec<String> = std::fs::read_dir(&sharded)
                .unwrap()
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|f| {
                    f.starts_with("build.") || f.starts_with("pending.") || f.ends_with(".tmp")
                })
                .collect();
            assert!(left.is_empty(), "{how}: scratch files left: {left:?}");
        }
    }
}

#[test]
fn graphs_built_by_partitioning_answer_like_vamana_for_every_metric() {
    let n = 6000;
    let data = clustered(n, DIM, 5);
    let ids: Vec<i64> = (0..n as i64).collect();
    let queries = clustered(60, DIM, 77);
    for metric in [Metric::Cosine, Metric::L2, Metric::InnerProduct] {
        let truth = exact_ids_10(&data, &queries, DIM, metric, &ids);
        let root = tempfile::tempdir().unwrap();
        let vamana = root.path().join("vamana");
        build_with(&data, &ids, metric, &vamana, None).unwrap();
        let reference = recall_at_10(&vamana, &queries, &truth, false);
        let pipnn = BuildParams {
            graph_builder: GraphBuilder::Pipnn,
            ..params(metric)
        };
        for shards in [None, Some(1500)] {
            let dir = root.path().join(format!("pipnn-{shards:?}"));
            let report = build_on(&data, &ids, &pipnn, &dir, shards).unwrap();
            assert_eq!(report.shards > 1, shards.is_some());
            let got = recall_at_10(&dir, &queries, &truth, false);
            eprintln!("{metric:?} {shards:?}: pipnn {got:.4}, vamana {reference:.4}");
            assert!(
                got >= reference - 0.06 && got > 0.9,
                "{metric:?} {shards:?}: {got} vs {reference}"
            );
        }
    }
}

#[test]
fn graphs_built_on_8_bit_codes_answer_like_graphs_built_on_the_vectors() {
    let n = 5000;
    let data = clustered(n, DIM, 11);
    let ids: Vec<i64> = (0..n as i64).collect();
    let queries = clustered(200, DIM, 78);
    for metric in [Metric::Cosine, Metric::L2, Metric::InnerProduct] {
        let truth = exact_ids_10(&data, &queries, DIM, metric, &ids);
        for shards in [None, Some(1500)] {
            let root = tempfile::tempdir().unwrap();
            let mut got = Vec::new();
            for precision in [GraphPrecision::Full, GraphPrecision::Sq8] {
                let dir = root.path().join(precision.name());
                let params = BuildParams {
                    graph_precision: precision,
                    ..params(metric)
                };
                build_on(&data, &ids, &params, &dir, shards).unwrap();
                got.push(recall_at_10(&dir, &queries, &truth, false));
            }
            eprintln!(
                "{metric:?}, shards {shards:?}: recall@10 f32 {:.4}, sq8 {:.4}",
                got[0], got[1]
            );
            // Two builds of the same data differ by up to 0.02 here in either precision
            // (threads insert in a different order each run).
            assert!(
                got[1] >= got[0] - 0.03 && got[1] > 0.93,
                "{metric:?}, shards {shards:?}: sq8 {} vs f32 {}",
                got[1],
                got[0]
            );
        }
    }
}

/// A source that misbehaves at row `at`: `Ragged` delivers a row of the wrong length,
/// `Nan` a NaN, `Short` ends there, `Changed` has another value there when read again.
#[derive(Clone, Copy)]
enum Fault {
    Ragged,
    Nan,
    Short,
    Changed,
}

struct Faulty {
    data: Vec<f32>,
    n: usize,
    at: usize,
    fault: Fault,
    next: usize,
    rewinds: usize,
}

impl VectorSource for Faulty {
    fn dim(&self) -> usize {
        DIM
    }
    fn rows(&self) -> usize {
        self.n
    }
    fn next_chunk(&mut self, data: &mut Vec<f32>, ids: &mut Vec<i64>) -> Result<usize, String> {
        data.clear();
        ids.clear();
        let end = (self.next + 500).min(self.n);
        if self.next >= end || (matches!(self.fault, Fault::Short) && self.next >= self.at) {
            return Ok(0);
        }
        data.extend_from_slice(&self.data[self.next * DIM..end * DIM]);
        ids.extend(self.next as i64..end as i64);
        if (self.next..end).contains(&self.at) {
            match self.fault {
                Fault::Ragged => {
                    data.pop();
                }
                Fault::Nan => data[(self.at - self.next) * DIM + 3] = f32::NAN,
                Fault::Changed if self.rewinds > 0 => data[(self.at - self.next) * DIM] += 0.5,
                Fault::Short | Fault::Changed => {}
            }
        }
        let rows = end - self.next;
        self.next = end;
        Ok(rows)
    }

    fn rewind(&mut self) -> Result<(), String> {
        self.next = 0;
        self.rewinds += 1;
        Ok(())
    }
}

/// An index of the first 1,000 of 4,000 clustered rows, which a failed or cancelled build
/// over all of them must leave as it was.
struct OldIndex {
    _root: tempfile::TempDir,
    dir: std::path::PathBuf,
    files: Vec<String>,
    data: Vec<f32>,
    ids: Vec<i64>,
}

impl OldIndex {
    fn new(seed: u64) -> Self {
        let n = 4000;
        let data = clustered(n, DIM, seed);
        let ids: Vec<i64> = (0..n as i64).collect();
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("index");
        build_with(&data[..1000 * DIM], &ids[..1000], Metric::L2, &dir, None).unwrap();
        let files = file_names(&dir);
        Self {
            _root: root,
            dir,
            files,
            data,
            ids,
        }
    }

    /// Builds into the index's directory from `source` with shards of `shards` vectors
    /// (`None`: as the budget says).
    fn build_over(
        &self,
        source: &mut dyn VectorSource,
        shards: Option<usize>,
        progress: &dyn diskvec_index::Progress,
    ) -> diskvec_index::Result<diskvec_index::diskann::BuildReport> {
        let knobs = common::Knobs {
            shard_capacity: shards,
            input_order: false,
        };
        common::build_source(source, &params(Metric::L2), &self.dir, knobs, progress)
    }

    fn assert_whole(&self, what: &str) {
        assert_eq!(file_names(&self.dir), self.files, "{what}");
        let index = DiskIndex::open(&self.dir, &OpenOptions::default()).unwrap();
        assert_eq!(index.len(), 1000, "{what}");
    }
}

#[test]
fn bad_input_and_small_budgets_are_refused_leaving_the_old_index_whole() {
    let old = OldIndex::new(9);
    // A build in memory reads its input once; one in shards three times, and refuses an
    // input that changed between them.
    let cases = [
        (Fault::Ragged, "changed length", &[None, Some(1000)][..]),
        (Fault::Nan, "non-finite", &[None, Some(1000)]),
        (Fault::Short, "ended after", &[None, Some(1000)]),
        (Fault::Changed, "the input changed", &[Some(1000)]),
    ];
    for (fault, expected, shard_choices) in cases {
        for &shards in shard_choices {
            let mut source = Faulty {
                data: old.data.clone(),
                n: old.ids.len(),
                at: 2700,
                fault,
                next: 0,
                rewinds: 0,
            };
            let err = old
                .build_over(&mut source, shards, &NoProgress)
                .unwrap_err()
                .to_string();
            assert!(err.contains(expected), "{shards:?}: {err}");
            old.assert_whole(&format!("{shards:?} {expected}"));
        }
    }
    let err = build_from(
        &mut SliceSource::new(&old.data, DIM, &old.ids),
        &params(Metric::L2),
        MemoryBudget::Bytes(1 << 20),
        &old.dir,
        &NoProgress,
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("smallest that works is"), "{err}");
}

/// Asks a build to stop once it is in `phase` (the database cancels a background build
/// that a merge of everything, or returning writes, supersede).
struct CancelIn {
    phase: &'static str,
    current: std::sync::Mutex<String>,
}

impl diskvec_index::Progress for CancelIn {
    fn phase(&self, name: &str, _total: u64) {
        *self.current.lock().unwrap() = name.to_string();
    }

    fn advance(&self, _steps: u64) {}

    fn cancelled(&self) -> bool {
        *self.current.lock().unwrap() == self.phase
    }
}

#[test]
fn a_cancelled_build_stops_in_its_input_passes_leaving_the_old_index_whole() {
    let old = OldIndex::new(10);
    // Until session 45 a build in shards looked only in its graph phase: a merge that gave
    // way at 10M read and encoded its input for 20 minutes first.
    let cases = [
        (None, "reading input"),
        (Some(1000), "reading input"),
        (Some(1000), "encoding and partitioning"),
    ];
    for (shards, phase) in cases {
        let progress = CancelIn {
            phase,
            current: Default::default(),
        };
        let mut source = SliceSource::new(&old.data, DIM, &old.ids);
        let outcome = old.build_over(&mut source, shards, &progress);
        assert!(
            matches!(outcome, Err(diskvec_index::IndexError::Cancelled)),
            "{shards:?} {phase}: {:?}",
            outcome.map(|r| r.shards)
        );
        assert_eq!(*progress.current.lock().unwrap(), phase);
        old.assert_whole(&format!("{shards:?} {phase}"));
    }
}
