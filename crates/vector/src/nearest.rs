//! The nearest of `k` centroids for many rows at once, ranked by |c|² - 2·x·c (|x-c|² less
//! the row's own |x|², which every centroid shares): the form of a matrix product. Four rows
//! are scored together, so each centroid value loaded into a register serves four rows, and
//! a subspace's table (256 centroids of a few dimensions: 8 KiB) stays in L1 while a block
//! of rows passes through it. PQ encoding and k-means assignment both run on it.
//!
//! Kernels are chosen at run time (AVX-512F, AVX2 with FMA, else portable); all compute
//! every score with the same fused multiply-adds in the same order, so they pick the same
//! centroids.

/// Rows scored together.
const ROWS: usize = 4;

/// Centroids a step of the AVX2 kernel scores per row: two 8-lane registers.
const BLOCK: usize = 16;

/// Centroids a step of the AVX-512 kernel scores per row: two 16-lane registers.
const BLOCK_512: usize = 32;

/// `k` centroids of one width, laid out by dimension (`by_dimension[d * k + c]` is
/// coordinate `d` of centroid `c`), with their squared norms.
pub(crate) struct Centroids<'a> {
    pub by_dimension: &'a [f32],
    pub norms: &'a [f32],
    pub k: usize,
}

/// |c|² of each of the `k` centroids of `by_dimension` (laid out by dimension).
pub(crate) fn centroid_norms(by_dimension: &[f32], k: usize) -> Vec<f32> {
    let mut norms = vec![0f32; k];
    for column in by_dimension.chunks_exact(k) {
        for (n, &c) in norms.iter_mut().zip(column) {
            *n = c.mul_add(c, *n);
        }
    }
    norms
}

/// For each of `count` rows (`row(i)`, as wide as the centroids), calls `found(i, c)` with
/// `c` the nearest centroid by squared L2, the first on ties of the scores. `scores` is
/// scratch, reused between calls.
pub(crate) fn nearest_rows<'r>(
    centroids: &Centroids,
    count: usize,
    row: impl Fn(usize) -> &'r [f32],
    scores: &mut Vec<f32>,
    mut found: impl FnMut(usize, usize),
) {
    let k = centroids.k;
    assert!(k > 0 && centroids.norms.len() == k, "centroid norms");
    scores.resize(ROWS * k, 0.0);
    let mut first = 0;
    while first < count {
        let take = (count - first).min(ROWS);
        // A short last group repeats its last row; those scores are not read.
        let rows: [&[f32]; ROWS] = std::array::from_fn(|r| row(first + r.min(take - 1)));
        let width = rows[0].len();
        assert!(
            rows.iter().all(|r| r.len() == width) && centroids.by_dimension.len() == width * k,
            "rows and centroids of different widths"
        );
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx512f") && k.is_multiple_of(BLOCK_512) {
            // SAFETY: AVX-512F was just found on this CPU; `x86::nearest_512` checks its
            // slices' sizes itself.
            let nearest = unsafe { x86::nearest_512(centroids, &rows) };
            for (r, &c) in nearest.iter().take(take).enumerate() {
                found(first + r, c);
            }
            first += take;
            continue;
        }
        score(centroids, &rows, scores);
        for (r, row_scores) in scores.chunks_exact(k).take(take).enumerate() {
            found(first + r, argmin(row_scores));
        }
        first += take;
    }
}

/// `scores[r * k + c]` = |c|² - 2·rows[r]·c, by the fastest kernel this CPU has (AVX-512
/// CPUs take `x86::nearest_512` instead, for k a multiple of 32).
fn score(centroids: &Centroids, rows: &[&[f32]; ROWS], scores: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        if centroids.k.is_multiple_of(BLOCK) {
            // SAFETY: AVX2 and FMA were just found on this CPU; `x86::score` checks its
            // slices' sizes itself.
            unsafe { x86::score(centroids, rows, scores) };
        } else {
            // SAFETY: as above; the portable loop compiled with FMA enabled.
            unsafe { score_portable_fma(centroids, rows, scores) };
        }
        return;
    }
    score_portable(centroids, rows, scores);
}

