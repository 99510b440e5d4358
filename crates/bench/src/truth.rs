//! The workload of a benchmark: test queries and their ground truth, checked against each
//! other and against the train vectors before anything is measured, so a ground truth
//! that belongs to other queries, another train set or another metric is refused by name.

use std::collections::HashMap;
use std::path::Path;

use anyhow::{bail, ensure, Context};
use diskvec_dataset::{DatasetDir, Matrix, Neighbors};
use diskvec_vector::Metric;

use crate::synth::{synthetic_params, SynthParams};

pub struct Workload {
    pub queries: Matrix,
    pub truth: Neighbors,
    pub train_len: usize,
    pub synthetic: Option<SynthParams>,
}

/// Queries checked by brute force against the train vectors.
const SAMPLED: usize = 8;

/// A dataset's test queries and its ground truth for recall at `k`, refused unless the
/// truth has one row per query with the same query ids and at least `k` neighbours a row.
pub fn load_queries(dir: &Path, k: usize) -> anyhow::Result<(Matrix, Neighbors)> {
    let d = DatasetDir::open(dir)?;
    let queries = d.test()?;
    let gt_path = d.neighbors_path().map_err(|e| {
        anyhow::anyhow!(
            "{e}; `diskvec groundtruth --dataset {}` computes it",
            dir.display()
        )
    })?;
    let truth = d.neighbors()?;
    if truth.lists.len() != queries.len() {
        bail!(
            "{}: the ground truth has {} rows but there are {} test queries; it does not belong to these queries",
            gt_path.display(),
            truth.lists.len(),
            queries.len()
        );
    }
    if truth.query_ids != queries.ids {
        bail!(
            "{}: the ground truth's query ids differ from the test query ids; it does not belong to these queries",
            gt_path.display()
        );
    }
    if let Some((i, short)) = truth.lists.iter().enumerate().find(|(_, l)| l.len() < k) {
        bail!(
            "{}: query {} has {} true neighbours, fewer than k = {k}; lower --k or recompute the ground truth",
            gt_path.display(),
            truth.query_ids[i],
            short.len()
        );
    }
    Ok((queries, truth))
}

/// Refuses a ground truth whose first `k` neighbours of each query are not all among `ids`
/// (the vectors searched, `what`): recall against it would measure nothing. One pass over
/// `ids` with a set of the truth's ids, which is far smaller than the index.
pub fn check_truth_ids(truth: &Neighbors, k: usize, ids: &[i64], what: &str) -> anyhow::Result<()> {
    let mut missing: HashMap<i64, bool> = truth
        .lists
        .iter()
        .flat_map(|l| l.iter().take(k))
        .map(|&id| (id, true))
        .collect();
    let listed = missing.len();
    for id in ids {
        if let Some(m) = missing.get_mut(id) {
            *m = false;
        }
    }
    let mut absent: Vec<i64> = missing
        .into_iter()
        .filter_map(|(id, m)| m.then_some(id))
        .collect();
    if absent.is_empty() {
        return Ok(());
    }
    absent.sort_unstable();
    let shown: Vec<String> = absent.iter().take(5).map(i64::to_string).collect();
    bail!(
        "{} of the {listed} neighbour ids the ground truth lists (first {k} per query) are not in {what} \
         (e.g. {}); it was computed for other vectors, or {what} was built from other vectors",
        absent.len(),
        shown.join(", ")
    )
}

/// Loads and checks a dataset directory for a benchmark at `k`.
pub fn load_workload(dir: &Path, metric: Metric, k: usize) -> anyhow::Result<Workload> {
    let (queries, truth) = load_queries(dir, k)?;
    let d = DatasetDir::open(dir)?;
    let gt_path = d.neighbors_path()?;
    let train = d.train()?;
    ensure!(
        train.dim == queries.dim,
        "train vectors have dimension {}, test queries {}",
        train.dim,
        queries.dim
    );
    check_against_train(&train, &queries, &truth, metric, k)
        .with_context(|| format!("{}: ground truth check", gt_path.display()))?;
    Ok(Workload {
        train_len: train.len(),
        queries,
        truth,
        synthetic: synthetic_params(dir),
    })
}

