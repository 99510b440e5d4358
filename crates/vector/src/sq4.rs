//! 4-bit scalar quantization: each dimension of a vector kept as one of 16 levels between a
//! per-dimension low and high bound. Half a byte per dimension (1/8 of the f32 vector), and
//! unlike PQ the estimate comes with a known error scale, so a search can tell which
//! candidates are surely in or surely out of its answer and read only the rest.
//!
//! Codes are laid out in blocks of 32 dimensions (16 bytes): byte `j` of a block holds
//! dimension `j` of the block in its low nibble and dimension `16 + j` in its high one, so
//! the distance loop reads both halves with plain contiguous loads.

use crate::column_bounds::clipped_bounds;
use crate::Metric;

/// Dimensions per code block.
const BLOCK: usize = 32;

/// Share of the values cut off at each end of a dimension's range when picking its bounds:
/// a few outliers would otherwise stretch every step of that dimension.
pub const SQ4_CLIP: f64 = 0.002;

#[derive(Clone, Debug, PartialEq)]
pub struct ScalarQuantizer4 {
    dim: usize,
    /// Lowest level of each dimension (padded to whole blocks with zeros).
    low: Vec<f32>,
    /// Distance between neighbouring levels of each dimension (padding: zero).
    step: Vec<f32>,
}

/// A query prepared for estimates against 4-bit codes.
#[derive(Clone, Debug, Default)]
pub struct Sq4Query {
    /// The query times each dimension's step, by dimension (zero in the padding).
    weights: Vec<f32>,
    /// The query's dot product with the lowest levels.
    base: f32,
    /// The query's squared norm (for L2).
    norm: f32,
    metric_code: u32,
    /// One standard deviation of the estimate's error.
    sigma: f32,
    kernel: Option<DotKernel>,
}

impl ScalarQuantizer4 {
    /// Picks each dimension's bounds from (a sample of) `data`, clipping `SQ4_CLIP` of the
    /// values at each end. No rows leave every bound at zero.
    pub fn train(data: &[f32], dim: usize) -> Self {
        let padded = dim.div_ceil(BLOCK) * BLOCK;
        let mut low = vec![0f32; padded];
        let mut step = vec![0f32; padded];
        for (d, (lo, hi)) in clipped_bounds(data, dim, SQ4_CLIP).into_iter().enumerate() {
            low[d] = lo;
            // In f64: the range of two finite f32 can exceed f32::MAX, a fifteenth of it not.
            step[d] = ((hi as f64 - lo as f64).max(0.0) / 15.0) as f32;
        }
        Self { dim, low, step }
    }

    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Bytes of one code.
    pub fn code_bytes(&self) -> usize {
        self.low.len() / 2
    }

