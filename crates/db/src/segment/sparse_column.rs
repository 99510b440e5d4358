//! One sparse space of a segment in DRAM: each offset's vector (for retrieval) and an
//! inverted index, term id to the (offset, weight) of every point that has it, ascending by
//! offset. Scores are exact: a query's dot product with every point sharing a term.

use std::collections::HashMap;

use super::SegmentHit;
use crate::vectors::SparseVector;

#[derive(Default)]
pub(crate) struct SparseColumn {
    vectors: Vec<Option<SparseVector>>,
    postings: HashMap<u32, Vec<(u32, f32)>>,
}

impl SparseColumn {
    /// A column of stored vectors, by offset.
    pub fn from_vectors(vectors: Vec<Option<SparseVector>>) -> Self {
        let mut column = Self::default();
        for v in vectors {
            column.push(v);
        }
        column
    }

    /// Appends the next offset's vector (sorted and checked), or none.
    pub fn push(&mut self, vector: Option<SparseVector>) {
        let offset = self.vectors.len() as u32;
        if let Some(v) = &vector {
            for (term, weight) in v.entries() {
                self.postings
                    .entry(term)
                    .or_default()
                    .push((offset, weight));
            }
        }
        self.vectors.push(vector);
    }

    pub fn get(&self, offset: u32) -> Option<&SparseVector> {
        self.vectors.get(offset as usize).and_then(Option::as_ref)
    }

    pub fn vectors(&self) -> &[Option<SparseVector>] {
        &self.vectors
    }

    /// Offsets with a vector in this space that `live` takes, and how many of them hold
    /// each of `terms`: what an IDF weighting sums over segments.
    pub fn frequencies(&self, terms: &[u32], live: &dyn Fn(u32) -> bool) -> (u64, Vec<u64>) {
        let points = (0..self.vectors.len() as u32)
            .filter(|&o| self.vectors[o as usize].is_some() && live(o))
            .count() as u64;
        let per_term = terms
            .iter()
            .map(|t| {
                self.postings.get(t).map_or(0, |list| {
                    list.iter().filter(|(o, _)| live(*o)).count() as u64
                })
            })
            .collect();
        (points, per_term)
    }

    /// The k best-scoring offsets `accept` takes for `query` (weights already multiplied
    /// by any IDF): only points sharing a term with it score. The distance is the negated
    /// score, so smaller is closer as for dense spaces; ties go to the lower offset.
    pub fn search(
        &self,
        query: &SparseVector,
        k: usize,
        accept: &dyn Fn(u32) -> bool,
    ) -> Vec<SegmentHit> {
        let mut scores: HashMap<u32, f32> = HashMap::new();
        for (term, weight) in query.entries() {
            let Some(list) = self.postings.get(&term) else {
                continue;
            };
            for &(offset, value) in list {
                *scores.entry(offset).or_insert(0.0) += weight * value;
            }
        }
        let hits = scores
            .into_iter()
            .filter(|&(offset, _)| accept(offset))
            .map(|(offset, score)| SegmentHit {
                offset,
                distance: -score,
            })
            .collect();
        super::closest(hits, k)
    }

    pub fn dram_bytes(&self) -> usize {
        self.vectors
            .iter()
            .map(|v| 32 + v.as_ref().map_or(0, |v| 8 * v.len()))
            .sum::<usize>()
            + self
                .postings
                .values()
                .map(|l| 48 + 8 * l.capacity())
                .sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sparse(pairs: &[(u32, f32)]) -> Option<SparseVector> {
        Some(SparseVector {
            indices: pairs.iter().map(|p| p.0).collect(),
            values: pairs.iter().map(|p| p.1).collect(),
        })
    }

    #[test]
    fn scores_are_exact_dot_products_over_shared_terms() {
        let c = SparseColumn::from_vectors(vec![
            sparse(&[(1, 1.0), (2, 2.0)]),
            None,
            sparse(&[(2, 1.0), (7, 5.0)]),
            sparse(&[(9, 1.0)]),
        ]);
        let q = sparse(&[(2, 0.5), (7, 1.0)]).unwrap();
        let hits = c.search(&q, 10, &|_| true);
        let got: Vec<(u32, f32)> = hits.iter().map(|h| (h.offset, -h.distance)).collect();
        assert_eq!(got, vec![(2, 5.5), (0, 1.0)], "offset 3 shares no term");
        let filtered = c.search(&q, 10, &|o| o != 2);
        assert_eq!(filtered.len(), 1);
        assert_eq!(c.frequencies(&[2, 9, 4], &|_| true), (3, vec![2, 1, 0]));
        assert_eq!(c.frequencies(&[2], &|o| o != 0), (2, vec![1]));
        assert!(c.get(1).is_none() && c.get(3).is_some());
    }
}
