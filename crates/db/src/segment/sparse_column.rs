//! One sparse space of a segment: each offset's vector (for retrieval) and an inverted
//! index, term id to the (offset, weight) of every point that has it, ascending by offset:
//! in DRAM, or on SSD (`sparse_postings.rs`) for a sealed segment of a space whose index is
//! `on_disk`. Scores are exact: a query's dot product with every point sharing a term.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

use roaring::RoaringBitmap;

use super::sparse_postings::DiskPostings;
use super::SegmentHit;
use crate::vectors::SparseVector;
use crate::Result;

#[derive(Default)]
pub(crate) struct SparseColumn {
    vectors: Vec<Option<SparseVector>>,
    /// The lists in DRAM (empty when they are on SSD).
    postings: HashMap<u32, Vec<(u32, f32)>>,
    /// The lists on SSD, read per query.
    disk: Option<DiskPostings>,
    /// Offsets with a vector in this space.
    with_vector: u64,
}

/// A posting list, borrowed from DRAM or read from SSD: (offset, weight), ascending.
type List<'a> = Cow<'a, [(u32, f32)]>;

/// A scored offset, ordered worst first (lower score, then higher offset), so that a
/// `BinaryHeap` of them keeps the worst of the best k on top.
#[derive(PartialEq)]
struct Scored(f32, u32);

impl Eq for Scored {}

impl Ord for Scored {
    fn cmp(&self, other: &Self) -> Ordering {
        other.0.total_cmp(&self.0).then(self.1.cmp(&other.1))
    }
}

impl PartialOrd for Scored {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
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

    /// A sealed segment's column whose lists are on SSD.
    pub fn with_disk(vectors: Vec<Option<SparseVector>>, disk: DiskPostings) -> Self {
        Self {
            with_vector: vectors.iter().flatten().count() as u64,
            vectors,
            postings: HashMap::new(),
            disk: Some(disk),
        }
    }