    /// Writes the code of `v` into `out` (`code_bytes` long).
    pub fn encode(&self, v: &[f32], out: &mut [u8]) {
        assert_eq!(v.len(), self.dim);
        assert_eq!(out.len(), self.code_bytes());
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: AVX2 was just found on this CPU; the body touches memory through
            // safe slices alone.
            return unsafe { self.encode_avx2(v, out) };
        }
        self.encode_body(v, out);
    }

    /// The same loop compiled for AVX2, where rounding and the nibble packing vectorize
    /// (the portable build calls the C library's `roundf` once a dimension).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    fn encode_avx2(&self, v: &[f32], out: &mut [u8]) {
        self.encode_body(v, out);
    }

    /// A block's 32 levels at a time: dimension `j` of the block into the low nibble of
    /// byte `j`, dimension `16 + j` into its high one. Dimensions past `dim` (the padding)
    /// have a zero step and code 0.
    #[inline(always)]
    fn encode_body(&self, v: &[f32], out: &mut [u8]) {
        let level = |x: f32, low: f32, step: f32| -> u8 {
            if step > 0.0 {
                ((x - low) / step).round().clamp(0.0, 15.0) as u8
            } else {
                0
            }
        };
        let mut tail = [0f32; BLOCK];
        for (b, bytes) in out.chunks_exact_mut(BLOCK / 2).enumerate() {
            let at = b * BLOCK;
            let (low, step) = (&self.low[at..at + BLOCK], &self.step[at..at + BLOCK]);
            // The last block, when `dim` does not fill it, read from a zero-padded copy.
            let x: &[f32; BLOCK] = match v.get(at..at + BLOCK).and_then(|x| x.try_into().ok()) {
                Some(x) => x,
                None => {
                    tail[..v.len() - at].copy_from_slice(&v[at..]);
                    &tail
                }
            };
            for j in 0..BLOCK / 2 {
                let h = j + BLOCK / 2;
                bytes[j] = level(x[j], low[j], step[j]) | level(x[h], low[h], step[h]) << 4;
            }
        }
    }

    /// The vector a code stands for.
    pub fn decode(&self, code: &[u8]) -> Vec<f32> {
        let mut out = Vec::with_capacity(self.dim);
        self.decode_into(code, &mut out);
        out
    }

    /// Appends the vector a code stands for to `out`.
    pub fn decode_into(&self, code: &[u8], out: &mut Vec<f32>) {
        // A block at a time: its low nibbles are its first half, its high nibbles the
        // second, so each half is one pass the compiler vectorizes (a merge in shards
        // decodes every candidate of every seeded point: 75 million rows at 1M).
        let start = out.len();
        out.resize(start + self.dim, 0.0);
        let out = &mut out[start..];
        let half = BLOCK / 2;
        for (b, bytes) in code.chunks(half).enumerate() {
            let first = b * BLOCK;
            if first >= self.dim {
                break;
            }
            for (nibble, from) in [(0u32, first), (4, first + half)] {
                let to = (from + half).min(self.dim);
                if from >= to {
                    continue;
                }
                let (o, low, step) = (
                    &mut out[from..to],
                    &self.low[from..to],
                    &self.step[from..to],
                );
                for (((o, &l), &s), &byte) in o.iter_mut().zip(low).zip(step).zip(bytes) {
                    *o = l + s * ((byte >> nibble) & 15) as f32;
                }
            }
        }
    }

    /// Prepares `query` (already normalized for cosine) for estimates under `metric`.
    pub fn query_into(&self, query: &[f32], metric: Metric, out: &mut Sq4Query) {
        assert_eq!(query.len(), self.dim);
        out.weights.clear();
        out.weights.resize(self.low.len(), 0.0);
        let mut base = 0f32;
        let mut variance = 0f32;
        for (d, &q) in query.iter().enumerate() {
            out.weights[d] = q * self.step[d];
            base += q * self.low[d];
            // The rounding error of a level is spread evenly over one step: variance
            // step^2/12, so q·x's error has variance sum(q_d^2 step_d^2)/12.
            variance += q * q * self.step[d] * self.step[d] / 12.0;
        }
        out.base = base;
        out.norm = query.iter().map(|q| q * q).sum();
        out.metric_code = metric.code();
        out.kernel = Some(pick_kernel());
        out.sigma = match metric {
            Metric::L2 => 2.0 * variance.sqrt(),
            Metric::Cosine | Metric::InnerProduct => variance.sqrt(),
        };
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(8 + self.low.len() * 8);
        out.extend_from_slice(&(self.dim as u32).to_le_bytes());
        out.extend_from_slice(&(self.low.len() as u32).to_le_bytes());
        for v in self.low.iter().chain(&self.step) {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out
    }

    /// Reads what `to_bytes` wrote; `None` when the bytes are not a quantizer.
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        let word = |at: usize| -> Option<u32> {
            Some(u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
        };
        let dim = word(0)? as usize;
        let padded = word(4)? as usize;
        if dim == 0 || padded != dim.div_ceil(BLOCK) * BLOCK || bytes.len() != 8 + padded * 8 {
            return None;
        }
        let floats: Vec<f32> = bytes[8..]
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
            .collect();
        let (low, step) = floats.split_at(padded);
        let sane =
            step.iter().all(|s| s.is_finite() && *s >= 0.0) && low.iter().all(|l| l.is_finite());
        sane.then(|| Self {
            dim,
            low: low.to_vec(),
            step: step.to_vec(),
        })
    }
}

impl Sq4Query {
    /// One standard deviation of an estimate's error for this query.
    pub fn sigma(&self) -> f32 {
        self.sigma
    }

