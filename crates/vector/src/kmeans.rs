use rand::rngs::SmallRng;
use rand::seq::index::sample;
use rand::{Rng, SeedableRng};
use rayon::prelude::*;

use crate::nearest::{centroid_norms, nearest_rows, Centroids};

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
        let norms = centroid_norms(&by_dimension, k);
        let table = Centroids {
            by_dimension: &by_dimension,
            norms: &norms,
            k,
        };
        assign
            .par_chunks_mut(1024)
            .enumerate()
            .for_each(|(chunk, out)| {
                let first = chunk * 1024;
                let mut scores = Vec::new();
                nearest_rows(
                    &table,
                    out.len(),
                    |i| &data[(first + i) * dim..(first + i + 1) * dim],
                    &mut scores,
                    |i, c| out[i] = c as u32,
                );
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metric::l2sq_short;

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