/// For a sample of queries, the listed neighbours must be at the exact nearest distances:
/// the first at the nearest distance, the k-th at the k-th nearest, none farther.
pub fn check_against_train(
    train: &Matrix,
    queries: &Matrix,
    truth: &Neighbors,
    metric: Metric,
    k: usize,
) -> anyhow::Result<()> {
    let row_of: HashMap<i64, usize> = train
        .ids
        .iter()
        .enumerate()
        .map(|(r, &id)| (id, r))
        .collect();
    let step = (queries.len() / SAMPLED).max(1);
    let sample: Vec<usize> = (0..queries.len()).step_by(step).take(SAMPLED).collect();
    let prepared: Vec<Vec<f32>> = sample
        .iter()
        .map(|&q| {
            let mut v = queries.row(q).to_vec();
            metric.prepare(&mut v);
            v
        })
        .collect();
    let kk = k.min(train.len());
    let mut exact: Vec<Vec<f32>> = vec![Vec::with_capacity(train.len()); sample.len()];
    let mut buf = vec![0f32; train.dim];
    let mut listed = vec![vec![f32::NAN; kk]; sample.len()];
    let mut wanted: HashMap<usize, Vec<(usize, usize)>> = HashMap::new();
    for (s, &q) in sample.iter().enumerate() {
        for (j, id) in truth.lists[q].iter().take(kk).enumerate() {
            let Some(&row) = row_of.get(id) else {
                bail!(
                    "query {} lists neighbour id {id}, which is not a train vector id",
                    truth.query_ids[q]
                );
            };
            wanted.entry(row).or_default().push((s, j));
        }
    }
    for r in 0..train.len() {
        buf.copy_from_slice(train.row(r));
        metric.prepare(&mut buf);
        for (s, q) in prepared.iter().enumerate() {
            exact[s].push(metric.distance(q, &buf));
        }
        if let Some(places) = wanted.get(&r) {
            for &(s, j) in places {
                listed[s][j] = exact[s][r];
            }
        }
    }
    for (s, &q) in sample.iter().enumerate() {
        let mut e = std::mem::take(&mut exact[s]);
        e.select_nth_unstable_by(kk - 1, |a, b| a.total_cmp(b));
        let kth = e[kk - 1];
        let first = e[..kk].iter().copied().fold(f32::INFINITY, f32::min);
        let tol = |d: f32| 1e-4 + 1e-4 * d.abs();
        let worst = listed[s].iter().copied().fold(f32::NEG_INFINITY, f32::max);
        if listed[s][0] > first + tol(first) || worst > kth + tol(kth) {
            bail!(
                "it does not match the queries and train vectors: for query {} the listed nearest \
                 neighbour is at {metric} distance {:.6} and the farthest of the first {kk} at {:.6}, \
                 but the exact nearest is at {:.6} and the {kk}-th at {:.6}. Was it computed for \
                 other queries, another train set or another metric (--metric)?",
                truth.query_ids[q],
                listed[s][0],
                worst,
                first,
                kth
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synth::{write_synthetic, SynthParams};
    use diskvec_dataset::{write_neighbors, write_vectors};
    use diskvec_index::NoProgress;

    fn synth(dir: &Path) {
        let p = SynthParams {
            n: 3000,
            dim: 16,
            queries: 30,
            clusters: 8,
            intrinsic_dim: 4,
            k: 20,
            seed: 3,
            ..Default::default()
        };
        write_synthetic(&p, dir, 1 << 20, &NoProgress).unwrap();
    }

    #[test]
    fn a_matching_dataset_loads() {
        let dir = tempfile::tempdir().unwrap();
        synth(dir.path());
        let w = load_workload(dir.path(), Metric::Cosine, 10).unwrap();
        assert_eq!((w.queries.len(), w.train_len), (30, 3000));
        assert!(w.synthetic.is_some());
    }

    #[test]
    fn foreign_or_short_ground_truth_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        synth(dir.path());
        let d = DatasetDir::open(dir.path()).unwrap();
        let (mut test, gt) = (d.test().unwrap(), d.neighbors().unwrap());
        // k above what the truth lists.
        let err = load_workload(dir.path(), Metric::Cosine, 50)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("fewer than k = 50"), "{err}");
        // Other queries with the same ids: the truth no longer fits them.
        test.data.reverse();
        write_vectors(&dir.path().join("test.parquet"), &test).unwrap();
        let err = format!(
            "{:#}",
            load_workload(dir.path(), Metric::Cosine, 10).err().unwrap()
        );
        assert!(err.contains("does not match the queries"), "{err}");
        test.data.reverse();
        write_vectors(&dir.path().join("test.parquet"), &test).unwrap();
        // Fewer rows than queries.
        let short = Neighbors {
            query_ids: gt.query_ids[..29].to_vec(),
            lists: gt.lists[..29].to_vec(),
        };
        write_neighbors(&dir.path().join("neighbors.parquet"), &short).unwrap();
        let err = load_workload(dir.path(), Metric::Cosine, 10)
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.contains("29 rows but there are 30 test queries"),
            "{err}"
        );
        // Shifted query ids.
        let shifted = Neighbors {
            query_ids: gt.query_ids.iter().map(|i| i + 1).collect(),
            lists: gt.lists.clone(),
        };
        write_neighbors(&dir.path().join("neighbors.parquet"), &shifted).unwrap();
        let err = load_workload(dir.path(), Metric::Cosine, 10)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("query ids differ"), "{err}");
        // A neighbour id that is not in train.
        let mut bad = gt.clone();
        bad.lists[0][3] = 999_999;
        write_neighbors(&dir.path().join("neighbors.parquet"), &bad).unwrap();
        let err = format!(
            "{:#}",
            load_workload(dir.path(), Metric::Cosine, 10).err().unwrap()
        );
        assert!(err.contains("not a train vector id"), "{err}");
        // Fewer neighbours than k: refused already when loading the queries.
        let err = load_queries(dir.path(), 50).err().unwrap().to_string();
        assert!(err.contains("fewer than k = 50"), "{err}");
        // Ids the searched vectors do not have.
        let err = check_truth_ids(&gt, 10, &[0, 1, 2], "the index")
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("are not in the index"), "{err}");
        let train = d.train().unwrap();
        check_truth_ids(&gt, 10, &train.ids, "the index").unwrap();
        // The right truth under another metric.
        write_neighbors(&dir.path().join("neighbors.parquet"), &gt).unwrap();
        assert!(load_workload(dir.path(), Metric::Cosine, 10).is_ok());
    }
}