    /// Estimated distance to the vector with `code`; `norm` is that vector's squared norm
    /// (used by L2 only).
    #[inline]
    pub fn distance(&self, code: &[u8], norm: f32) -> f32 {
        let kernel = self
            .kernel
            .expect("a query prepared by ScalarQuantizer4::query_into");
        // SAFETY: `kernel` came from `pick_kernel`, which hands out a kernel only after
        // detecting the CPU features it needs; the kernels touch memory through safe
        // slices alone (bounds checked, the lengths asserted).
        let dot = self.base + unsafe { kernel(&self.weights, code) };
        match self.metric_code {
            0 => self.norm + norm - 2.0 * dot,
            1 => 1.0 - dot,
            _ => -dot,
        }
    }
}

/// sum(weights[d] * level[d]) over a code laid out in 32-dimension blocks. Unsafe to call:
/// a kernel may need CPU features, which `pick_kernel` checked before handing it out.
type DotKernel = unsafe fn(&[f32], &[u8]) -> f32;

/// The widest kernel this CPU runs (checked once per query, not per code).
fn pick_kernel() -> DotKernel {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            return dot4_avx512;
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            return dot4_avx2;
        }
    }
    dot4_portable
}

/// # Safety
/// None needed; unsafe only to share the kernels' pointer type.
unsafe fn dot4_portable(weights: &[f32], code: &[u8]) -> f32 {
    dot4_body(weights, code)
}

/// # Safety
/// The CPU must support AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn dot4_avx512(weights: &[f32], code: &[u8]) -> f32 {
    dot4_body(weights, code)
}

/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot4_avx2(weights: &[f32], code: &[u8]) -> f32 {
    dot4_body(weights, code)
}

