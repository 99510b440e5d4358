//! The vectors a graph is built over, addressed by row: full precision, or 8-bit codes that
//! cost a quarter of the memory traffic (most of a build's time is fetching vectors).

use diskvec_vector::{dot, prefetch, sq8_l2sq, Metric, Rows, Sq8Gram};
use rayon::prelude::*;

/// Distances between rows of the vectors a graph is built over ("smaller is closer").
pub trait GraphVectors: Sync {
    fn len(&self) -> usize;

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Distance between rows `a` and `b`.
    fn distance(&self, a: u32, b: u32) -> f32;

    /// Hints the CPU to fetch row `i`, which a distance will read soon.
    fn prefetch(&self, i: u32);

    /// The row closest to the mean of all rows: the graph's entry point.
    fn medoid(&self) -> u32;

    /// Values in a row (what `project` reads).
    fn dim(&self) -> usize;

    /// Row `i` projected on each of `planes` (rows of `dim` values):
    /// `out[j] = planes[j] · row`, in the space distances are computed in.
    fn project(&self, i: u32, planes: &[f32], out: &mut [f32]);

    /// The distance between every pair of `rows` into `out`, row major,
    /// `rows.len()` squared, each equal to what `distance` gives for that pair (a leaf of a
    /// partitioned build). By pairs unless the rows have a faster block form.
    fn pairwise(&self, rows: &[u32], _buffers: &mut PairwiseBuffers, out: &mut Vec<f32>) {
        let c = rows.len();
        out.clear();
        out.resize(c * c, 0.0);
        for i in 0..c {
            for j in i + 1..c {
                let d = self.distance(rows[i], rows[j]);
                out[i * c + j] = d;
                out[j * c + i] = d;
            }
        }
    }

    /// The distance from each of `rows` to each of `cols` into `out`, row major
    /// (`rows.len() x cols.len()`), each equal to what `distance` gives for that pair (the
    /// points of a split against its leaders). By pairs unless the rows have a block form.
    fn cross(
        &self,
        rows: &[u32],
        cols: &[u32],
        _buffers: &mut PairwiseBuffers,
        out: &mut Vec<f32>,
    ) {
        out.clear();
        out.extend(
            rows.iter()
                .flat_map(|&r| cols.iter().map(move |&c| self.distance(r, c))),
        );
    }
}

/// One thread's buffers for [`GraphVectors::pairwise`] and [`GraphVectors::cross`].
#[derive(Default)]
pub struct PairwiseBuffers {
    gram: Sq8Gram,
    codes: Vec<u8>,
    col_codes: Vec<u8>,
    sums: Vec<u32>,
}

/// Full-precision rows under a metric.
#[derive(Clone, Copy)]
pub struct FullVectors<'a> {
    pub rows: Rows<'a>,
    pub metric: Metric,
}

impl<'a> FullVectors<'a> {
    pub fn new(data: &'a [f32], dim: usize, metric: Metric) -> Self {
        Self {
            rows: Rows::new(data, dim),
            metric,
        }
    }
}

impl GraphVectors for FullVectors<'_> {
    fn len(&self) -> usize {
        self.rows.len()
    }

    #[inline]
    fn distance(&self, a: u32, b: u32) -> f32 {
        self.metric.distance(self.rows.get(a), self.rows.get(b))
    }

    #[inline]
    fn prefetch(&self, i: u32) {
        prefetch(self.rows.get(i), usize::MAX);
    }

    fn medoid(&self) -> u32 {
        let (data, dim) = (self.rows.data(), self.rows.dim());
        let n = self.rows.len();
        if n == 0 {
            return 0;
        }
        let mut mean = vec![0f64; dim];
        for v in data.chunks_exact(dim) {
            for (m, &x) in mean.iter_mut().zip(v) {
                *m += x as f64;
            }
        }
        let mut mean: Vec<f32> = mean.iter().map(|m| (*m / n as f64) as f32).collect();
        self.metric.prepare(&mut mean);
        // Nearest by L2 for inner product: -dot would pick the largest vector in the mean's
        // direction.
        let by = if self.metric == Metric::InnerProduct {
            Metric::L2
        } else {
            self.metric
        };
        nearest(n, |i| by.distance(&mean, self.rows.get(i as u32)))
    }

    fn dim(&self) -> usize {
        self.rows.dim()
    }

    fn project(&self, i: u32, planes: &[f32], out: &mut [f32]) {
        let row = self.rows.get(i);
        for (o, plane) in out.iter_mut().zip(planes.chunks_exact(row.len())) {
            *o = dot(plane, row);
        }
    }
}

