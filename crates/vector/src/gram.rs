//! Every pairwise squared L2 distance of a block of 8-bit codes, as one matrix product:
//! |a-b|² = |a|² + |b|² - 2·a·b, in exact integers (a·b ≤ dim·255², below 2^31 up to
//! 33,000 dimensions). A leaf of a partitioned build (a few hundred codes) gets all its
//! distances at once this way, each code loaded into registers once per tile of 2 x 4 pairs
//! instead of once per pair.
//!
//! The same tile serves a rectangular block (`l2_cross`): each point of a split against
//! its leaders.
//!
//! Kernels are chosen at run time by what the CPU has (AVX2, else scalar); every kernel
//! gives the same integers.

/// Which kernel `Sq8Gram` runs on this CPU.
pub fn gram_kernel() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        return "avx2";
    }
    "scalar"
}

/// Dimensions a 32-bit dot product of 8-bit codes holds exactly: dim·255² < 2^31.
pub const GRAM_MAX_DIM: usize = (i32::MAX as usize) / (255 * 255);

/// Reusable buffers for Gram blocks (one per thread).
#[derive(Default)]
pub struct Sq8Gram {
    /// The codes widened to 16 bits, rows padded with zeros to `stride` (a multiple of 16)
    /// and to a multiple of 4 rows.
    widened: Vec<i16>,
    /// The second block of `l2_cross`, widened the same way.
    widened_cols: Vec<i16>,
    norms: Vec<u32>,
    col_norms: Vec<u32>,
    dots: Vec<i32>,
}

/// Each code's sum of squares (`dim` bytes each), into `out`.
fn code_norms(codes: &[u8], dim: usize, out: &mut Vec<u32>) {
    out.clear();
    out.extend(
        codes
            .chunks_exact(dim)
            .map(|c| c.iter().map(|&x| x as u32 * x as u32).sum::<u32>()),
    );
}

/// `codes` (`dim` bytes each) widened into `out`: rows of `stride` i16 values, zero padded,
/// `rows` of them (at least as many as the codes).
fn widen(codes: &[u8], dim: usize, stride: usize, rows: usize, out: &mut Vec<i16>) {
    out.clear();
    out.resize(rows * stride, 0);
    for (row, code) in out.chunks_exact_mut(stride).zip(codes.chunks_exact(dim)) {
        for (w, &c) in row.iter_mut().zip(code) {
            *w = c as i16;
        }
    }
}

impl Sq8Gram {
    pub fn new() -> Self {
        Self::default()
    }

    /// The squared L2 distance between every pair of the `codes.len() / dim` codes (row
    /// major, `dim` bytes each) into `out`, row major, `count x count` (the diagonal 0).
    ///
    /// Panics when `dim` is 0 or above `GRAM_MAX_DIM`, or `codes` is not whole rows.
    pub fn l2(&mut self, codes: &[u8], dim: usize, out: &mut Vec<u32>) {
        assert!(dim > 0 && dim <= GRAM_MAX_DIM, "dimension {dim}");
        assert_eq!(codes.len() % dim, 0, "codes are not whole rows of {dim}");
        let count = codes.len() / dim;
        code_norms(codes, dim, &mut self.norms);
        self.dots.clear();
        self.dots.resize(count * count, 0);
        self.dot_products(codes, dim, count);
        out.clear();
        out.reserve(count * count);
        for (i, row) in self.dots.chunks_exact(count).enumerate() {
            let ni = self.norms[i];
            // |a-b|² ≥ 0 exactly, so the sum never wraps.
            out.extend(
                row.iter()
                    .zip(&self.norms)
                    .map(|(&dot, &nj)| (ni + nj).wrapping_sub(2 * dot as u32)),
            );
        }
    }