    /// The posting list of `term`.
    fn list(&self, term: u32) -> Result<List<'_>> {
        Ok(match &self.disk {
            Some(d) => Cow::Owned(d.list(term, self.vectors.len())?),
            None => Cow::Borrowed(self.postings.get(&term).map_or(&[][..], Vec::as_slice)),
        })
    }

    /// Appends the next offset's vector (sorted and checked), or none (a growing segment's
    /// column: its lists are in DRAM).
    pub fn push(&mut self, vector: Option<SparseVector>) {
        debug_assert!(self.disk.is_none(), "a column on SSD takes no more points");
        let offset = self.vectors.len() as u32;
        if let Some(v) = &vector {
            self.with_vector += 1;
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
    pub fn frequencies(
        &self,
        terms: &[u32],
        live: &dyn Fn(u32) -> bool,
    ) -> Result<(u64, Vec<u64>)> {
        let points = (0..self.vectors.len() as u32)
            .filter(|&o| self.vectors[o as usize].is_some() && live(o))
            .count() as u64;
        let per_term = terms
            .iter()
            .map(|&t| Ok(self.list(t)?.iter().filter(|(o, _)| live(*o)).count() as u64))
            .collect::<Result<_>>()?;
        Ok((points, per_term))
    }

    /// `frequencies` over every offset but the `dead` ones, from the counts kept: no
    /// walk over the points (what an IDF weighting over the whole collection costs).
    pub fn frequencies_except(
        &self,
        terms: &[u32],
        dead: &RoaringBitmap,
    ) -> Result<(u64, Vec<u64>)> {
        let has_vector = |o: u32| self.get(o).is_some();
        let points = self.with_vector - dead.iter().filter(|&o| has_vector(o)).count() as u64;
        let per_term = terms
            .iter()
            .map(|&t| {
                // Nothing deleted: the dictionary's count, no list read.
                if let (Some(d), true) = (&self.disk, dead.is_empty()) {
                    return Ok(d.count(t));
                }
                let list = self.list(t)?;
                let gone = if dead.len() < list.len() as u64 {
                    dead.iter()
                        .filter(|o| list.binary_search_by_key(o, |p| p.0).is_ok())
                        .count()
                } else {
                    list.iter().filter(|(o, _)| dead.contains(*o)).count()
                };
                Ok((list.len() - gone) as u64)
            })
            .collect::<Result<_>>()?;
        Ok((points, per_term))
    }

    /// The k best-scoring offsets `accept` takes for `query` (weights already multiplied
    /// by any IDF): only points sharing a term with it score. The distance is the negated
    /// score, so smaller is closer as for dense spaces; ties go to the lower offset.
    /// `accept` is asked only of points that would enter the best k so far.
    pub fn search(
        &self,
        query: &SparseVector,
        k: usize,
        accept: &dyn Fn(u32) -> bool,
    ) -> Result<Vec<SegmentHit>> {
        let lists: Vec<(f32, List<'_>)> = query
            .entries()
            .map(|(term, weight)| Ok((weight, self.list(term)?)))
            .collect::<Result<_>>()?;
        let entries: usize = lists.iter().map(|(_, l)| l.len()).sum();
        // Scores add up in an array over the offsets when many points share a term (no
        // hashing per posting), in a map when few do (no array over the whole segment).
        let scored: Vec<(u32, f32)> = if entries * 8 >= self.vectors.len() {
            let mut score = vec![0f32; self.vectors.len()];
            let mut touched = vec![false; self.vectors.len()];
            let mut offsets = Vec::new();
            for (weight, list) in &lists {
                for &(offset, value) in list.iter() {
                    let o = offset as usize;
                    if !touched[o] {
                        touched[o] = true;
                        offsets.push(offset);
                    }
                    score[o] += weight * value;
                }
            }
            offsets
                .into_iter()
                .map(|o| (o, score[o as usize]))
                .collect()
        } else {
            let mut scores: HashMap<u32, f32> = HashMap::with_capacity(entries);
            for (weight, list) in &lists {
                for &(offset, value) in list.iter() {
                    *scores.entry(offset).or_insert(0.0) += weight * value;
                }
            }
            scores.into_iter().collect()
        };
        let mut best: BinaryHeap<Scored> = BinaryHeap::with_capacity(k + 1);
        for (offset, score) in scored {
            let candidate = Scored(score, offset);
            let enters = best.len() < k || best.peek().is_some_and(|worst| candidate < *worst);
            if enters && accept(offset) {
                best.push(candidate);
                if best.len() > k {
                    best.pop();
                }
            }
        }
        Ok(best
            .into_sorted_vec()
            .into_iter()
            .map(|Scored(score, offset)| SegmentHit {
                offset,
                distance: -score,
            })
            .collect())
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
            + self.disk.as_ref().map_or(0, DiskPostings::dram_bytes)
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
        let hits = c.search(&q, 10, &|_| true).unwrap();
        let got: Vec<(u32, f32)> = hits.iter().map(|h| (h.offset, -h.distance)).collect();
        assert_eq!(got, vec![(2, 5.5), (0, 1.0)], "offset 3 shares no term");
        let filtered = c.search(&q, 10, &|o| o != 2).unwrap();
        assert_eq!(filtered.len(), 1);
        assert_eq!(
            c.frequencies(&[2, 9, 4], &|_| true).unwrap(),
            (3, vec![2, 1, 0])
        );
        assert_eq!(c.frequencies(&[2], &|o| o != 0).unwrap(), (2, vec![1]));
        let dead: RoaringBitmap = [0u32, 1].into_iter().collect();
        assert_eq!(
            c.frequencies_except(&[2, 9, 4], &dead).unwrap(),
            (2, vec![1, 1, 0])
        );
        assert_eq!(
            c.frequencies_except(&[2, 9], &RoaringBitmap::new())
                .unwrap(),
            c.frequencies(&[2, 9], &|_| true).unwrap()
        );
        assert!(c.get(1).is_none() && c.get(3).is_some());
    }
}