/// 8-bit codes (`ScalarQuantizer8`), one row of `dim` bytes per vector, compared by squared
/// L2 times `scale`.
#[derive(Clone, Copy)]
pub struct Sq8Vectors<'a> {
    codes: &'a [u8],
    dim: usize,
    scale: f32,
}

impl<'a> Sq8Vectors<'a> {
    /// `scale` turns a sum of squared code differences into the distance the graph is built
    /// by: the quantizer's `l2_scale()` for L2, half of it for cosine over unit vectors
    /// (1 - cos(a, b) = |a - b|² / 2), so pruning compares the same numbers as in full
    /// precision.
    pub fn new(codes: &'a [u8], dim: usize, scale: f32) -> Self {
        assert!(
            dim > 0 && codes.len().is_multiple_of(dim),
            "codes of {dim} bytes do not tile {} bytes",
            codes.len()
        );
        Self { codes, dim, scale }
    }

    /// The scale for building by `metric` over codes whose squared-L2 scale is `l2_scale`;
    /// `None` for inner product, which builds over L2 in an augmented space (`mips_to_l2`).
    pub fn scale_for(metric: Metric, l2_scale: f32) -> Option<f32> {
        match metric {
            Metric::L2 => Some(l2_scale),
            Metric::Cosine => Some(l2_scale / 2.0),
            Metric::InnerProduct => None,
        }
    }

    #[inline]
    fn row(&self, i: u32) -> &'a [u8] {
        let at = i as usize * self.dim;
        &self.codes[at..at + self.dim]
    }
}

impl GraphVectors for Sq8Vectors<'_> {
    fn len(&self) -> usize {
        self.codes.len() / self.dim
    }

    #[inline]
    fn distance(&self, a: u32, b: u32) -> f32 {
        sq8_l2sq(self.row(a), self.row(b)) as f32 * self.scale
    }

    #[inline]
    fn prefetch(&self, i: u32) {
        prefetch(self.row(i), usize::MAX);
    }

    fn medoid(&self) -> u32 {
        let n = self.len();
        if n == 0 {
            return 0;
        }
        let sums = self
            .codes
            .par_chunks(self.dim * 4096)
            .map(|rows| {
                let mut sums = vec![0u64; self.dim];
                for row in rows.chunks_exact(self.dim) {
                    for (s, &c) in sums.iter_mut().zip(row) {
                        *s += c as u64;
                    }
                }
                sums
            })
            .reduce(
                || vec![0u64; self.dim],
                |mut a, b| {
                    a.iter_mut().zip(b).for_each(|(x, y)| *x += y);
                    a
                },
            );
        let mean: Vec<f32> = sums.iter().map(|&s| s as f32 / n as f32).collect();
        nearest(n, |i| {
            self.row(i as u32)
                .iter()
                .zip(&mean)
                .map(|(&c, &m)| (c as f32 - m) * (c as f32 - m))
                .sum()
        })
    }

    fn dim(&self) -> usize {
        self.dim
    }

    fn project(&self, i: u32, planes: &[f32], out: &mut [f32]) {
        // Widened once, then one SIMD dot product a plane.
        let row: Vec<f32> = self.row(i).iter().map(|&c| c as f32).collect();
        for (o, plane) in out.iter_mut().zip(planes.chunks_exact(self.dim)) {
            *o = dot(plane, &row);
        }
    }

    /// One exact integer Gram block (`Sq8Gram`): the same integers `sq8_l2sq` gives.
    fn pairwise(&self, rows: &[u32], buffers: &mut PairwiseBuffers, out: &mut Vec<f32>) {
        buffers.codes.clear();
        for &r in rows {
            buffers.codes.extend_from_slice(self.row(r));
        }
        buffers.gram.l2(&buffers.codes, self.dim, &mut buffers.sums);
        out.clear();
        out.extend(buffers.sums.iter().map(|&s| s as f32 * self.scale));
    }

    fn cross(&self, rows: &[u32], cols: &[u32], buffers: &mut PairwiseBuffers, out: &mut Vec<f32>) {
        let gather = |ids: &[u32], into: &mut Vec<u8>| {
            into.clear();
            ids.iter()
                .for_each(|&r| into.extend_from_slice(self.row(r)));
        };
        gather(rows, &mut buffers.codes);
        gather(cols, &mut buffers.col_codes);
        buffers.gram.l2_cross(
            &buffers.codes,
            &buffers.col_codes,
            self.dim,
            &mut buffers.sums,
        );
        out.clear();
        out.extend(buffers.sums.iter().map(|&s| s as f32 * self.scale));
    }
}

