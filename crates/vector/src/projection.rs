//! A projection onto the data's principal directions, for product quantization with few
//! code bytes: the directions that hold all but 1% of the variance are kept, and grouped so
//! that every subspace gets about the same share of it (the eigenvalue allocation of
//! optimized product quantization, Ge et al., CVPR 2013). Without it, 48 subspaces of 16
//! raw dimensions each spend their 256 centroids on a mixture of every latent direction and
//! resolve none of them.

use nalgebra::{DMatrix, SymmetricEigen};

use crate::kernels::dot;

/// Rows of the sample folded into the covariance at a time.
const CHUNK_ROWS: usize = 1024;

/// The share of the variance the kept directions hold: what is dropped shifts distances by
/// less than the codes' own error.
const KEPT_VARIANCE: f64 = 0.99;

/// Above this dimension no projection is trained: the eigendecomposition costs dim³ (about
/// a second at 768, tens of seconds at 2048) on every build that trains a codebook.
pub const MAX_PROJECTED_DIM: usize = 2048;

#[derive(Clone, Debug, PartialEq)]
pub struct Projection {
    /// Dimension of the vectors it takes.
    pub dim: usize,
    /// `rows` unit vectors of `dim` values, row after row: the principal directions kept,
    /// subspace by subspace.
    basis: Vec<f32>,
}

impl Projection {
    /// The principal directions of `sample` (rows of `dim` values) that hold
    /// `KEPT_VARIANCE` of its variance, as many as a multiple of `groups` (at least
    /// `groups`, at most `dim`), ordered into `groups` equal groups of about equal products
    /// of variance. `groups` must be between 1 and `dim`. `None` above `MAX_PROJECTED_DIM`,
    /// or when the covariance is not finite (an infinite value in the sample).
    pub fn train(sample: &[f32], dim: usize, groups: usize) -> Option<Self> {
        assert!(groups > 0 && groups <= dim);
        if dim > MAX_PROJECTED_DIM {
            return None;
        }
        let n = (sample.len() / dim).max(1);
        let mut mean = vec![0f64; dim];
        for v in sample.chunks_exact(dim) {
            for (m, &x) in mean.iter_mut().zip(v) {
                *m += f64::from(x);
            }
        }
        mean.iter_mut().for_each(|m| *m /= n as f64);
        // The covariance, a block of centred rows at a time (the sample itself is not
        // copied whole).
        let mut covariance = DMatrix::<f64>::zeros(dim, dim);
        for block in sample.chunks(CHUNK_ROWS * dim) {
            let r = block.len() / dim;
            let centred =
                DMatrix::<f64>::from_fn(r, dim, |i, j| f64::from(block[i * dim + j]) - mean[j]);
            covariance.gemm_tr(1.0 / n as f64, &centred, &centred, 1.0);
        }
        if covariance.iter().any(|x| !x.is_finite()) {
            return None;
        }
        let eigen = SymmetricEigen::new(covariance);
        if eigen.eigenvalues.iter().any(|x| !x.is_finite()) {
            return None;
        }
        let mut order: Vec<usize> = (0..dim).collect();
        order.sort_by(|&a, &b| eigen.eigenvalues[b].total_cmp(&eigen.eigenvalues[a]));
        let variance = |e: usize| eigen.eigenvalues[e].max(0.0);
        let total: f64 = order.iter().map(|&e| variance(e)).sum();
        let mut held = 0.0;
        let needed = order
            .iter()
            .position(|&e| {
                held += variance(e);
                held >= KEPT_VARIANCE * total
            })
            .map_or(dim, |i| i + 1);
        let width = needed.div_ceil(groups).clamp(1, dim / groups);
        let rows = width * groups;
        // Largest first, each into the group with room whose product of variances is
        // smallest. Variances are taken relative to the smallest one kept, so that every
        // factor is at least 1: below 1 (unit vectors' variances always are), a group's
        // product would shrink as it takes directions, and the first group would take
        // them all.
        let floor = variance(order[rows - 1]).max(1e-12 * total.max(f64::MIN_POSITIVE));
        let mut members: Vec<Vec<usize>> = vec![Vec::with_capacity(width); groups];
        let mut log_product = vec![0f64; groups];
        for &e in &order[..rows] {
            let g = (0..groups)
                .filter(|&g| members[g].len() < width)
                .min_by(|&a, &b| log_product[a].total_cmp(&log_product[b]))
                .expect("rows = groups x width leaves a group with room");
            members[g].push(e);
            log_product[g] += (variance(e).max(floor) / floor).ln();
        }
        let mut basis = Vec::with_capacity(rows * dim);
        for e in members.into_iter().flatten() {
            basis.extend(eigen.eigenvectors.column(e).iter().map(|&x| x as f32));
        }
        Some(Self { dim, basis })
    }

