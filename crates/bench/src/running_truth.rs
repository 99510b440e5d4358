//! Exact top-k of a set of queries over train rows that arrive a block at a time, so the
//! ground truth of a set larger than memory is computed while the set is streamed (written
//! by the synthetic generator or read from another dataset).

use diskvec_dataset::Neighbors;
use diskvec_index::flat;
use diskvec_vector::{Metric, Rows};
use rayon::prelude::*;

pub struct RunningTruth {
    queries: Vec<f32>,
    query_ids: Vec<i64>,
    dim: usize,
    metric: Metric,
    k: usize,
    /// Per query: (distance, id), sorted, at most `k`.
    best: Vec<Vec<(f32, i64)>>,
}

impl RunningTruth {
    /// `queries` row-major, prepared for `metric` here (normalized for cosine).
    pub fn new(
        mut queries: Vec<f32>,
        query_ids: Vec<i64>,
        dim: usize,
        metric: Metric,
        k: usize,
    ) -> Self {
        queries
            .chunks_exact_mut(dim)
            .for_each(|q| metric.prepare(q));
        let best = vec![Vec::new(); query_ids.len()];
        Self {
            queries,
            query_ids,
            dim,
            metric,
            k,
            best,
        }
    }

    /// One block of train rows with their ids; the rows are prepared for the metric in place
    /// (cosine: a float16 row is normalized again in float32, as a search would see it).
    pub fn add(&mut self, rows: &mut [f32], ids: &[i64]) -> anyhow::Result<()> {
        rows.chunks_exact_mut(self.dim)
            .for_each(|r| self.metric.prepare(r));
        let found = flat::search(
            Rows::new(rows, self.dim),
            Rows::new(&self.queries, self.dim),
            self.metric,
            self.k.min(ids.len()),
            &diskvec_index::NoProgress,
        )?;
        let k = self.k;
        self.best.par_iter_mut().zip(found).for_each(|(b, f)| {
            b.extend(f.into_iter().map(|(row, d)| (d, ids[row as usize])));
            // Ties go to the smaller id, as in the bundled sets.
            b.sort_by(|x, y| x.0.total_cmp(&y.0).then(x.1.cmp(&y.1)));
            b.truncate(k);
        });
        Ok(())
    }

    pub fn finish(self) -> Neighbors {
        Neighbors {
            query_ids: self.query_ids,
            lists: self
                .best
                .into_iter()
                .map(|b| b.into_iter().map(|(_, id)| id).collect())
                .collect(),
        }
    }
}