/// The index in 0..n with the smallest `distance` (the lower index on ties).
fn nearest(n: usize, distance: impl Fn(usize) -> f32 + Sync) -> u32 {
    (0..n)
        .into_par_iter()
        .map(|i| (distance(i), i as u32))
        .min_by(crate::by_distance)
        .map(|(_, i)| i)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use diskvec_vector::ScalarQuantizer8;

    #[test]
    fn codes_and_full_vectors_agree_on_distances_and_medoid() {
        let dim = 32;
        let data: Vec<f32> = (0..500 * dim)
            .map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5 + (i / dim) as f32 * 1e-3)
            .collect();
        let mut unit = data.clone();
        unit.chunks_exact_mut(dim)
            .for_each(|v| Metric::Cosine.prepare(v));
        for (metric, rows) in [(Metric::L2, &data), (Metric::Cosine, &unit)] {
            let full = FullVectors::new(rows, dim, metric);
            let sq = ScalarQuantizer8::train(rows, dim);
            let mut codes = Vec::new();
            sq.encode_rows(rows, &mut codes);
            let scale = Sq8Vectors::scale_for(metric, sq.l2_scale()).unwrap();
            let coded = Sq8Vectors::new(&codes, dim, scale);
            assert_eq!(coded.len(), 500);
            for (a, b) in [(0, 1), (3, 400), (17, 18), (250, 499)] {
                let (x, y) = (full.distance(a, b), coded.distance(a, b));
                assert!(
                    (x - y).abs() <= 0.02 * x.abs().max(1e-3),
                    "{metric}: {x} vs {y}"
                );
            }
            // The codes' medoid is (nearly) as close to the mean as the true one.
            let n = rows.len() / dim;
            let mut mean = vec![0f32; dim];
            for v in rows.chunks_exact(dim) {
                mean.iter_mut().zip(v).for_each(|(m, x)| *m += x / n as f32);
            }
            let to_mean = |i: u32| Metric::L2.distance(&mean, full.rows.get(i));
            let (m_full, m_coded) = (full.medoid(), coded.medoid());
            assert!(
                to_mean(m_coded) <= to_mean(m_full) * 1.05,
                "{metric}: medoid {m_coded} vs {m_full}"
            );
        }
        assert_eq!(Sq8Vectors::scale_for(Metric::InnerProduct, 1.0), None);
    }

    #[test]
    fn blocks_of_distances_equal_the_distances_pair_by_pair() {
        let dim = 40;
        let codes: Vec<u8> = (0..300 * dim).map(|i| ((i * 7919) % 251) as u8).collect();
        let coded = Sq8Vectors::new(&codes, dim, 0.25);
        let full_rows: Vec<f32> = codes.iter().map(|&c| c as f32).collect();
        let full = FullVectors::new(&full_rows, dim, Metric::L2);
        let (rows, cols): (Vec<u32>, Vec<u32>) =
            ((0..37).map(|i| i * 7).collect(), (3..12).collect());
        let mut buffers = PairwiseBuffers::default();
        let mut out = Vec::new();
        let by_pairs = |v: &dyn GraphVectors| -> Vec<f32> {
            rows.iter()
                .flat_map(|&r| cols.iter().map(move |&c| (r, c)))
                .map(|(r, c)| v.distance(r, c))
                .collect()
        };
        coded.cross(&rows, &cols, &mut buffers, &mut out);
        assert_eq!(out, by_pairs(&coded));
        full.cross(&rows, &cols, &mut buffers, &mut out);
        assert_eq!(out, by_pairs(&full));
    }
}
