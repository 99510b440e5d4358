//! Every pairwise squared L2 distance of a block of 8-bit codes, as one matrix product:
//! |a-b|² = |a|² + |b|² - 2·a·b, in exact integers (a·b ≤ dim·255², below 2^31 up to
//! 33,000 dimensions). A leaf of a partitioned build (a few hundred codes) gets all its
//! distances at once this way, each code loaded into registers once per tile of 2 x 4 pairs
//! (4 x 4 with AVX-512) instead of once per pair.
//!
//! The same tile serves a rectangular block (`l2_cross`): each point of a split against
//! its leaders.
//!
//! Kernels are chosen at run time by what the CPU has (AVX-512 with VNNI, AVX-512BW, AVX2,
//! else scalar); every kernel gives the same integers.

/// Which kernel `Sq8Gram` runs on this CPU.
pub fn gram_kernel() -> &'static str {
    kernel().name()
}

/// The Gram kernels, widest first.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Kernel {
    /// 16-bit products summed in pairs into 32-bit lanes by one instruction (`vpdpwssd`),
    /// 4 x 4 tiles of 32 values a step.
    Avx512Vnni,
    /// The same with `vpmaddwd` and an add.
    Avx512,
    /// 2 x 4 tiles of 16 values a step.
    Avx2,
    Scalar,
}

impl Default for Kernel {
    fn default() -> Self {
        kernel()
    }
}

impl Kernel {
    fn name(self) -> &'static str {
        match self {
            Kernel::Avx512Vnni => "avx512-vnni",
            Kernel::Avx512 => "avx512bw",
            Kernel::Avx2 => "avx2",
            Kernel::Scalar => "scalar",
        }
    }
}

/// The names of every Gram kernel this CPU can run, the one `Sq8Gram::new` picks first.
pub fn gram_kernels() -> Vec<&'static str> {
    available_kernels().into_iter().map(Kernel::name).collect()
}

/// Every kernel this CPU can run, widest first; the scalar one last.
fn available_kernels() -> Vec<Kernel> {
    let mut kernels = Vec::new();
    #[cfg(target_arch = "x86_64")]
    kernels.extend(x86::available().into_iter().map(|shape| shape.kernel));
    kernels.push(Kernel::Scalar);
    kernels
}

/// The widest kernel this CPU can run.
fn kernel() -> Kernel {
    available_kernels()[0]
}

/// Dimensions a 32-bit dot product of 8-bit codes holds exactly: dim·255² < 2^31.
pub const GRAM_MAX_DIM: usize = (i32::MAX as usize) / (255 * 255);

/// Reusable buffers for Gram blocks (one per thread).
#[derive(Default)]
pub struct Sq8Gram {
    /// The codes widened to 16 bits, rows padded with zeros to `stride` (a multiple of the
    /// kernel's step, 16 or 32 values) and to a multiple of 4 rows.
    widened: Vec<i16>,
    /// The second block of `l2_cross`, widened the same way.
    widened_cols: Vec<i16>,
    norms: Vec<u32>,
    col_norms: Vec<u32>,
    dots: Vec<i32>,
    kernel: Kernel,
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