/// Sixteen running sums, one per byte of a block: the compiler turns each block into a
/// few wide loads, nibble masks, conversions and multiply-adds.
#[inline(always)]
fn dot4_body(weights: &[f32], code: &[u8]) -> f32 {
    assert_eq!(
        weights.len(),
        code.len() * 2,
        "4-bit code of the wrong length"
    );
    let mut acc = [0f32; BLOCK / 2];
    for (w, c) in weights
        .chunks_exact(BLOCK)
        .zip(code.chunks_exact(BLOCK / 2))
    {
        let (w_low, w_high) = w.split_at(BLOCK / 2);
        for j in 0..BLOCK / 2 {
            acc[j] += w_low[j] * (c[j] & 15) as f32 + w_high[j] * (c[j] >> 4) as f32;
        }
    }
    acc.iter().sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The per-dimension packing the block loop replaced: codes must not change.
    fn encode_by_dimension(sq: &ScalarQuantizer4, v: &[f32]) -> Vec<u8> {
        let mut out = vec![0u8; sq.code_bytes()];
        for (d, &x) in v.iter().enumerate() {
            let level = if sq.step[d] > 0.0 {
                ((x - sq.low[d]) / sq.step[d]).round().clamp(0.0, 15.0) as u8
            } else {
                0
            };
            let (block, within) = (d / BLOCK, d % BLOCK);
            let byte = block * BLOCK / 2 + within % (BLOCK / 2);
            out[byte] |= if within < BLOCK / 2 {
                level
            } else {
                level << 4
            };
        }
        out
    }

    #[test]
    fn codes_are_the_same_as_packed_a_dimension_at_a_time_at_every_dimension() {
        for dim in [1, 5, 31, 32, 33, 64, 100, 384, 768] {
            let train = data(200, dim, dim as u64);
            let sq = ScalarQuantizer4::train(&train, dim);
            // Rows beyond the trained bounds too (clamped), and exact level midpoints.
            let mut rows = data(50, dim, 99);
            rows.iter_mut().step_by(7).for_each(|x| *x *= 3.0);
            for v in rows.chunks_exact(dim) {
                let mut got = vec![0u8; sq.code_bytes()];
                sq.encode(v, &mut got);
                assert_eq!(got, encode_by_dimension(&sq, v), "dim {dim}");
                let mut portable = vec![0u8; sq.code_bytes()];
                sq.encode_body(v, &mut portable);
                assert_eq!(got, portable, "dim {dim}");
            }
        }
    }

    fn data(n: usize, dim: usize, seed: u64) -> Vec<f32> {
        let mut s = seed;
        (0..n * dim)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32) - 0.5
            })
            .collect()
    }

    #[test]
    fn a_decoded_vector_is_within_half_a_step_of_the_original_inside_the_bounds() {
        let dim = 40; // not a whole number of blocks
        let v = data(2000, dim, 1);
        let sq = ScalarQuantizer4::train(&v, dim);
        let mut code = vec![0u8; sq.code_bytes()];
        assert_eq!(code.len(), 32);
        for row in v.chunks_exact(dim).take(200) {
            sq.encode(row, &mut code);
            let back = sq.decode(&code);
            for d in 0..dim {
                let hi = sq.low[d] + 15.0 * sq.step[d];
                let x = row[d].clamp(sq.low[d], hi);
                assert!((back[d] - x).abs() <= sq.step[d] / 2.0 + 1e-6, "dim {d}");
            }
        }
    }

    #[test]
    fn estimates_match_the_decoded_vector_and_stay_near_the_truth() {
        let dim = 64;
        let v = data(3000, dim, 2);
        let sq = ScalarQuantizer4::train(&v, dim);
        let q: Vec<f32> = data(1, dim, 3);
        let mut code = vec![0u8; sq.code_bytes()];
        for metric in [Metric::L2, Metric::InnerProduct] {
            let mut prepared = Sq4Query::default();
            sq.query_into(&q, metric, &mut prepared);
            let mut errors = Vec::new();
            for row in v.chunks_exact(dim).take(500) {
                sq.encode(row, &mut code);
                let norm: f32 = row.iter().map(|x| x * x).sum();
                let estimate = prepared.distance(&code, norm);
                let decoded = sq.decode(&code);
                let dot: f32 = q.iter().zip(&decoded).map(|(a, b)| a * b).sum();
                let via_decoded = match metric {
                    Metric::L2 => prepared.norm + norm - 2.0 * dot,
                    _ => -dot,
                };
                assert!(
                    (estimate - via_decoded).abs() < 1e-4,
                    "{estimate} {via_decoded}"
                );
                errors.push(estimate - metric.distance(&q, row));
            }
            // The errors are spread about as sigma says (clipping makes a few larger).
            let rms = (errors.iter().map(|e| e * e).sum::<f32>() / errors.len() as f32).sqrt();
            let sigma = prepared.sigma();
            assert!(
                rms > 0.5 * sigma && rms < 2.0 * sigma,
                "rms {rms} sigma {sigma}"
            );
        }
    }

    #[test]
    fn every_kernel_this_cpu_runs_agrees_with_the_portable_one() {
        let dim = 96;
        let v = data(50, dim, 5);
        let sq = ScalarQuantizer4::train(&v, dim);
        let weights: Vec<f32> = data(1, sq.code_bytes() * 2, 6);
        let mut code = vec![0u8; sq.code_bytes()];
        sq.encode(&v[..dim], &mut code);
        // SAFETY: the portable kernel needs no CPU feature.
        let portable = unsafe { dot4_portable(&weights, &code) };
        // SAFETY: `pick_kernel` checked the features of what it returns.
        let picked = unsafe { pick_kernel()(&weights, &code) };
        assert!((portable - picked).abs() <= 1e-4 * portable.abs().max(1.0));
    }

    #[test]
    fn no_rows_and_huge_ranges_still_give_finite_bounds() {
        let empty = ScalarQuantizer4::train(&[], 8);
        assert_eq!(ScalarQuantizer4::from_bytes(&empty.to_bytes()), Some(empty));
        let wide = [f32::MAX, -f32::MAX, 1.0, 2.0];
        let sq = ScalarQuantizer4::train(&wide, 2);
        assert!(sq.step.iter().chain(&sq.low).all(|x| x.is_finite()));
        assert_eq!(ScalarQuantizer4::from_bytes(&sq.to_bytes()), Some(sq));
    }

    #[test]
    fn bytes_round_trip_and_garbage_is_refused() {
        let sq = ScalarQuantizer4::train(&data(500, 33, 4), 33);
        let bytes = sq.to_bytes();
        assert_eq!(ScalarQuantizer4::from_bytes(&bytes), Some(sq));
        assert_eq!(
            ScalarQuantizer4::from_bytes(&bytes[..bytes.len() - 1]),
            None
        );
        let mut bad = bytes.clone();
        bad[4] = 7; // padded length that does not match the dimension
        assert_eq!(ScalarQuantizer4::from_bytes(&bad), None);
        assert_eq!(ScalarQuantizer4::from_bytes(&[]), None);
    }
}