    /// The squared L2 distance from each of the `rows.len() / dim` codes of `rows` to each
    /// of the codes of `cols` into `out`, row major (`rows x cols`): the rectangular block
    /// of a partitioned build's points against its leaders. Exact, as `l2`.
    ///
    /// Panics as `l2` does, for either block.
    pub fn l2_cross(&mut self, rows: &[u8], cols: &[u8], dim: usize, out: &mut Vec<u32>) {
        assert!(dim > 0 && dim <= GRAM_MAX_DIM, "dimension {dim}");
        assert!(
            rows.len().is_multiple_of(dim) && cols.len().is_multiple_of(dim),
            "codes are not whole rows of {dim}"
        );
        let (count_rows, count_cols) = (rows.len() / dim, cols.len() / dim);
        code_norms(rows, dim, &mut self.norms);
        code_norms(cols, dim, &mut self.col_norms);
        self.dots.clear();
        self.dots.resize(count_rows * count_cols, 0);
        self.cross_products(rows, cols, dim);
        out.clear();
        out.reserve(count_rows * count_cols);
        for (row, &ni) in self.dots.chunks_exact(count_cols.max(1)).zip(&self.norms) {
            out.extend(
                row.iter()
                    .zip(&self.col_norms)
                    .map(|(&dot, &nj)| (ni + nj).wrapping_sub(2 * dot as u32)),
            );
        }
    }

    fn cross_products(&mut self, rows: &[u8], cols: &[u8], dim: usize) {
        let (count_rows, count_cols) = (rows.len() / dim, cols.len() / dim);
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            let stride = dim.next_multiple_of(16);
            widen(
                rows,
                dim,
                stride,
                count_rows.next_multiple_of(2),
                &mut self.widened,
            );
            widen(
                cols,
                dim,
                stride,
                count_cols.next_multiple_of(4),
                &mut self.widened_cols,
            );
            // SAFETY: AVX2 was just found on this CPU; the blocks are padded to whole tiles
            // (rows to 2, columns to 4) of `stride` values, a multiple of 16, and `dots`
            // holds rows x columns, as `x86::cross_dots` requires.
            unsafe {
                x86::cross_dots(
                    (&self.widened, count_rows),
                    (&self.widened_cols, count_cols),
                    stride,
                    &mut self.dots,
                )
            };
            return;
        }
        for (i, a) in rows.chunks_exact(dim).enumerate() {
            for (j, b) in cols.chunks_exact(dim).enumerate() {
                self.dots[i * count_cols + j] = code_dot(a, b);
            }
        }
    }

    fn dot_products(&mut self, codes: &[u8], dim: usize, count: usize) {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            let stride = dim.next_multiple_of(16);
            let rows = count.next_multiple_of(4);
            widen(codes, dim, stride, rows, &mut self.widened);
            // SAFETY: AVX2 was just found on this CPU; `widened` holds `rows` (a multiple
            // of 4, ≥ count) rows of `stride` (a multiple of 16) values and `dots` holds
            // count x count, as `x86::dots` requires.
            unsafe { x86::dots(&self.widened, stride, count, &mut self.dots) };
            return;
        }
        scalar_dots(codes, dim, count, &mut self.dots);
    }
}

/// The dot product of two codes, as the AVX2 tile sums it (exact below `GRAM_MAX_DIM`).
fn code_dot(a: &[u8], b: &[u8]) -> i32 {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| x as u32 * y as u32)
        .sum::<u32>() as i32
}

