//! 8-bit scalar quantization for building graphs: every dimension kept as one byte, on one
//! step size shared by all dimensions (each dimension centred on its own range).
//!
//! A graph build spends most of its time fetching vectors from DRAM at random; a byte per
//! dimension is a quarter of the f32 traffic, and one shared step lets the squared L2
//! distance be summed exactly in integers (`(a - b)²` over bytes, scaled once at the end).
//! Per-dimension steps would shrink the error of narrow dimensions, but those add little
//! to a distance; the shared step spreads the error evenly over dimensions, which is what
//! an L2 ranking wants.

/// Share of the values cut off at each end of a dimension's range before the widest range
/// sets the step: a few outliers would otherwise coarsen every dimension. Values beyond the
/// bounds are clamped.
const CLIP: f64 = 0.0005;

use crate::column_bounds::clipped_bounds;

#[derive(Clone, Debug, PartialEq)]
pub struct ScalarQuantizer8 {
    /// Value of level 0, by dimension.
    low: Vec<f32>,
    /// Distance between neighbouring levels, the same in every dimension.
    step: f32,
}

impl ScalarQuantizer8 {
    /// Picks the step and each dimension's lowest level from (a sample of) `data`.
    pub fn train(data: &[f32], dim: usize) -> Self {
        let bounds = clipped_bounds(data, dim, CLIP);
        let widest = bounds.iter().map(|(lo, hi)| hi - lo).fold(0f32, f32::max);
        let step = if widest > 0.0 { widest / 255.0 } else { 1.0 };
        // Each dimension centred on its own range: narrower ones keep headroom for values
        // the sample missed.
        let low = bounds
            .iter()
            .map(|(lo, hi)| (lo + hi) / 2.0 - 127.5 * step)
            .collect();
        Self { low, step }
    }

    pub fn dim(&self) -> usize {
        self.low.len()
    }

    /// What a sum of squared code differences is multiplied by to give squared L2.
    pub fn l2_scale(&self) -> f32 {
        self.step * self.step
    }

    /// Writes `v`'s code (`dim` bytes) to `out`.
    pub fn encode(&self, v: &[f32], out: &mut [u8]) {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: AVX2 was just found on this CPU; the body touches memory through
            // safe slices alone.
            return unsafe { self.encode_avx2(v, out) };
        }
        self.encode_body(v, out);
    }

    /// The same loop compiled for AVX2, where rounding vectorizes (the portable build calls
    /// the C library's `roundf` once a dimension).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    fn encode_avx2(&self, v: &[f32], out: &mut [u8]) {
        self.encode_body(v, out);
    }

    #[inline(always)]
    fn encode_body(&self, v: &[f32], out: &mut [u8]) {
        let inv = 1.0 / self.step;
        for ((o, &x), &low) in out.iter_mut().zip(v).zip(&self.low) {
            *o = ((x - low) * inv).round().clamp(0.0, 255.0) as u8;
        }
    }

    /// Appends the code of every row of `data` to `out`.
    pub fn encode_rows(&self, data: &[f32], out: &mut Vec<u8>) {
        let dim = self.dim();
        let first = out.len();
        out.resize(first + data.len(), 0);
        use rayon::prelude::*;
        out[first..]
            .par_chunks_mut(dim * 1024)
            .zip(data.par_chunks(dim * 1024))
            .for_each(|(codes, rows)| {
                for (code, row) in codes.chunks_exact_mut(dim).zip(rows.chunks_exact(dim)) {
                    self.encode(row, code);
                }
            });
    }

    /// The vector a code stands for.
    pub fn decode_into(&self, code: &[u8], out: &mut Vec<f32>) {
        out.clear();
        out.extend(
            code.iter()
                .zip(&self.low)
                .map(|(&c, &low)| low + c as f32 * self.step),
        );
    }
}

/// Σ (a-b)² over the common length of two codes, exact.
#[inline]
pub fn sq8_l2sq(a: &[u8], b: &[u8]) -> u64 {
    // A 32-bit sum holds 66,000 squared byte differences; longer codes go in pieces.
    const PIECE: usize = 32_768;
    if a.len().min(b.len()) > PIECE {
        return a
            .chunks(PIECE)
            .zip(b.chunks(PIECE))
            .map(|(x, y)| sq8_l2sq(x, y))
            .sum();
    }
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the function needs AVX2, just found on this CPU; it reads only inside
        // both slices (see `x86::l2sq`).
        return unsafe { x86::l2sq(a, b) } as u64;
    }
    scalar_l2sq(a, b) as u64
}