    /// The dimension of its output.
    pub fn rows(&self) -> usize {
        self.basis.len() / self.dim.max(1)
    }

    /// `v` (`dim` values) in the kept directions, into `out`.
    pub fn apply(&self, v: &[f32], out: &mut Vec<f32>) {
        out.clear();
        out.extend(self.basis.chunks_exact(self.dim).map(|row| dot(row, v)));
    }

    /// `apply` of every row of `data` (`dim` values each), into `out` row after row (each
    /// `rows()` long), with the same dot products. Basis row by basis row: one row (a few
    /// KiB) serves the whole block from L1, where a row at a time streamed the whole basis
    /// (up to 2.4 MiB at 768 dimensions, more than L2) once per row.
    pub fn apply_rows(&self, data: &[f32], out: &mut Vec<f32>) {
        let (count, rows) = (data.len() / self.dim.max(1), self.rows());
        out.clear();
        out.resize(count * rows, 0.0);
        for (r, basis_row) in self.basis.chunks_exact(self.dim).enumerate() {
            for (i, v) in data.chunks_exact(self.dim).enumerate() {
                out[i * rows + r] = dot(basis_row, v);
            }
        }
    }

    pub fn dram_bytes(&self) -> usize {
        4 * self.basis.len()
    }

    /// `rows u32`, then the basis (`rows x dim` f32, little endian).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = (self.rows() as u32).to_le_bytes().to_vec();
        for x in &self.basis {
            out.extend_from_slice(&x.to_le_bytes());
        }
        out
    }

    /// Parses a projection of `dim`-dimensional vectors from the start of `bytes`; returns
    /// it and the bytes it took, or `None` when they do not hold one (sizes are checked
    /// before anything is allocated).
    pub fn from_bytes(bytes: &[u8], dim: usize) -> Option<(Self, usize)> {
        let rows = u32::from_le_bytes(bytes.get(..4)?.try_into().ok()?) as usize;
        if rows == 0 || rows > dim {
            return None;
        }
        let len = rows.checked_mul(dim)?.checked_mul(4)?.checked_add(4)?;
        let basis = bytes
            .get(4..len)?
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        Some((Self { dim, basis }, len))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    /// Rows of `dim` values that vary along `latent` directions only (plus a little noise).
    fn low_rank(n: usize, dim: usize, latent: usize, seed: u64) -> Vec<f32> {
        let mut rng = SmallRng::seed_from_u64(seed);
        let map: Vec<f32> = (0..latent * dim)
            .map(|_| rng.random_range(-1.0..1.0))
            .collect();
        let mut out = Vec::with_capacity(n * dim);
        for _ in 0..n {
            let z: Vec<f32> = (0..latent)
                .map(|l| rng.random_range(-1.0..1.0) * (1.0 + l as f32))
                .collect();
            for d in 0..dim {
                let x: f32 = (0..latent).map(|l| z[l] * map[l * dim + d]).sum();
                out.push(x + rng.random_range(-0.01..0.01));
            }
        }
        out
    }

    #[test]
    fn a_block_of_rows_projects_to_what_each_row_projects_to() {
        let dim = 40;
        let data = low_rank(300, dim, 6, 2);
        let p = Projection::train(&data, dim, 3).unwrap();
        let mut block = Vec::new();
        p.apply_rows(&data[..37 * dim], &mut block);
        assert_eq!(block.len(), 37 * p.rows());
        let mut one = Vec::new();
        for (i, v) in data[..37 * dim].chunks_exact(dim).enumerate() {
            p.apply(v, &mut one);
            assert_eq!(
                &block[i * p.rows()..(i + 1) * p.rows()],
                &one[..],
                "row {i}"
            );
        }
    }

    #[test]
    fn keeps_the_directions_that_carry_the_variance_as_orthonormal_rows() {
        let (dim, latent) = (24, 4);
        let data = low_rank(2000, dim, latent, 1);
        // Four directions hold the variance: two per group of the two asked for.
        let p = Projection::train(&data, dim, 2).unwrap();
        assert_eq!(p.rows(), 4);
        // Asked for more groups than directions: one each.
        assert_eq!(Projection::train(&data, dim, 6).unwrap().rows(), 6);
        // Data of full rank keeps (almost) every dimension.
        let mut rng = SmallRng::seed_from_u64(5);
        let noise: Vec<f32> = (0..2000 * dim)
            .map(|_| rng.random_range(-1.0..1.0))
            .collect();
        assert!(Projection::train(&noise, dim, 2).unwrap().rows() >= 22);
        for i in 0..4 {
            for j in 0..4 {
                let d = dot(
                    &p.basis[i * dim..(i + 1) * dim],
                    &p.basis[j * dim..(j + 1) * dim],
                );
                let want = if i == j { 1.0 } else { 0.0 };
                assert!((d - want).abs() < 1e-3, "rows {i}, {j}: {d}");
            }
        }
        // The 4 latent directions hold all but the noise: differences between rows keep
        // their length through the projection.
        let mut out_a = Vec::new();
        let mut out_b = Vec::new();
        for i in 0..50 {
            let (a, b) = (
                &data[i * dim..(i + 1) * dim],
                &data[(i + 50) * dim..(i + 51) * dim],
            );
            p.apply(a, &mut out_a);
            p.apply(b, &mut out_b);
            let full: f32 = a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum();
            let kept: f32 = out_a
                .iter()
                .zip(&out_b)
                .map(|(x, y)| (x - y) * (x - y))
                .sum();
            assert!((kept / full) > 0.99, "{kept} of {full}");
        }
        // The strongest and the weakest direction share a group: the products balance.
        let spread: Vec<f32> = (0..4)
            .map(|r| {
                let row = &p.basis[r * dim..(r + 1) * dim];
                data.chunks_exact(dim)
                    .take(500)
                    .map(|v| dot(row, v).powi(2))
                    .sum()
            })
            .collect();
        let strongest = (0..4)
            .max_by(|&a, &b| spread[a].total_cmp(&spread[b]))
            .unwrap();
        let weakest = (0..4)
            .min_by(|&a, &b| spread[a].total_cmp(&spread[b]))
            .unwrap();
        assert_eq!(strongest / 2, weakest / 2, "{spread:?}");
        // Unit vectors (variances below 1): the groups still share the strong directions.
        let mut unit = low_rank(2000, dim, latent, 2);
        for v in unit.chunks_exact_mut(dim) {
            let norm = dot(v, v).sqrt();
            v.iter_mut().for_each(|x| *x /= norm);
        }
        let q = Projection::train(&unit, dim, 2).unwrap();
        let spread: Vec<f32> = (0..q.rows())
            .map(|r| {
                let row = &q.basis[r * dim..(r + 1) * dim];
                unit.chunks_exact(dim)
                    .take(500)
                    .map(|v| dot(row, v).powi(2))
                    .sum()
            })
            .collect();
        let w = q.rows() / 2;
        let strongest = (0..q.rows())
            .max_by(|&a, &b| spread[a].total_cmp(&spread[b]))
            .unwrap();
        let second = (0..q.rows())
            .filter(|&r| r != strongest)
            .max_by(|&a, &b| spread[a].total_cmp(&spread[b]))
            .unwrap();
        assert_ne!(strongest / w, second / w, "{spread:?}");
        // A covariance that is not finite (f32 values squared stay within f64; only values
        // that are infinite already get there): no projection.
        let mut wild = unit.clone();
        wild[7] = f32::INFINITY;
        assert!(Projection::train(&wild, dim, 2).is_none());
        let (back, used) = Projection::from_bytes(&p.to_bytes(), dim).unwrap();
        assert_eq!((back, used), (p.clone(), p.to_bytes().len()));
        assert!(Projection::from_bytes(&p.to_bytes()[..20], dim).is_none());
        assert!(Projection::from_bytes(&p.to_bytes(), 3).is_none());
    }
}
