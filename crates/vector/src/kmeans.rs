use rand::rngs::SmallRng;
use rand::seq::index::sample;
use rand::{Rng, SeedableRng};
use rayon::prelude::*;

/// Lloyd's k-means under squared L2. `data` is row-major with `dim` columns.
/// Returns `k * dim` centroids. Deterministic for a given seed.
/// With fewer points than `k`, the missing centroids repeat existing points.
pub fn kmeans(data: &[f32], dim: usize, k: usize, iterations: usize, seed: u64) -> Vec<f32> {
    let n = data.len() / dim;
    assert!(n > 0 && k > 0, "kmeans needs points and k > 0");
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut centroids = vec![0f32; k * dim];
    let picks = sample(&mut rng, n, k.min(n)).into_vec();
    for c in 0..k {
        let p = picks[c % picks.len()];
        centroids[c * dim..(c + 1) * dim].copy_from_slice(&data[p * dim..(p + 1) * dim]);
    }
    if n <= k {
        return centroids;
    }
    let mut assign = vec![0u32; n];
    for _ in 0..iterations {
        let by_dimension = transpose(&centroids, k, dim);
        assign
            .par_chunks_mut(1024)
            .enumerate()
            .for_each(|(chunk, out)| {
                let mut scratch = vec![0f32; k];
                for (i, a) in out.iter_mut().enumerate() {
                    let p = chunk * 1024 + i;
                    let v = &data[p * dim..(p + 1) * dim];
                    *a = nearest_by_dimension(&by_dimension, k, v, &mut scratch) as u32;
                }
            });
        let mut sums = vec![0f64; k * dim];
        let mut counts = vec![0usize; k];
        for (p, &c) in assign.iter().enumerate() {
            let c = c as usize;
            counts[c] += 1;
            for (s, &x) in sums[c * dim..(c + 1) * dim]
                .iter_mut()
                .zip(&data[p * dim..(p + 1) * dim])
            {
                *s += x as f64;
            }
        }
        for c in 0..k {
            let centroid = &mut centroids[c * dim..(c + 1) * dim];
            if counts[c] == 0 {
                // An empty cluster restarts at a random point, which keeps all k in use.
                let p = rng.random_range(0..n);
                centroid.copy_from_slice(&data[p * dim..(p + 1) * dim]);
            } else {
                for (x, s) in centroid.iter_mut().zip(&sums[c * dim..(c + 1) * dim]) {
                    *x = (*s / counts[c] as f64) as f32;
                }
            }
        }
    }
    centroids
}

/// `centroids` (`k` rows of `dim`) laid out by dimension: `out[j * k + c]` is coordinate `j`
/// of centroid `c`.
pub(crate) fn transpose(centroids: &[f32], k: usize, dim: usize) -> Vec<f32> {
    let mut out = vec![0f32; k * dim];
    for (c, row) in centroids.chunks_exact(dim).enumerate() {
        for (j, &x) in row.iter().enumerate() {
            out[j * k + c] = x;
        }
    }
    out
}

/// Index of the centroid nearest to `v` (squared L2; the first one on ties), from centroids
/// laid out by dimension (see [`transpose`]). `scratch` holds at least `k` floats.
///
/// Why this layout: PQ subspaces have 1-8 dimensions, too short for a SIMD distance per
/// centroid, so the loop runs across centroids instead (contiguous, auto-vectorized), which
/// made PQ training about half of a DiskANN build's time before.
pub(crate) fn nearest_by_dimension(
    by_dimension: &[f32],
    k: usize,
    v: &[f32],
    scratch: &mut [f32],
) -> usize {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: `nearest_avx2` only requires the CPU to support AVX2, checked just above;
        // it touches memory through safe slices alone.
        return unsafe { nearest_avx2(by_dimension, k, v, scratch) };
    }
    nearest_body(by_dimension, k, v, scratch)
}

/// The same loop compiled for 8-wide vectors (the portable build targets 4-wide SSE2).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn nearest_avx2(by_dimension: &[f32], k: usize, v: &[f32], scratch: &mut [f32]) -> usize {
    nearest_body(by_dimension, k, v, scratch)
}

#[inline(always)]
fn nearest_body(by_dimension: &[f32], k: usize, v: &[f32], scratch: &mut [f32]) -> usize {
    let acc = &mut scratch[..k];
    acc.fill(0.0);
    for (j, &x) in v.iter().enumerate() {
        for (a, &c) in acc.iter_mut().zip(&by_dimension[j * k..(j + 1) * k]) {
            let d = x - c;
            *a += d * d;
        }
    }
    first_min(acc)
}

/// Position of the smallest value, the first one on ties; lane-wise so it vectorizes.
#[inline(always)]
fn first_min(values: &[f32]) -> usize {
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
    use crate::metric::l2sq_short;

    /// The plain scan the vectorized search replaces: first strict minimum.
    fn nearest_plain(centroids: &[f32], dim: usize, v: &[f32]) -> usize {
        let mut best = (f32::INFINITY, 0);
        for (c, centroid) in centroids.chunks_exact(dim).enumerate() {
            let d = l2sq_short(centroid, v);
            if d < best.0 {
                best = (d, c);
            }
        }
        best.1
    }

    #[test]
    fn nearest_by_dimension_agrees_with_a_plain_scan_ties_included() {
        let mut rng = SmallRng::seed_from_u64(3);
        for (k, dim) in [(256, 4), (256, 1), (13, 3), (5, 8), (1, 2), (300, 2)] {
            // Coarse values make exact ties common.
            let centroids: Vec<f32> = (0..k * dim)
                .map(|_| rng.random_range(0..4) as f32)
                .collect();
            let by_dimension = transpose(&centroids, k, dim);
            let mut scratch = vec![0f32; k];
            for _ in 0..200 {
                let v: Vec<f32> = (0..dim).map(|_| rng.random_range(0..4) as f32).collect();
                assert_eq!(
                    nearest_by_dimension(&by_dimension, k, &v, &mut scratch),
                    nearest_plain(&centroids, dim, &v),
                    "k={k} dim={dim} v={v:?}"
                );
            }
        }
    }

    #[test]
    fn finds_well_separated_clusters() {
        // Three tight blobs around known centres.
        let centres = [[0.0f32, 0.0], [10.0, 10.0], [-10.0, 5.0]];
        let mut rng = SmallRng::seed_from_u64(1);
        let mut data = Vec::new();
        for i in 0..300 {
            let c = centres[i % 3];
            data.push(c[0] + rng.random_range(-0.5..0.5));
            data.push(c[1] + rng.random_range(-0.5..0.5));
        }
        let got = kmeans(&data, 2, 3, 20, 7);
        for c in centres {
            let best = got
                .chunks_exact(2)
                .map(|g| l2sq_short(g, &c))
                .fold(f32::INFINITY, f32::min);
            assert!(best < 0.1, "no centroid near {c:?}: {got:?}");
        }
    }

    #[test]
    fn fewer_points_than_k_is_fine() {
        let got = kmeans(&[1.0, 2.0, 3.0, 4.0], 2, 5, 5, 0);
        assert_eq!(got.len(), 10);
    }
}
