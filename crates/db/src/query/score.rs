//! Scoring rules of the query kinds that are not a plain nearest search, and of fusion.
//! Similarities here are "higher is closer" (cosine similarity, dot product, or negated
//! Euclidean distance), the scale Qdrant's rules are written for.

use std::collections::HashMap;

use diskvec_vector::Metric;

use crate::{PointId, SparseVector, Vector};

/// Similarity of two dense vectors prepared for `metric` (cosine ones unit length): higher
/// is closer. Cosine and dot product as they are, Euclidean as the negated distance.
pub fn dense_similarity(metric: Metric, q: &[f32], v: &[f32]) -> f32 {
    match metric {
        Metric::L2 => -Metric::L2.distance(q, v).max(0.0).sqrt(),
        m => -m.distance(q, v) + if m == Metric::Cosine { 1.0 } else { 0.0 },
    }
}

/// Dot product of a sparse query and a stored sparse vector over the terms both hold, each
/// weighted by its `idf` weight where given (sorted by term).
pub fn sparse_dot(q: &SparseVector, v: &SparseVector, idf: Option<&[(u32, f32)]>) -> f32 {
    q.entries()
        .filter_map(|(term, w)| {
            let at = v.indices.binary_search(&term).ok()?;
            let weight = idf
                .and_then(|idf| {
                    let i = idf.binary_search_by_key(&term, |p| p.0).ok()?;
                    Some(idf[i].1)
                })
                .unwrap_or(1.0);
            Some(w * weight * v.values[at])
        })
        .sum()
}

/// How the vectors of one space compare, higher being closer: what mmr weighs its
/// candidates by, in a collection and on a cluster's router.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Likeness {
    Dense(Metric),
    /// The dot product of the terms both hold.
    Sparse,
    /// MaxSim over the rows, by the space's metric.
    Multi {
        metric: Metric,
        dim: usize,
    },
}

impl Likeness {
    /// Prepares a query vector as the space compares it (cosine rows unit length).
    pub fn prepare(self, q: &mut Vector) {
        match (self, q) {
            (Likeness::Dense(m), Vector::Dense(d)) => m.prepare(d),
            (Likeness::Multi { metric, .. }, Vector::Multi(rows)) => {
                rows.iter_mut().for_each(|r| metric.prepare(r))
            }
            _ => {}
        }
    }

    /// The similarity of a prepared query `q` to a stored vector `v` (`-inf` for a vector of
    /// another kind).
    pub fn between(self, q: &Vector, v: &Vector) -> f32 {
        match (self, q, v) {
            (Likeness::Dense(m), Vector::Dense(q), Vector::Dense(v)) => dense_similarity(m, q, v),
            (Likeness::Sparse, Vector::Sparse(q), Vector::Sparse(v)) => sparse_dot(q, v, None),
            (Likeness::Multi { metric, dim }, Vector::Multi(q), Vector::Multi(v)) => {
                crate::segment::max_sim(metric, dim, &q.concat(), &v.concat())
            }
            _ => f32::NEG_INFINITY,
        }
    }
}

/// Maximal marginal relevance: the order `want` of the candidates are picked in, each next
/// the best by `(1 - diversity) x relevance - diversity x its greatest similarity to one
/// already picked` (the first by relevance alone). `similar(i, j)`: candidate i's
/// similarity to candidate j.
pub fn mmr_pick(
    relevance: &[f32],
    similar: impl Fn(usize, usize) -> f32,
    diversity: f32,
    want: usize,
) -> Vec<usize> {
    let lambda = 1.0 - diversity;
    let mut left: Vec<usize> = (0..relevance.len()).collect();
    let mut picked: Vec<usize> = Vec::with_capacity(want);
    let mut closest = vec![f32::NEG_INFINITY; relevance.len()];
    while picked.len() < want && !left.is_empty() {
        let score = |i: usize| {
            if picked.is_empty() {
                relevance[i]
            } else {
                lambda * relevance[i] - (1.0 - lambda) * closest[i]
            }
        };
        let (at, &best) = left
            .iter()
            .enumerate()
            .max_by(|a, b| score(*a.1).total_cmp(&score(*b.1)))
            .expect("left is not empty");
        left.swap_remove(at);
        picked.push(best);
        for &i in &left {
            closest[i] = closest[i].max(similar(best, i));
        }
    }
    picked
}

/// x / (1 + |x|) moved to (0, 1): 0.5 at 0, 0.75 at 1.
pub fn sigmoid(x: f32) -> f32 {
    0.5 * (x / (1.0 + x.abs()) + 1.0)
}

/// A recommendation's best-score rule.
pub fn best_score(positive: &[f32], negative: &[f32]) -> f32 {
    let best = |s: &[f32]| s.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let (p, n) = (best(positive), best(negative));
    if p > n {
        sigmoid(p)
    } else {
        -sigmoid(n)
    }
}

/// A recommendation's sum-of-scores rule.
pub fn sum_scores(positive: &[f32], negative: &[f32]) -> f32 {
    positive.iter().sum::<f32>() - negative.iter().sum::<f32>()
}

/// A context query's score: the summed loss over (positive, negative) similarities.
pub fn context(pairs: &[(f32, f32)]) -> f32 {
    pairs
        .iter()
        .map(|&(p, n)| (sigmoid(p) - sigmoid(n) - f32::EPSILON).min(0.0))
        .sum()
}