fn scalar_l2sq(a: &[u8], b: &[u8]) -> u32 {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| {
            let d = x as i32 - y as i32;
            (d * d) as u32
        })
        .sum()
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// Σ (a-b)² over the common length. Bytes are widened to 16 bits (differences fit in
    /// ±255) and `madd` sums squared pairs into 32-bit lanes. It loads `a[i..i + 16]` and
    /// `b[i..i + 16]` only while `i + 16 <= n`, `n` the shorter length; the tail is scalar
    /// with bounds checks, so no read leaves either slice. `loadu` needs no alignment.
    #[target_feature(enable = "avx2")]
    pub(super) fn l2sq(a: &[u8], b: &[u8]) -> u32 {
        let n = a.len().min(b.len());
        let (pa, pb) = (a.as_ptr(), b.as_ptr());
        let mut acc = [_mm256_setzero_si256(); 2];
        let mut i = 0;
        // SAFETY (all loads below): in bounds, as the function's comment says.
        unsafe {
            while i + 32 <= n {
                for (k, s) in acc.iter_mut().enumerate() {
                    let at = i + 16 * k;
                    let x = _mm256_cvtepu8_epi16(_mm_loadu_si128(pa.add(at).cast()));
                    let y = _mm256_cvtepu8_epi16(_mm_loadu_si128(pb.add(at).cast()));
                    let d = _mm256_sub_epi16(x, y);
                    *s = _mm256_add_epi32(*s, _mm256_madd_epi16(d, d));
                }
                i += 32;
            }
            while i + 16 <= n {
                let x = _mm256_cvtepu8_epi16(_mm_loadu_si128(pa.add(i).cast()));
                let y = _mm256_cvtepu8_epi16(_mm_loadu_si128(pb.add(i).cast()));
                let d = _mm256_sub_epi16(x, y);
                acc[0] = _mm256_add_epi32(acc[0], _mm256_madd_epi16(d, d));
                i += 16;
            }
        }
        let v = _mm256_add_epi32(acc[0], acc[1]);
        let h = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
        let h = _mm_add_epi32(h, _mm_shuffle_epi32::<0b01_00_11_10>(h));
        let h = _mm_add_epi32(h, _mm_shuffle_epi32::<0b10_11_00_01>(h));
        let mut sum = _mm_cvtsi128_si32(h) as u32;
        sum += super::scalar_l2sq(&a[i..n], &b[i..n]);
        sum
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    #[test]
    fn every_encoding_kernel_rounds_alike_halves_included() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(3);
        let dim = 77;
        let train: Vec<f32> = (0..dim * 100)
            .map(|_| rng.random_range(-1.0..1.0))
            .collect();
        let sq = ScalarQuantizer8::train(&train, dim);
        for _ in 0..200 {
            // Values on exact half steps (ties round away from zero) and beyond the bounds.
            let v: Vec<f32> = (0..dim)
                .map(|d| sq.low[d] + sq.step * (rng.random_range(-40..600) as f32 * 0.5))
                .collect();
            let (mut fast, mut portable) = (vec![0u8; dim], vec![0u8; dim]);
            sq.encode(&v, &mut fast);
            sq.encode_body(&v, &mut portable);
            let by_roundf: Vec<u8> = v
                .iter()
                .zip(&sq.low)
                .map(|(&x, &low)| ((x - low) * (1.0 / sq.step)).round().clamp(0.0, 255.0) as u8)
                .collect();
            assert_eq!(fast, portable);
            assert_eq!(fast, by_roundf);
        }
    }

    #[test]
    fn the_kernel_is_exact_at_every_length() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        let a: Vec<u8> = (0..1100).map(|_| rng.random()).collect();
        let b: Vec<u8> = (0..1100).map(|_| rng.random()).collect();
        for len in (0..80).chain([383, 384, 767, 768, 769, 1024]) {
            for offset in [0, 1, 5] {
                let (x, y) = (&a[offset..offset + len], &b[..len]);
                assert_eq!(sq8_l2sq(x, y), scalar_l2sq(x, y) as u64, "len {len}");
            }
        }
        let (zeros, full) = (vec![0u8; 768], vec![255u8; 768]);
        assert_eq!(sq8_l2sq(&zeros, &full), 768 * 255 * 255);
        // Past what one 32-bit sum holds.
        let (zeros, full) = (vec![0u8; 100_000], vec![255u8; 100_000]);
        assert_eq!(sq8_l2sq(&zeros, &full), 100_000 * 255 * 255);
    }

    #[test]
    fn codes_give_distances_close_to_the_true_ones() {
        let dim = 96;
        let mut rng = rand::rngs::SmallRng::seed_from_u64(3);
        // Dimensions of very different widths, and one outlier value.
        let mut data: Vec<f32> = (0..2000 * dim)
            .map(|i| rng.random_range(-1.0..1.0f32) * (1 + i % dim) as f32 / dim as f32)
            .collect();
        data[5] = 40.0;
        let sq = ScalarQuantizer8::train(&data, dim);
        let mut codes = Vec::new();
        sq.encode_rows(&data, &mut codes);
        assert_eq!(codes.len(), data.len());
        let mut worst = 0f32;
        for i in 1..200 {
            let (a, b) = (&data[..dim], &data[i * dim..(i + 1) * dim]);
            let exact: f32 = a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum();
            let approx =
                sq.l2_scale() * sq8_l2sq(&codes[..dim], &codes[i * dim..(i + 1) * dim]) as f32;
            // Row 0 holds the clamped outlier; leave its dimension out of the exact sum.
            let outlier = (data[5] - data[i * dim + 5]).powi(2);
            let clamped = {
                let mut v = Vec::new();
                sq.decode_into(&codes[..dim], &mut v);
                (v[5] - data[i * dim + 5]).powi(2)
            };
            let expected = exact - outlier + clamped;
            worst = worst.max((approx - expected).abs() / expected);
        }
        assert!(worst < 0.02, "worst relative error {worst}");
    }

    #[test]
    fn decoding_inverts_encoding_within_half_a_step() {
        let dim = 8;
        let data: Vec<f32> = (0..800)
            .map(|i| ((i * 37) % 101) as f32 / 50.0 - 1.0)
            .collect();
        let sq = ScalarQuantizer8::train(&data, dim);
        let mut code = vec![0u8; dim];
        let mut back = Vec::new();
        for row in data.chunks_exact(dim) {
            sq.encode(row, &mut code);
            sq.decode_into(&code, &mut back);
            for (x, y) in row.iter().zip(&back) {
                assert!((x - y).abs() <= sq.step * 0.5 + 1e-6, "{x} vs {y}");
            }
        }
    }
}