    /// Buffers that run the kernel named `name` (one of `gram_kernels`), to compare them;
    /// `None` when this CPU cannot run it.
    pub fn with_kernel(name: &str) -> Option<Self> {
        let kernel = available_kernels().into_iter().find(|k| k.name() == name)?;
        Some(Self {
            kernel,
            ..Self::default()
        })
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
        if let Some(shape) = TileShape::of(self.kernel) {
            let stride = dim.next_multiple_of(shape.step);
            let padded_rows = count_rows.next_multiple_of(shape.rows);
            widen(rows, dim, stride, padded_rows, &mut self.widened);
            let padded_cols = count_cols.next_multiple_of(4);
            widen(cols, dim, stride, padded_cols, &mut self.widened_cols);
            // SAFETY: `TileShape::of` returned a shape only for a kernel this CPU has; the
            // blocks are padded to whole tiles (rows to `shape.rows`, columns to 4) of
            // `stride` values, a multiple of the kernel's step, and `dots` holds rows x
            // columns, as `x86::cross_dots` requires (and asserts).
            unsafe {
                x86::cross_dots(
                    shape,
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
        if let Some(shape) = TileShape::of(self.kernel) {
            let stride = dim.next_multiple_of(shape.step);
            let rows = count.next_multiple_of(4);
            widen(codes, dim, stride, rows, &mut self.widened);
            // SAFETY: as in `cross_products`: `widened` holds `rows` (a multiple of 4, of
            // the tile's rows too, ≥ count) rows of `stride` values and `dots` holds
            // count x count, as `x86::dots` requires (and asserts).
            unsafe { x86::dots(shape, &self.widened, stride, count, &mut self.dots) };
            return;
        }
        scalar_dots(codes, dim, count, &mut self.dots);
    }
}

/// A SIMD kernel's tile: `rows` x 4 dot products, `step` values of each row a step.
#[derive(Clone, Copy)]
struct TileShape {
    kernel: Kernel,
    rows: usize,
    step: usize,
}

impl TileShape {
    /// The shape of a SIMD kernel; `None` for the scalar one.
    fn of(kernel: Kernel) -> Option<TileShape> {
        let (rows, step) = match kernel {
            Kernel::Avx512Vnni | Kernel::Avx512 => (4, 32),
            Kernel::Avx2 => (2, 16),
            Kernel::Scalar => return None,
        };
        Some(TileShape { kernel, rows, step })
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
    use super::{Kernel, TileShape};
    use std::arch::x86_64::*;

    /// A tile's lane sums, at most 4 x 4 of them, row major (`rows` x 4 used).
    type Tile = [i32; 16];

    /// The tile of `shape` at rows `a` (each `stride` after the last) and columns `b`.
    ///
    /// # Safety
    /// The CPU must have `shape.kernel`; `a` must point at `shape.rows` rows and `b` at 4
    /// rows of `stride` readable i16 values each, `stride` a multiple of `shape.step`.
    unsafe fn tile(shape: TileShape, a: *const i16, b: *const i16, stride: usize) -> Tile {
        // SAFETY: passed on from the caller's contract.
        unsafe {
            match shape.kernel {
                Kernel::Avx512Vnni => tile_512_vnni(a, b, stride),
                Kernel::Avx512 => tile_512(a, b, stride),
                Kernel::Avx2 => tile_256(a, b, stride),
                Kernel::Scalar => unreachable!("the scalar kernel has no tiles"),
            }
        }
    }

    /// Dot products of every pair of the first `count` rows of `widened` (rows of `stride`
    /// i16 values; at least `count` rounded up to 4 rows) into `dots` (`count x count`).
    /// Tiles of `shape.rows` x 4 rows on and above the diagonal. Every load is at
    /// `row * stride + k` with `row` below the padded row count and `k + step <= stride`,
    /// inside `widened`; results outside `count` are dropped.
    ///
    /// # Safety
    /// The CPU must have `shape.kernel`.
    pub(super) unsafe fn dots(
        shape: TileShape,
        widened: &[i16],
        stride: usize,
        count: usize,
        dots: &mut [i32],
    ) {
        let rows = widened.len() / stride;
        assert!(
            stride.is_multiple_of(shape.step)
                && rows >= count.next_multiple_of(4)
                && dots.len() >= count * count
        );
        let base = widened.as_ptr();
        let mut i = 0;
        while i < count {
            // The tile's first column starts at the 4-aligned column at or below i.
            let mut j = i & !3;
            while j < count {
                // SAFETY: rows i..i+shape.rows (i is a multiple of shape.rows, 2 or 4, so
                // i + shape.rows ≤ count rounded up to 4 ≤ rows) and j..j+4 (j + 4 ≤
                // rows) are inside `widened`; the CPU has the kernel (our contract).
                let acc =
                    unsafe { tile(shape, base.add(i * stride), base.add(j * stride), stride) };
                for (t, &d) in acc.iter().enumerate().take(shape.rows * 4) {
                    let (r, c) = (i + t / 4, j + t % 4);
                    if r < count && c < count && c >= r {
                        dots[r * count + c] = d;
                        dots[c * count + r] = d;
                    }
                }
                j += 4;
            }
            i += shape.rows;
        }
    }

    /// Dot products of every row of `rows` (its first `count` rows padded to a multiple of
    /// `shape.rows`) with every row of `cols` (padded to a multiple of 4), both `stride`
    /// i16 values a row (a multiple of `shape.step`), into `dots` (`count x count_cols`,
    /// row major).
    ///
    /// # Safety
    /// The CPU must have `shape.kernel`.
    pub(super) unsafe fn cross_dots(
        shape: TileShape,
        (rows, count): (&[i16], usize),
        (cols, count_cols): (&[i16], usize),
        stride: usize,
        dots: &mut [i32],
    ) {
        assert!(
            stride.is_multiple_of(shape.step)
                && rows.len() >= count.next_multiple_of(shape.rows) * stride
                && cols.len() >= count_cols.next_multiple_of(4) * stride
                && dots.len() >= count * count_cols
        );
        let (a, b) = (rows.as_ptr(), cols.as_ptr());
        for i in (0..count).step_by(shape.rows) {
            for j in (0..count_cols).step_by(4) {
                // SAFETY: rows i..i+shape.rows are inside `rows` and columns j..j+4 inside
                // `cols` (both padded, checked above); the CPU has the kernel.
                let acc = unsafe { tile(shape, a.add(i * stride), b.add(j * stride), stride) };
                for (t, &d) in acc.iter().enumerate().take(shape.rows * 4) {
                    let (r, c) = (i + t / 4, j + t % 4);
                    if r < count && c < count_cols {
                        dots[r * count_cols + c] = d;
                    }
                }
            }
        }
    }

    /// The 2 x 4 tile of dot products of the two rows at `a` with the four at `b`: per 16
    /// values, 6 loads feed 8 `madd`s (i16 x i16 summed in pairs into i32: exact, as
    /// values are 0-255).
    ///
    /// # Safety
    /// AVX2; `a` must point at 2 rows and `b` at 4 rows of `stride` readable i16 values
    /// each, `stride` a multiple of 16.
    #[target_feature(enable = "avx2")]
    unsafe fn tile_256(a: *const i16, b: *const i16, stride: usize) -> Tile {
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
        let mut out = [0; 16];
        for (o, v) in out.iter_mut().zip(acc) {
            *o = hsum_256(v);
        }
        out
    }

    #[target_feature(enable = "avx2")]
    fn hsum_256(v: __m256i) -> i32 {
        let h = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
        let h = _mm_add_epi32(h, _mm_shuffle_epi32::<0b01_00_11_10>(h));
        let h = _mm_add_epi32(h, _mm_shuffle_epi32::<0b10_11_00_01>(h));
        _mm_cvtsi128_si32(h)
    }

    /// The 4 x 4 tile with 32 values a step: 8 loads feed 16 `vpdpwssd`s (16-bit
    /// products summed in pairs and added to 32-bit lanes in one instruction; exact, as
    /// values are 0-255 and a lane's sum stays below 2^31 up to `GRAM_MAX_DIM`).
    ///
    /// # Safety
    /// AVX-512F, BW and VNNI; `a` must point at 4 rows and `b` at 4 rows of `stride`
    /// readable i16 values each, `stride` a multiple of 32.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    unsafe fn tile_512_vnni(a: *const i16, b: *const i16, stride: usize) -> Tile {
        // SAFETY: the caller's contract is `tile_512_body`'s, VNNI included.
        unsafe { tile_512_body::<true>(a, b, stride) }
    }

    /// `tile_512_vnni` for AVX-512 CPUs without VNNI: `vpmaddwd`, then an add.
    ///
    /// # Safety
    /// AVX-512F and BW; the rows as for `tile_512_vnni`.
    #[target_feature(enable = "avx512f,avx512bw")]
    unsafe fn tile_512(a: *const i16, b: *const i16, stride: usize) -> Tile {
        // SAFETY: the caller's contract is `tile_512_body`'s without VNNI.
        unsafe { tile_512_body::<false>(a, b, stride) }
    }

    /// The body of both 512-bit tiles, inlined into each (so compiled with its features).
    ///
    /// # Safety
    /// AVX-512F and BW, and VNNI when `VNNI`; the rows as for `tile_512_vnni`.
    #[inline(always)]
    unsafe fn tile_512_body<const VNNI: bool>(a: *const i16, b: *const i16, stride: usize) -> Tile {
        let mut acc = [_mm512_setzero_si512(); 16];
        let mut k = 0;
        while k < stride {
            // SAFETY: k + 32 ≤ stride, the rows are readable and the CPU has the features
            // (the caller's contract).
            unsafe {
                let mut rows = [_mm512_setzero_si512(); 4];
                for (r, row) in rows.iter_mut().enumerate() {
                    *row = _mm512_loadu_si512(a.add(r * stride + k).cast());
                }
                for c in 0..4 {
                    let v = _mm512_loadu_si512(b.add(c * stride + k).cast());
                    for (r, row) in rows.iter().enumerate() {
                        let sum = &mut acc[r * 4 + c];
                        *sum = match VNNI {
                            true => _mm512_dpwssd_epi32(*sum, *row, v),
                            false => _mm512_add_epi32(*sum, _mm512_madd_epi16(*row, v)),
                        };
                    }
                }
            }
            k += 32;
        }
        let mut out = [0; 16];
        for (o, v) in out.iter_mut().zip(acc) {
            // SAFETY: AVX-512F (the caller's contract).
            *o = unsafe { _mm512_reduce_add_epi32(v) };
        }
        out
    }

    /// Every SIMD kernel this CPU has, widest first.
    pub(super) fn available() -> Vec<TileShape> {
        use std::arch::is_x86_feature_detected as has;
        let mut kernels = Vec::new();
        if has!("avx512f") && has!("avx512bw") {
            if has!("avx512vnni") {
                kernels.push(Kernel::Avx512Vnni);
            }
            kernels.push(Kernel::Avx512);
        }
        if has!("avx2") {
            kernels.push(Kernel::Avx2);
        }
        kernels.into_iter().filter_map(TileShape::of).collect()
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

    /// Every SIMD kernel this CPU has (not only the one chosen) gives the scalar integers,
    /// square and rectangular, for tails of tiles and of steps.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn every_simd_kernel_gives_the_scalar_dot_products() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(11);
        for shape in x86::available() {
            for (count, cols, dim) in [
                (1, 1, 8usize),
                (5, 3, 17),
                (33, 9, 96),
                (64, 70, 768),
                (9, 4, 1000),
            ] {
                let codes: Vec<u8> = (0..count * dim).map(|_| rng.random()).collect();
                let other: Vec<u8> = (0..cols * dim).map(|_| rng.random()).collect();
                let stride = dim.next_multiple_of(shape.step);
                let (mut a, mut b) = (Vec::new(), Vec::new());
                widen(&codes, dim, stride, count.next_multiple_of(4), &mut a);
                widen(&other, dim, stride, cols.next_multiple_of(4), &mut b);
                let mut got = vec![0i32; count * count];
                // SAFETY: `available` lists only kernels this CPU has.
                unsafe { x86::dots(shape, &a, stride, count, &mut got) };
                let mut want = vec![0i32; count * count];
                scalar_dots(&codes, dim, count, &mut want);
                assert_eq!(got, want, "{count} x {dim}");
                let mut cross = vec![0i32; count * cols];
                // SAFETY: as above.
                unsafe { x86::cross_dots(shape, (&a, count), (&b, cols), stride, &mut cross) };
                for i in 0..count {
                    for j in 0..cols {
                        let want = code_dot(&codes[i * dim..][..dim], &other[j * dim..][..dim]);
                        assert_eq!(cross[i * cols + j], want, "{count} x {cols} x {dim}");
                    }
                }
            }
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