/// A discovery query's score: +1 per pair the point is closer to the positive of, -1 per
/// pair closer to the negative, plus sigmoid(similarity to the target).
pub fn discover(target: f32, pairs: &[(f32, f32)]) -> f32 {
    let rank: i32 = pairs
        .iter()
        .map(|&(p, n)| match p.total_cmp(&n) {
            std::cmp::Ordering::Greater => 1,
            std::cmp::Ordering::Less => -1,
            std::cmp::Ordering::Equal => 0,
        })
        .sum();
    rank as f32 + sigmoid(target)
}

/// Reciprocal rank fusion of ranked lists (best first): each point scores the sum over
/// lists of 1 / ((rank + 1) / weight + k - 1); best first, ties by id.
pub fn rrf(lists: &[Vec<PointId>], k: usize, weights: Option<&[f32]>) -> Vec<(PointId, f32)> {
    let mut scores: HashMap<PointId, f32> = HashMap::new();
    for (i, list) in lists.iter().enumerate() {
        let weight = weights.and_then(|w| w.get(i).copied()).unwrap_or(1.0);
        for (rank, id) in list.iter().enumerate() {
            let s = if weight > 0.0 {
                1.0 / ((rank as f32 + 1.0) / weight + k as f32 - 1.0)
            } else {
                0.0
            };
            *scores.entry(*id).or_insert(0.0) += s;
        }
    }
    ranked(scores)
}

/// Distribution-based score fusion of scored lists (higher better): each list's scores
/// mapped from [mean - 3 sd, mean + 3 sd] to [0, 1], summed per point.
pub fn dbsf(lists: &[Vec<(PointId, f32)>]) -> Vec<(PointId, f32)> {
    let mut scores: HashMap<PointId, f32> = HashMap::new();
    for list in lists.iter().filter(|l| !l.is_empty()) {
        let n = list.len() as f64;
        let mean = list.iter().map(|p| f64::from(p.1)).sum::<f64>() / n;
        let variance = if list.len() > 1 {
            list.iter()
                .map(|p| (f64::from(p.1) - mean).powi(2))
                .sum::<f64>()
                / (n - 1.0)
        } else {
            0.0
        };
        let sd = variance.sqrt();
        let (low, high) = (mean - 3.0 * sd, mean + 3.0 * sd);
        for &(id, s) in list {
            let normalized = if high > low {
                (f64::from(s) - low) / (high - low)
            } else {
                0.5
            };
            *scores.entry(id).or_insert(0.0) += normalized as f32;
        }
    }
    ranked(scores)
}

fn ranked(scores: HashMap<PointId, f32>) -> Vec<(PointId, f32)> {
    let mut out: Vec<(PointId, f32)> = scores.into_iter().collect();
    out.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    out
}

/// Relevance feedback's weight of each example (Qdrant's naive strategy): every ordered
/// pair of examples whose feedback scores differ by d > 0 adds d^b x c x (similarity to the
/// better - to the worse), so an example's weight is what its pairs as the better one give
/// less what its pairs as the worse one take (one similarity per example, not per pair).
pub fn feedback_weights(scores: &[f32], b: f32, c: f32) -> Vec<f32> {
    let mut weights = vec![0f32; scores.len()];
    for (i, s1) in scores.iter().enumerate() {
        for (j, s2) in scores.iter().enumerate() {
            let confidence = s1 - s2;
            if i != j && confidence > 0.0 {
                let w = confidence.powf(b) * c;
                weights[i] += w;
                weights[j] -= w;
            }
        }
    }
    weights
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_score_as_qdrant_documents_them() {
        assert_eq!(sigmoid(0.0), 0.5);
        assert_eq!(sigmoid(1.0), 0.75);
        assert_eq!(best_score(&[42.0], &[4.0]), sigmoid(42.0));
        assert_eq!(best_score(&[4.0], &[42.0]), -sigmoid(42.0));
        assert_eq!(best_score(&[-42.0], &[-84.0]), sigmoid(-42.0));
        assert_eq!(context(&[]), 0.0);
        assert!((context(&[(0.0, 1.0)]) + 0.25).abs() < 1e-6);
        assert_eq!(context(&[(1.0, 0.0)]), 0.0);
        assert_eq!(discover(0.0, &[(10.0, 4.0), (4.0, 2.0)]), 2.5);
        assert_eq!(discover(0.0, &[(10.0, 4.0), (4.0, 10.0)]), 0.5);
        let id = PointId::Num;
        // k = 2: rank 0 scores 1/2, rank 1 scores 1/3.
        let fused = rrf(&[vec![id(1), id(2)], vec![id(2), id(3)]], 2, None);
        assert_eq!(fused[0].0, id(2));
        assert!((fused[0].1 - (1.0 / 3.0 + 0.5)).abs() < 1e-6);
        assert_eq!(fused[1], (id(1), 0.5));
        assert_eq!(fused[2].0, id(3));
        let weighted = rrf(&[vec![id(1)], vec![id(2)]], 2, Some(&[1.0, 0.0]));
        assert_eq!(weighted, vec![(id(1), 0.5), (id(2), 0.0)]);
        let d = dbsf(&[vec![(id(1), 3.0), (id(2), 1.0)], vec![(id(2), 5.0)]]);
        assert_eq!(d[0].0, id(2));
    }
}