fn scalar_dots(codes: &[u8], dim: usize, count: usize, dots: &mut [i32]) {
    for i in 0..count {
        let a = &codes[i * dim..(i + 1) * dim];
        for j in i..count {
            let d = code_dot(a, &codes[j * dim..(j + 1) * dim]);
            dots[i * count + j] = d;
            dots[j * count + i] = d;
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// Dot products of every pair of the first `count` rows of `widened` (rows of `stride`
    /// i16 values, a multiple of 16; at least `count` rounded up to 4 rows) into `dots`
    /// (`count x count`). Tiles of 2 rows x 4 rows on and above the diagonal: per 16 values,
    /// 6 loads feed 8 `madd`s (i16 x i16 summed in pairs into i32: exact, as values are
    /// 0-255). Every load is at `row * stride + k` with `row` below the padded row count
    /// and `k + 16 <= stride`, inside `widened`; results outside `count` are dropped.
    #[target_feature(enable = "avx2")]
    pub(super) fn dots(widened: &[i16], stride: usize, count: usize, dots: &mut [i32]) {
        let rows = widened.len() / stride;
        assert!(
            stride.is_multiple_of(16)
                && rows >= count.next_multiple_of(4)
                && dots.len() >= count * count
        );
        let base = widened.as_ptr();
        let mut i = 0;
        while i < count {
            // The tile's first column starts at the 4-aligned column at or below i.
            let mut j = i & !3;
            while j < count {
                // SAFETY: rows i, i+1 (i+1 < rows: i < count ≤ rows and rows is a multiple
                // of 4 ≥ 2 when i is even, i steps by 2) and j..j+4 (j + 4 ≤ rows) are
                // inside `widened`.
                let acc = unsafe { tile(base.add(i * stride), base.add(j * stride), stride) };
                for (t, v) in acc.iter().enumerate() {
                    let (r, c) = (i + t / 4, j + t % 4);
                    if r < count && c < count && c >= r {
                        let d = hsum(*v);
                        dots[r * count + c] = d;
                        dots[c * count + r] = d;
                    }
                }
                j += 4;
            }
            i += 2;
        }
    }

    /// Dot products of every row of `rows` (its first `count` of rows padded to an even
    /// number) with every row of `cols` (padded to a multiple of 4), both `stride` i16
    /// values a row (a multiple of 16), into `dots` (`count x count_cols`, row major).
    #[target_feature(enable = "avx2")]
    pub(super) fn cross_dots(
        (rows, count): (&[i16], usize),
        (cols, count_cols): (&[i16], usize),
        stride: usize,
        dots: &mut [i32],
    ) {
        assert!(
            stride.is_multiple_of(16)
                && rows.len() >= count.next_multiple_of(2) * stride
                && cols.len() >= count_cols.next_multiple_of(4) * stride
                && dots.len() >= count * count_cols
        );
        let (a, b) = (rows.as_ptr(), cols.as_ptr());
        for i in (0..count).step_by(2) {
            for j in (0..count_cols).step_by(4) {
                // SAFETY: rows i, i+1 are inside `rows` (padded to an even count) and
                // columns j..j+4 inside `cols` (padded to a multiple of 4), checked above.
                let acc = unsafe { tile(a.add(i * stride), b.add(j * stride), stride) };
                for (t, v) in acc.iter().enumerate() {
                    let (r, c) = (i + t / 4, j + t % 4);
                    if r < count && c < count_cols {
                        dots[r * count_cols + c] = hsum(*v);
                    }
                }
            }
        }
    }

    /// The 2 x 4 tile of dot products of the two rows at `a` (the second `stride` after the
    /// first) with the four at `b`: per 16 values, 6 loads feed 8 `madd`s (i16 x i16 summed
    /// in pairs into i32: exact, as values are 0-255). Lane sums are left to `hsum`.
    ///
    /// # Safety
    /// `a` must point at 2 rows and `b` at 4 rows of `stride` readable i16 values each,
    /// `stride` a multiple of 16.
    #[target_feature(enable = "avx2")]
    unsafe fn tile(a: *const i16, b: *const i16, stride: usize) -> [__m256i; 8] {
        let mut acc = [_mm256_setzero_si256(); 8];
        let mut k = 0;
        while k < stride {
            // SAFETY: k + 16 ≤ stride, and the rows are readable (the caller's contract).
            unsafe {
                let a0 = _mm256_loadu_si256(a.add(k).cast());
                let a1 = _mm256_loadu_si256(a.add(stride + k).cast());
                for c in 0..4 {
                    let v = _mm256_loadu_si256(b.add(c * stride + k).cast());
                    acc[c] = _mm256_add_epi32(acc[c], _mm256_madd_epi16(a0, v));
                    acc[4 + c] = _mm256_add_epi32(acc[4 + c], _mm256_madd_epi16(a1, v));
                }
            }
            k += 16;
        }
        acc
    }

    #[target_feature(enable = "avx2")]
    fn hsum(v: __m256i) -> i32 {
        let h = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
        let h = _mm_add_epi32(h, _mm_shuffle_epi32::<0b01_00_11_10>(h));
        let h = _mm_add_epi32(h, _mm_shuffle_epi32::<0b10_11_00_01>(h));
        _mm_cvtsi128_si32(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    fn naive(codes: &[u8], dim: usize) -> Vec<u32> {
        let n = codes.len() / dim;
        let mut out = Vec::with_capacity(n * n);
        for i in 0..n {
            for j in 0..n {
                let (a, b) = (
                    &codes[i * dim..(i + 1) * dim],
                    &codes[j * dim..(j + 1) * dim],
                );
                out.push(
                    a.iter()
                        .zip(b)
                        .map(|(&x, &y)| (x as i64 - y as i64).pow(2) as u32)
                        .sum(),
                );
            }
        }
        out
    }

    /// Rectangular blocks are exact for every shape (tails of row pairs, of column quads and
    /// of vectors), and agree with the square block on a block against itself.
    #[test]
    fn cross_blocks_are_the_exact_distances_between_the_two_blocks() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(8);
        let mut gram = Sq8Gram::new();
        let (mut out, mut square) = (Vec::new(), Vec::new());
        for (rows, cols, dim) in [
            (1, 1, 8),
            (3, 5, 17),
            (64, 128, 768),
            (7, 2, 385),
            (2, 9, 1),
        ] {
            let a: Vec<u8> = (0..rows * dim).map(|_| rng.random()).collect();
            let b: Vec<u8> = (0..cols * dim).map(|_| rng.random()).collect();
            gram.l2_cross(&a, &b, dim, &mut out);
            let mut both = a.clone();
            both.extend_from_slice(&b);
            let all = naive(&both, dim);
            let n = rows + cols;
            let want: Vec<u32> = (0..rows)
                .flat_map(|i| (0..cols).map(move |j| (i, rows + j)))
                .map(|(i, j)| all[i * n + j])
                .collect();
            assert_eq!(out, want, "{rows} x {cols} x {dim} ({})", gram_kernel());
            gram.l2_cross(&a, &a, dim, &mut out);
            gram.l2(&a, dim, &mut square);
            assert_eq!(out, square, "{rows} x {rows} x {dim}");
        }
    }

    /// Every kernel gives the exact distances, for odd counts and dimensions (tails of both
    /// tiles and vectors), extreme values (0 against 255 in every dimension) and one code.
    #[test]
    fn gram_blocks_are_the_exact_pairwise_distances() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(5);
        let mut gram = Sq8Gram::new();
        let mut out = Vec::new();
        for (count, dim) in [
            (1, 8),
            (2, 3),
            (5, 17),
            (33, 96),
            (64, 768),
            (130, 385),
            (7, 1000),
        ] {
            let codes: Vec<u8> = (0..count * dim).map(|_| rng.random()).collect();
            gram.l2(&codes, dim, &mut out);
            assert_eq!(
                out,
                naive(&codes, dim),
                "{count} x {dim} ({})",
                gram_kernel()
            );
            let mut scalar = vec![0i32; count * count];
            scalar_dots(&codes, dim, count, &mut scalar);
            assert_eq!(&gram.dots, &scalar, "{count} x {dim}");
        }
        let dim = 768;
        let zeros_and_255s: Vec<u8> = (0..3 * dim)
            .map(|i| if i < dim { 0 } else { 255 })
            .collect();
        gram.l2_cross(&zeros_and_255s[..dim], &zeros_and_255s, dim, &mut out);
        assert_eq!(out, vec![0, 768 * 255 * 255, 768 * 255 * 255]);
        let codes: Vec<u8> = (0..3 * dim)
            .map(|i| if i < dim { 0 } else { 255 })
            .collect();
        gram.l2(&codes, dim, &mut out);
        assert_eq!(out[1], 768 * 255 * 255);
        assert_eq!(out[5], 0, "the two codes of 255s");
        assert!(out.iter().step_by(4).all(|&d| d == 0), "diagonal");
    }
}