/// `first_min` by the fastest kernel this CPU has.
fn argmin(values: &[f32]) -> usize {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: AVX2 was just found on this CPU.
        return unsafe { x86::first_min(values) };
    }
    first_min(values)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn score_portable_fma(centroids: &Centroids, rows: &[&[f32]; ROWS], scores: &mut [f32]) {
    score_portable(centroids, rows, scores);
}

/// One fused multiply-add per row, dimension and centroid, dimensions in order: what each
/// lane of the AVX2 kernel does, so the two agree to the bit.
#[inline(always)]
fn score_portable(centroids: &Centroids, rows: &[&[f32]; ROWS], scores: &mut [f32]) {
    let k = centroids.k;
    for (row, acc) in rows.iter().zip(scores.chunks_exact_mut(k)) {
        acc.copy_from_slice(centroids.norms);
        for (&x, column) in row.iter().zip(centroids.by_dimension.chunks_exact(k)) {
            let m = -2.0 * x;
            for (a, &c) in acc.iter_mut().zip(column) {
                *a = m.mul_add(c, *a);
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{Centroids, BLOCK, BLOCK_512, ROWS};
    use std::arch::x86_64::*;

    /// `super::first_min` in two sweeps: the smallest value (`min` skips NaN: it keeps its
    /// second operand when either is NaN), then the first lane equal to it.
    #[target_feature(enable = "avx2")]
    pub(super) fn first_min(values: &[f32]) -> usize {
        let chunks = values.chunks_exact(8);
        let tail = chunks.remainder();
        let base = values.len() - tail.len();
        let mut best = _mm256_set1_ps(f32::INFINITY);
        for chunk in chunks.clone() {
            // SAFETY: `chunk` holds 8 floats.
            best = _mm256_min_ps(unsafe { _mm256_loadu_ps(chunk.as_ptr()) }, best);
        }
        let mut lanes = [0f32; 8];
        // SAFETY: `lanes` holds 8 floats.
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), best) };
        let least = lanes
            .iter()
            .chain(tail)
            .fold(f32::INFINITY, |m, &x| if x < m { x } else { m });
        if least == f32::INFINITY {
            // Every value is NaN or infinite: the first, as the portable scan.
            return 0;
        }
        let wanted = _mm256_set1_ps(least);
        for (i, chunk) in chunks.enumerate() {
            // SAFETY: `chunk` holds 8 floats.
            let equal =
                _mm256_cmp_ps::<_CMP_EQ_OQ>(unsafe { _mm256_loadu_ps(chunk.as_ptr()) }, wanted);
            let mask = _mm256_movemask_ps(equal);
            if mask != 0 {
                return i * 8 + mask.trailing_zeros() as usize;
            }
        }
        base + tail.iter().position(|&x| x == least).unwrap_or(0)
    }

    /// `score` for `k` a multiple of 16: per step of 16 centroids, 8 accumulators (4 rows x
    /// 2 registers) start at the norms and take one FMA per dimension.
    #[target_feature(enable = "avx2,fma")]
    pub(super) fn score(centroids: &Centroids, rows: &[&[f32]; ROWS], scores: &mut [f32]) {
        let k = centroids.k;
        let width = rows[0].len();
        assert!(
            k.is_multiple_of(BLOCK)
                && centroids.norms.len() == k
                && centroids.by_dimension.len() == width * k
                && rows.iter().all(|r| r.len() == width)
                && scores.len() >= ROWS * k
        );
        let (table, norms, out) = (
            centroids.by_dimension.as_ptr(),
            centroids.norms.as_ptr(),
            scores.as_mut_ptr(),
        );
        let mut c = 0;
        while c < k {
            // SAFETY: c + 16 ≤ k (k is a multiple of 16), so norms[c..c+16] is inside
            // `norms` (k long), table[d*k + c..+16] inside `by_dimension` (width x k) for
            // d < width, and out[r*k + c..+16] inside `scores` (≥ 4k) for r < 4; rows[r][d]
            // is read through a checked index.
            unsafe {
                let n0 = _mm256_loadu_ps(norms.add(c));
                let n1 = _mm256_loadu_ps(norms.add(c + 8));
                let mut acc = [[n0, n1]; ROWS];
                for d in 0..width {
                    let column = table.add(d * k + c);
                    let (c0, c1) = (_mm256_loadu_ps(column), _mm256_loadu_ps(column.add(8)));
                    for (a, row) in acc.iter_mut().zip(rows) {
                        let m = _mm256_set1_ps(-2.0 * row[d]);
                        a[0] = _mm256_fmadd_ps(m, c0, a[0]);
                        a[1] = _mm256_fmadd_ps(m, c1, a[1]);
                    }
                }
                for (r, a) in acc.iter().enumerate() {
                    _mm256_storeu_ps(out.add(r * k + c), a[0]);
                    _mm256_storeu_ps(out.add(r * k + c + 8), a[1]);
                }
            }
            c += BLOCK;
        }
    }

    /// The scores of centroids `c..c + 32` for each row: 8 accumulators (4 rows x 2
    /// registers) start at the norms and take one FMA per dimension, in order.
    ///
    /// # Safety
    /// AVX-512F; `c + 32 <= k`, `norms` holds `k` values and `table` `rows[0].len() x k`.
    #[inline(always)]
    unsafe fn block_512(
        table: *const f32,
        norms: *const f32,
        k: usize,
        c: usize,
        rows: &[&[f32]; ROWS],
    ) -> [[__m512; 2]; ROWS] {
        // SAFETY: every load is inside `norms` and `table` (the caller's contract); rows
        // are read through checked indexes.
        unsafe {
            let n0 = _mm512_loadu_ps(norms.add(c));
            let n1 = _mm512_loadu_ps(norms.add(c + 16));
            let mut acc = [[n0, n1]; ROWS];
            for d in 0..rows[0].len() {
                let column = table.add(d * k + c);
                let (c0, c1) = (_mm512_loadu_ps(column), _mm512_loadu_ps(column.add(16)));
                for (a, row) in acc.iter_mut().zip(rows) {
                    let m = _mm512_set1_ps(-2.0 * row[d]);
                    a[0] = _mm512_fmadd_ps(m, c0, a[0]);
                    a[1] = _mm512_fmadd_ps(m, c1, a[1]);
                }
            }
            acc
        }
    }

    /// `score_512` and `first_min` of each row at once: each block's scores are compared
    /// with the row's best so far lane by lane (strictly less: a lane keeps its first
    /// minimum, and NaN never wins), then the lanes holding the least value give their
    /// smallest centroid. The same scores, so the same centroids as the two passes; the
    /// scores never leave registers.
    #[target_feature(enable = "avx512f")]
    pub(super) fn nearest_512(centroids: &Centroids, rows: &[&[f32]; ROWS]) -> [usize; ROWS] {
        let k = centroids.k;
        let width = rows[0].len();
        assert!(
            k.is_multiple_of(BLOCK_512)
                && centroids.norms.len() == k
                && centroids.by_dimension.len() == width * k
                && rows.iter().all(|r| r.len() == width)
                && k <= i32::MAX as usize
        );
        let (table, norms) = (centroids.by_dimension.as_ptr(), centroids.norms.as_ptr());
        let mut best = [_mm512_set1_ps(f32::INFINITY); ROWS];
        let mut at = [_mm512_setzero_si512(); ROWS];
        let lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        let mut c = 0;
        while c < k {
            // SAFETY: c + 32 ≤ k (k is a multiple of 32), so the loads of `block_512` are
            // inside `norms` and `by_dimension` (checked above); rows are read by index.
            unsafe {
                let acc = block_512(table, norms, k, c, rows);
                for (r, a) in acc.iter().enumerate() {
                    for (half, &scores) in a.iter().enumerate() {
                        let ids =
                            _mm512_add_epi32(lanes, _mm512_set1_epi32((c + 16 * half) as i32));
                        let better = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(scores, best[r]);
                        best[r] = _mm512_mask_blend_ps(better, best[r], scores);
                        at[r] = _mm512_mask_blend_epi32(better, at[r], ids);
                    }
                }
            }
            c += BLOCK_512;
        }
        let mut out = [0usize; ROWS];
        for (o, (b, a)) in out.iter_mut().zip(best.iter().zip(&at)) {
            let least = _mm512_reduce_min_ps(*b);
            if least == f32::INFINITY {
                // Every score is NaN or infinite: the first, as `first_min`.
                continue;
            }
            let holding = _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(*b, _mm512_set1_ps(least));
            let candidates = _mm512_mask_blend_epi32(holding, _mm512_set1_epi32(i32::MAX), *a);
            *o = _mm512_reduce_min_epi32(candidates) as usize;
        }
        out
    }
}

