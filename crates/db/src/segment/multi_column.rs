//! One multivector space of a segment in DRAM: each offset's rows (prepared for the
//! metric), scored exactly by MaxSim: for each query row its best similarity among the
//! point's rows, summed. (The design indexes every row as a graph node later; today a
//! search scans the points that have a multivector.)

use diskvec_vector::Metric;

use super::SegmentHit;
use crate::config::DenseSpace;

pub(crate) struct MultiColumn {
    dim: usize,
    metric: Metric,
    vectors: Vec<Option<Vec<f32>>>,
}

/// MaxSim of `query` rows against `doc` rows (both prepared, `dim` numbers each), on the
/// "higher is closer" scale: dot products (cosine similarity for unit rows), or negated
/// squared Euclidean distances (Qdrant's, whose user score is then the square root of the
/// sum's magnitude: `multi_l2_score`).
pub(crate) fn max_sim(metric: Metric, dim: usize, query: &[f32], doc: &[f32]) -> f32 {
    query
        .chunks_exact(dim)
        .map(|q| {
            doc.chunks_exact(dim)
                .map(|d| match metric {
                    Metric::L2 => -metric.distance(q, d).max(0.0),
                    Metric::Cosine => 1.0 - metric.distance(q, d),
                    Metric::InnerProduct => -metric.distance(q, d),
                })
                .fold(f32::NEG_INFINITY, f32::max)
        })
        .sum()
}

/// The score a user sees for a Euclidean MaxSim (`max_sim` of an L2 space): the square
/// root of the summed squared distances, lower being closer (Qdrant's convention).
pub(crate) fn multi_l2_score(max_sim: f32) -> f32 {
    max_sim.abs().sqrt()
}

impl MultiColumn {
    pub fn from_vectors(space: &DenseSpace, vectors: Vec<Option<Vec<f32>>>) -> Self {
        Self {
            dim: space.dim,
            metric: space.metric,
            vectors,
        }
    }

    pub fn push(&mut self, rows: Option<Vec<f32>>) {
        self.vectors.push(rows);
    }

    pub fn get(&self, offset: u32) -> Option<&[f32]> {
        self.vectors.get(offset as usize).and_then(|v| v.as_deref())
    }

    pub fn vectors(&self) -> &[Option<Vec<f32>>] {
        &self.vectors
    }

    /// The k best offsets `accept` takes by MaxSim with `query` (prepared rows); distance
    /// is the negated score.
    pub fn search(&self, query: &[f32], k: usize, accept: &dyn Fn(u32) -> bool) -> Vec<SegmentHit> {
        let hits = self
            .vectors
            .iter()
            .enumerate()
            .filter_map(|(o, v)| Some((o as u32, v.as_ref()?)))
            .filter(|(o, _)| accept(*o))
            .map(|(offset, doc)| SegmentHit {
                offset,
                distance: -max_sim(self.metric, self.dim, query, doc),
            })
            .collect();
        super::closest(hits, k)
    }

    pub fn dram_bytes(&self) -> usize {
        self.vectors
            .iter()
            .map(|v| 24 + v.as_ref().map_or(0, |v| 4 * v.len()))
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_sim_sums_each_query_rows_best_match() {
        let doc = [1.0, 0.0, 0.0, 1.0];
        // Dot: rows (1,0) and (0,1); query rows (2,0) -> 2, (1,1) -> 1.
        assert_eq!(
            max_sim(Metric::InnerProduct, 2, &[2.0, 0.0, 1.0, 1.0], &doc),
            3.0
        );
        assert_eq!(max_sim(Metric::L2, 2, &[1.0, 0.0], &doc), 0.0);
        // Euclidean: each query row's least squared distance, summed; the user's score is
        // its square root (Qdrant's example: 5 + 0 + 14).
        let query = [1.0, 2.0, 3.0, 3.0, 3.0, 3.0, 4.0, 5.0, 6.0];
        let sim = max_sim(Metric::L2, 3, &query, &[3.0, 3.0, 3.0, 4.0, 2.0, 1.0]);
        assert_eq!(sim, -19.0);
        assert!((multi_l2_score(sim) - 19f32.sqrt()).abs() < 1e-6);
        let space = DenseSpace::new("m", 2, Metric::InnerProduct);
        let c =
            MultiColumn::from_vectors(&space, vec![Some(doc.to_vec()), None, Some(vec![5.0, 5.0])]);
        let hits = c.search(&[1.0, 0.0], 10, &|_| true);
        assert_eq!(
            hits.iter().map(|h| h.offset).collect::<Vec<_>>(),
            vec![2, 0]
        );
        assert_eq!(hits[0].distance, -5.0);
        assert!(c.search(&[1.0, 0.0], 10, &|o| o != 2).len() == 1);
    }
}