/// Position of the smallest value, the first one on ties; lane-wise so it vectorizes.
#[inline(always)]
pub(crate) fn first_min(values: &[f32]) -> usize {
    const LANES: usize = 8;
    let mut best = [f32::INFINITY; LANES];
    let mut at = [0u32; LANES];
    let chunks = values.chunks_exact(LANES);
    let tail = chunks.remainder();
    for (i, chunk) in chunks.enumerate() {
        for l in 0..LANES {
            if chunk[l] < best[l] {
                best[l] = chunk[l];
                at[l] = (i * LANES + l) as u32;
            }
        }
    }
    let mut winner = (f32::INFINITY, usize::MAX);
    for l in 0..LANES {
        let candidate = (best[l], at[l] as usize);
        if candidate.0 < winner.0 || (candidate.0 == winner.0 && candidate.1 < winner.1) {
            winner = candidate;
        }
    }
    let base = values.len() - tail.len();
    for (i, &x) in tail.iter().enumerate() {
        if x < winner.0 {
            winner = (x, base + i);
        }
    }
    if winner.1 == usize::MAX {
        // Every value is NaN or infinite: keep the first, as a plain scan would.
        0
    } else {
        winner.1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kmeans::transpose;
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    /// Every row's nearest through `nearest_rows`.
    fn batched(centroids: &[f32], k: usize, width: usize, rows: &[f32]) -> Vec<usize> {
        let by_dimension = transpose(centroids, k, width);
        let norms = centroid_norms(&by_dimension, k);
        let table = Centroids {
            by_dimension: &by_dimension,
            norms: &norms,
            k,
        };
        let count = rows.len() / width;
        let mut got = vec![usize::MAX; count];
        let mut scores = Vec::new();
        nearest_rows(
            &table,
            count,
            |i| &rows[i * width..(i + 1) * width],
            &mut scores,
            |i, c| got[i] = c,
        );
        got
    }

    fn l2(a: &[f32], b: &[f32]) -> f64 {
        a.iter()
            .zip(b)
            .map(|(x, y)| f64::from(x - y) * f64::from(x - y))
            .sum()
    }

    #[test]
    fn picks_a_centroid_as_near_as_the_nearest_for_every_row_count_and_width() {
        let mut rng = SmallRng::seed_from_u64(5);
        for (k, width, count) in [(256, 8, 37), (256, 3, 4), (48, 5, 1), (13, 4, 9), (1, 2, 3)] {
            let centroids: Vec<f32> = (0..k * width)
                .map(|_| rng.random_range(-1.0..1.0))
                .collect();
            let rows: Vec<f32> = (0..count * width)
                .map(|_| rng.random_range(-1.0..1.0))
                .collect();
            let got = batched(&centroids, k, width, &rows);
            for (i, &c) in got.iter().enumerate() {
                let x = &rows[i * width..(i + 1) * width];
                let best = centroids
                    .chunks_exact(width)
                    .map(|g| l2(g, x))
                    .fold(f64::INFINITY, f64::min);
                let picked = l2(&centroids[c * width..(c + 1) * width], x);
                // |c|² - 2x·c differs from |x-c|² by rounding only.
                assert!(
                    picked <= best + 1e-5,
                    "k={k} w={width} row {i}: {picked} vs {best}"
                );
            }
        }
    }

    #[test]
    fn every_kernel_picks_the_same_centroids_ties_included() {
        let mut rng = SmallRng::seed_from_u64(9);
        for (k, width) in [(256, 8), (32, 4), (16, 1)] {
            // Coarse values make exact ties common.
            let centroids: Vec<f32> = (0..k * width)
                .map(|_| rng.random_range(0..4) as f32)
                .collect();
            let rows: Vec<f32> = (0..64 * width)
                .map(|_| rng.random_range(0..4) as f32)
                .collect();
            let by_dimension = transpose(&centroids, k, width);
            let norms = centroid_norms(&by_dimension, k);
            let table = Centroids {
                by_dimension: &by_dimension,
                norms: &norms,
                k,
            };
            for group in rows.chunks_exact(ROWS * width) {
                let four: [&[f32]; ROWS] =
                    std::array::from_fn(|r| &group[r * width..(r + 1) * width]);
                let (mut fast, mut plain) = (vec![0f32; ROWS * k], vec![0f32; ROWS * k]);
                score(&table, &four, &mut fast);
                score_portable(&table, &four, &mut plain);
                assert_eq!(fast, plain, "k={k} width={width}");
                // The AVX2 kernel by name.
                #[cfg(target_arch = "x86_64")]
                if std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
                {
                    let mut narrow = vec![0f32; ROWS * k];
                    // SAFETY: AVX2 and FMA were just found; k is a multiple of 16.
                    unsafe { x86::score(&table, &four, &mut narrow) };
                    assert_eq!(narrow, plain, "avx2 k={k} width={width}");
                }
                // Ties resolve to the first: exact small integers leave no rounding.
                for (r, x) in four.iter().enumerate() {
                    let first_best = centroids
                        .chunks_exact(width)
                        .map(|g| l2(g, x))
                        .enumerate()
                        .fold(
                            (f64::INFINITY, 0),
                            |b, (c, d)| if d < b.0 { (d, c) } else { b },
                        )
                        .1;
                    assert_eq!(first_min(&plain[r * k..(r + 1) * k]), first_best);
                }
            }
        }
    }

    /// `nearest_rows` (on AVX-512, the fused kernel) picks what the portable scores and
    /// `first_min` pick, ties and NaN included, for every row count.
    #[test]
    fn nearest_rows_agrees_with_portable_scores_and_first_min() {
        let mut rng = SmallRng::seed_from_u64(12);
        for (k, width, count) in [(256, 8, 37), (32, 3, 5), (64, 1, 9), (96, 2, 4)] {
            let mut centroids: Vec<f32> = (0..k * width)
                .map(|_| rng.random_range(0..3) as f32)
                .collect();
            centroids[rng.random_range(0..k * width)] = f32::NAN;
            let rows: Vec<f32> = (0..count * width)
                .map(|_| rng.random_range(0..3) as f32)
                .collect();
            let by_dimension = transpose(&centroids, k, width);
            let norms = centroid_norms(&by_dimension, k);
            let table = Centroids {
                by_dimension: &by_dimension,
                norms: &norms,
                k,
            };
            let got = batched(&centroids, k, width, &rows);
            for (i, &c) in got.iter().enumerate() {
                let row = &rows[i * width..(i + 1) * width];
                let four = [row; ROWS];
                let mut plain = vec![0f32; ROWS * k];
                score_portable(&table, &four, &mut plain);
                assert_eq!(c, first_min(&plain[..k]), "k={k} width={width} row {i}");
            }
        }
    }

    #[test]
    fn first_min_keeps_the_first_of_equal_values_and_skips_nan() {
        assert_eq!(first_min(&[3.0, 1.0, 2.0, 1.0]), 1);
        let mut v = vec![5.0f32; 20];
        v[17] = 0.5;
        v[9] = 0.5;
        assert_eq!(first_min(&v), 9);
        assert_eq!(first_min(&[f32::NAN, f32::NAN]), 0);
        assert_eq!(first_min(&[f32::NAN, 2.0, 1.0]), 2);
    }

    #[test]
    fn every_argmin_kernel_agrees_with_the_portable_one() {
        let mut rng = SmallRng::seed_from_u64(4);
        for len in [1, 7, 8, 9, 16, 31, 256, 259] {
            for _ in 0..200 {
                let mut v: Vec<f32> = (0..len).map(|_| rng.random_range(0..6) as f32).collect();
                if rng.random_range(0..4) == 0 {
                    v[rng.random_range(0..len)] = f32::NAN;
                }
                if rng.random_range(0..8) == 0 {
                    v.iter_mut().for_each(|x| *x = f32::INFINITY);
                }
                assert_eq!(argmin(&v), first_min(&v), "{v:?}");
            }
        }
    }
}
