use rand::rngs::SmallRng;
use rand::seq::index::sample;
use rand::SeedableRng;
use rayon::prelude::*;

use crate::kmeans::kmeans;
use crate::nearest::{centroid_norms, nearest_rows, Centroids};
use crate::projection::Projection;

const CENTROIDS: usize = 256;

/// Lloyd iterations of each subspace's k-means. Measured on both shipped sets (with a
/// 16,384-row sample): 8 instead of 12 left recall@10 unchanged and recall@100 at L=100
/// within 0.002, at half of the training time, which is half of a small build's (a
/// database seal of 25,000 x 768: 4.1 s of PQ beside 3.7 s of graph).
const ITERATIONS: usize = 8;

/// Training rows that suffice for 256 centroids per subspace: 64 per centroid.
pub const PQ_TRAINING_ROWS: usize = 64 * CENTROIDS;

/// Product quantization: the vector is cut into `subspaces` contiguous pieces, each coded
/// by the nearest of 256 centroids, so a vector costs `subspaces` bytes in DRAM.
#[derive(Clone, Debug, PartialEq)]
pub struct ProductQuantizer {
    /// Dimension of the vectors it codes.
    pub dim: usize,
    /// Applied to every vector first (`train_projected`): the subspaces cut its output.
    projection: Option<Projection>,
    /// Start of each subspace in the (projected) vector; `offsets[subspaces]` is its width.
    offsets: Vec<usize>,
    /// Subspace by subspace, dimension-major: the 256 centroids' values of the subspace's
    /// first dimension, then of its second, ..., so building a query's table runs over 256
    /// centroids at once and vectorizes. Serialized centroid by centroid (`to_bytes`); only
    /// this form is held, so the codebook costs its size once in DRAM.
    transposed: Vec<f32>,
    /// |c|² of every centroid, subspace after subspace (256 each): derived from
    /// `transposed`, for encoding as a matrix product.
    norms: Vec<f32>,
    use_l2: bool,
}

/// Centroid-major (each centroid's values in a row) into dimension-major, per subspace.
fn transpose(offsets: &[usize], centroids: &[f32]) -> Vec<f32> {
    reorder(offsets, centroids, true)
}

/// Dimension-major back into centroid-major, per subspace.
fn untranspose(offsets: &[usize], transposed: &[f32]) -> Vec<f32> {
    reorder(offsets, transposed, false)
}

fn reorder(offsets: &[usize], from: &[f32], to_dimension_major: bool) -> Vec<f32> {
    let mut out = vec![0f32; from.len()];
    for m in 0..offsets.len() - 1 {
        let (lo, hi) = (offsets[m], offsets[m + 1]);
        let w = hi - lo;
        let src = &from[lo * CENTROIDS..hi * CENTROIDS];
        let dst = &mut out[lo * CENTROIDS..hi * CENTROIDS];
        for c in 0..CENTROIDS {
            for d in 0..w {
                let (centroid_major, dimension_major) = (c * w + d, d * CENTROIDS + c);
                if to_dimension_major {
                    dst[dimension_major] = src[centroid_major];
                } else {
                    dst[centroid_major] = src[dimension_major];
                }
            }
        }
    }
    out
}

/// `centroid_norms` of every subspace, in subspace order.
fn subspace_norms(offsets: &[usize], transposed: &[f32]) -> Vec<f32> {
    offsets
        .windows(2)
        .flat_map(|w| centroid_norms(&transposed[w[0] * CENTROIDS..w[1] * CENTROIDS], CENTROIDS))
        .collect()
}

/// Rows a worker of `encode_all` encodes at a time: a block of 768-d float rows (192 KiB)
/// stays in L2 while each subspace's table passes over it.
const ENCODE_BLOCK: usize = 64;

/// Distances from one query to every centroid of every subspace. A row holds all 256
/// centroids of a subspace, so every value a code byte can take indexes inside its row:
/// lookups need no bounds check and no `unsafe`. The default table is empty, for
/// `ProductQuantizer::table_into` to fill.
#[derive(Default)]
pub struct PqTable {
    values: Vec<[f32; CENTROIDS]>,
}

impl ProductQuantizer {
    /// Whether its tables hold squared-L2 distances (else -dot).
    pub fn uses_l2(&self) -> bool {
        self.use_l2
    }

    /// Trains on (a sample of at most `max_sample` rows of) `data`.
    /// `use_l2` picks squared-L2 tables; otherwise tables hold -dot.
    pub fn train(
        data: &[f32],
        dim: usize,
        subspaces: usize,
        use_l2: bool,
        max_sample: usize,
        seed: u64,
    ) -> Result<Self, String> {
        Self::train_holding_out(data, dim, subspaces, use_l2, max_sample, seed, 0).map(|(pq, _)| pq)
    }

    /// `train`, keeping up to `held_out` rows of `data` out of training (at most an eighth of
    /// the rows it draws) to measure how well the codebook fits rows it has not seen: the
    /// returned distortion (`distortion`), the figure a later build compares its own rows'
    /// fit with. Rows it trained on would not do: with few rows per centroid they fit their
    /// own codebook almost exactly.
    pub fn train_holding_out(
        data: &[f32],
        dim: usize,
        subspaces: usize,
        use_l2: bool,
        max_sample: usize,
        seed: u64,
        held_out: usize,
    ) -> Result<(Self, f64), String> {
        if subspaces == 0 || subspaces > dim {
            return Err(format!(
                "PQ needs between 1 and {dim} code bytes for {dim}-dimensional vectors, got {subspaces}"
            ));
        }
        let n = data.len() / dim;
        let mut rng = SmallRng::seed_from_u64(seed);
        let drawn = n.min(max_sample.max(1).saturating_add(held_out));
        let mut rows = sample(&mut rng, n, drawn).into_vec();
        let kept_back = held_out.min(drawn / 8);
        let test_rows = rows.split_off(rows.len() - kept_back);
        let offsets: Vec<usize> = (0..=subspaces)
            .map(|m| m * (dim / subspaces) + m.min(dim % subspaces))
            .collect();
        let blocks: Vec<Vec<f32>> = (0..subspaces)
            .into_par_iter()
            .map(|m| {
                let (lo, hi) = (offsets[m], offsets[m + 1]);
                let mut piece = Vec::with_capacity(rows.len() * (hi - lo));
                for &r in &rows {
                    piece.extend_from_slice(&data[r * dim + lo..r * dim + hi]);
                }
                kmeans(&piece, hi - lo, CENTROIDS, ITERATIONS, seed ^ m as u64)
            })
            .collect();
        let centroids = blocks.concat();
        let transposed = transpose(&offsets, &centroids);
        let pq = Self {
            dim,
            projection: None,
            norms: subspace_norms(&offsets, &transposed),
            transposed,
            offsets,
            use_l2,
        };
        let fit = pq.mean_distortion(data, test_rows.iter().copied());
        Ok((pq, fit))
    }

    /// `train` on the vectors' principal directions (those holding all but 1% of the
    /// variance), grouped by `Projection` so that the subspaces share the variance evenly:
    /// for few code bytes a vector (a tenth of a byte per dimension and less), where
    /// subspaces of raw dimensions resolve little. Queries and vectors go through the
    /// projection first.
    pub fn train_projected(
        data: &[f32],
        dim: usize,
        subspaces: usize,
        use_l2: bool,
        max_sample: usize,
        seed: u64,
    ) -> Result<Self, String> {
        if subspaces == 0 || subspaces > dim {
            return Err(format!(
                "PQ needs between 1 and {dim} code bytes for {dim}-dimensional vectors, got \
                 {subspaces}"
            ));
        }
        let n = data.len() / dim;
        let mut rng = SmallRng::seed_from_u64(seed);
        let picks = sample(&mut rng, n, n.min(max_sample.max(1))).into_vec();
        let mut drawn = Vec::with_capacity(picks.len() * dim);
        for &r in &picks {
            drawn.extend_from_slice(&data[r * dim..(r + 1) * dim]);
        }
        let Some(projection) = Projection::train(&drawn, dim, subspaces) else {
            // Too many dimensions to decompose, or values beyond f64: plain subspaces.
            return Self::train(data, dim, subspaces, use_l2, max_sample, seed);
        };
        let rows = projection.rows();
        let mut projected = Vec::with_capacity(picks.len() * rows);
        let mut out = Vec::with_capacity(rows);
        for v in drawn.chunks_exact(dim) {
            projection.apply(v, &mut out);
            projected.extend_from_slice(&out);
        }
        drop(drawn);
        let inner = Self::train(&projected, rows, subspaces, use_l2, usize::MAX, seed)?;
        Ok(Self {
            dim,
            projection: Some(projection),
            ..inner
        })
    }

    /// `v` through the projection, if any, then `f` of it.
    fn projected<R>(&self, v: &[f32], f: impl FnOnce(&[f32]) -> R) -> R {
        match &self.projection {
            None => f(v),
            Some(p) => {
                let mut out = Vec::with_capacity(p.rows());
                p.apply(v, &mut out);
                f(&out)
            }
        }
    }

    /// Bytes this quantizer holds in memory: the centroids, the offsets and the projection.
    pub fn dram_bytes(&self) -> usize {
        4 * (self.transposed.len() + self.norms.len())
            + std::mem::size_of::<usize>() * self.offsets.len()
            + self.projection.as_ref().map_or(0, Projection::dram_bytes)
    }

    pub fn code_bytes(&self) -> usize {
        self.offsets.len() - 1
    }

    #[cfg(test)]
    fn subspace_centroids(&self, m: usize) -> Vec<f32> {
        let (lo, hi) = (self.offsets[m], self.offsets[m + 1]);
        untranspose(&self.offsets, &self.transposed)[lo * CENTROIDS..hi * CENTROIDS].to_vec()
    }

    /// Writes the code of `v` into `out` (`code_bytes()` long).
    pub fn encode_into(&self, v: &[f32], out: &mut [u8]) {
        self.encode_rows(v, out);
    }

    /// The codes of the rows of `data` (row-major, `dim` columns) into `out`, row after
    /// row (`code_bytes()` each). Rows are encoded together, subspace by subspace, so each
    /// subspace's centroids are loaded once for the block: call it with blocks of rows.
    ///
    /// Panics when `data` is not whole rows or `out` is not one code per row.
    pub fn encode_rows(&self, data: &[f32], out: &mut [u8]) {
        assert_eq!(data.len() % self.dim, 0, "rows of {} values", self.dim);
        let rows = data.len() / self.dim;
        assert_eq!(out.len(), rows * self.code_bytes(), "one code a row");
        match &self.projection {
            None => self.encode_projected_rows(data, self.dim, out),
            Some(p) => {
                let mut projected = Vec::new();
                p.apply_rows(data, &mut projected);
                self.encode_projected_rows(&projected, p.rows(), out)
            }
        }
    }

    /// `encode_rows` of rows already projected (`width` values each).
    fn encode_projected_rows(&self, data: &[f32], width: usize, out: &mut [u8]) {
        let (rows, m) = (data.len() / width, self.code_bytes());
        let mut scores = Vec::new();
        for s in 0..m {
            let (lo, hi) = (self.offsets[s], self.offsets[s + 1]);
            let table = Centroids {
                by_dimension: &self.transposed[lo * CENTROIDS..hi * CENTROIDS],
                norms: &self.norms[s * CENTROIDS..(s + 1) * CENTROIDS],
                k: CENTROIDS,
            };
            nearest_rows(
                &table,
                rows,
                |r| &data[r * width + lo..r * width + hi],
                &mut scores,
                |r, c| out[r * m + s] = c as u8,
            );
        }
    }

    /// Mean squared distance between a row and its code's reconstruction, over at most
    /// `max_rows` rows of `data` spread evenly through it: how well this codebook fits
    /// those rows. A codebook trained on other rows fits these as well as rows held out of
    /// its training only when they come from the same distribution.
    pub fn distortion(&self, data: &[f32], max_rows: usize) -> f64 {
        let n = data.len() / self.dim;
        let take = n.min(max_rows);
        self.mean_distortion(data, (0..take).map(|i| i * n / take))
    }

    /// The mean squared reconstruction error of `rows` of `data` (0 for no row).
    fn mean_distortion(&self, data: &[f32], rows: impl Iterator<Item = usize>) -> f64 {
        let mut code = vec![0u8; self.code_bytes()];
        let (mut total, mut count) = (0f64, 0usize);
        for row in rows {
            let v = &data[row * self.dim..(row + 1) * self.dim];
            total += self.projected(v, |v| {
                self.encode_projected_rows(v, v.len(), &mut code);
                let mut sum = 0f64;
                for (m, &c) in code.iter().enumerate() {
                    let (lo, hi) = (self.offsets[m], self.offsets[m + 1]);
                    let block = &self.transposed[lo * CENTROIDS..hi * CENTROIDS];
                    for (d, &x) in v[lo..hi].iter().enumerate() {
                        let e = x - block[d * CENTROIDS + c as usize];
                        sum += f64::from(e * e);
                    }
                }
                sum
            });
            count += 1;
        }
        if count == 0 {
            0.0
        } else {
            total / count as f64
        }
    }

    /// Codes of every row of `data`, row after row.
    pub fn encode_all(&self, data: &[f32]) -> Vec<u8> {
        let m = self.code_bytes();
        let mut codes = vec![0u8; data.len() / self.dim * m];
        codes
            .par_chunks_mut(ENCODE_BLOCK * m)
            .zip(data.par_chunks(ENCODE_BLOCK * self.dim))
            .for_each(|(out, rows)| self.encode_rows(rows, out));
        codes
    }

    /// The lookup table for a prepared query.
    pub fn table(&self, query: &[f32]) -> PqTable {
        let mut table = PqTable { values: Vec::new() };
        self.table_into(query, &mut table);
        table
    }

    /// `table` into an existing one, reusing its allocation (a search makes one per query).
    pub fn table_into(&self, query: &[f32], table: &mut PqTable) {
        self.projected(query, |q| self.table_of_projected(q, table))
    }

    fn table_of_projected(&self, query: &[f32], table: &mut PqTable) {
        let values = &mut table.values;
        values.clear();
        values.resize(self.code_bytes(), [0f32; CENTROIDS]);
        for (m, out) in values.iter_mut().enumerate() {
            let (lo, hi) = (self.offsets[m], self.offsets[m + 1]);
            let columns = self.transposed[lo * CENTROIDS..hi * CENTROIDS].chunks_exact(CENTROIDS);
            for (&q, column) in query[lo..hi].iter().zip(columns) {
                let column: &[f32; CENTROIDS] = column.try_into().unwrap();
                if self.use_l2 {
                    for (o, c) in out.iter_mut().zip(column) {
                        *o += (q - c) * (q - c);
                    }
                } else {
                    for (o, c) in out.iter_mut().zip(column) {
                        *o -= q * c;
                    }
                }
            }
        }
    }

    /// Serialized form: dim, subspaces, flags (1: L2 tables; 2: projected), offsets, the
    /// projection when projected (`Projection::to_bytes`), centroids (little endian).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&(self.dim as u32).to_le_bytes());
        out.extend_from_slice(&(self.code_bytes() as u32).to_le_bytes());
        let flags = self.use_l2 as u32 | (self.projection.is_some() as u32) << 1;
        out.extend_from_slice(&flags.to_le_bytes());
        for &o in &self.offsets {
            out.extend_from_slice(&(o as u32).to_le_bytes());
        }
        if let Some(p) = &self.projection {
            out.extend_from_slice(&p.to_bytes());
        }
        for c in untranspose(&self.offsets, &self.transposed) {
            out.extend_from_slice(&c.to_le_bytes());
        }
        out
    }

    /// Parses `to_bytes` output; `None` when the bytes are not a consistent quantizer.
    /// The sizes are checked against `bytes.len()` before anything is allocated.
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        let word = |i: usize| -> Option<u32> {
            Some(u32::from_le_bytes(
                bytes.get(i * 4..i * 4 + 4)?.try_into().ok()?,
            ))
        };
        let dim = word(0)? as usize;
        let subspaces = word(1)? as usize;
        let flags = word(2)?;
        if flags > 3 || subspaces == 0 || subspaces > dim {
            return None;
        }
        let use_l2 = flags & 1 == 1;
        let mut start = (4 + subspaces) * 4;
        let projection = if flags & 2 == 2 {
            let (p, used) = Projection::from_bytes(bytes.get(start..)?, dim)?;
            start += used;
            Some(p)
        } else {
            None
        };
        let width = projection.as_ref().map_or(dim, Projection::rows);
        if subspaces > width {
            return None;
        }
        let floats = width.checked_mul(CENTROIDS)?;
        if Some(bytes.len()) != floats.checked_mul(4).and_then(|b| b.checked_add(start)) {
            return None;
        }
        let offsets: Vec<usize> = (0..=subspaces)
            .map(|m| word(3 + m).map(|o| o as usize))
            .collect::<Option<_>>()?;
        if offsets[0] != 0
            || offsets[subspaces] != width
            || offsets.windows(2).any(|w| w[0] >= w[1])
        {
            return None;
        }
        let centroids: Vec<f32> = bytes[start..]
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        let transposed = transpose(&offsets, &centroids);
        Some(Self {
            dim,
            projection,
            norms: subspace_norms(&offsets, &transposed),
            transposed,
            offsets,
            use_l2,
        })
    }
}

impl PqTable {
    /// Hints the CPU to fetch `code` into cache; a search calls this for a whole neighbour
    /// list before computing any of its distances, so the cache misses overlap.
    #[inline]
    pub fn prefetch(code: &[u8]) {
        crate::prefetch(code, usize::MAX);
    }

    /// Approximate distance from the query to the vector with this code.
    ///
    /// Panics when `code` is not one byte per subspace: a caller passing codes of another
    /// quantizer would otherwise get a quietly wrong distance.
    #[inline]
    pub fn distance(&self, code: &[u8]) -> f32 {
        assert_eq!(code.len(), self.values.len(), "PQ code of the wrong length");
        // Four running sums: with one, every add waits for the one before it. A u8 is below
        // 256, a row's length, so the compiler drops the bounds checks.
        let rows = self.values.chunks_exact(4);
        let codes = code.chunks_exact(4);
        let mut tail = 0f32;
        for (row, &c) in rows.remainder().iter().zip(codes.remainder()) {
            tail += row[c as usize];
        }
        let mut sums = [0f32; 4];
        for (r, c) in rows.zip(codes) {
            sums[0] += r[0][c[0] as usize];
            sums[1] += r[1][c[1] as usize];
            sums[2] += r[2][c[2] as usize];
            sums[3] += r[3][c[3] as usize];
        }
        (sums[0] + sums[1]) + (sums[2] + sums[3]) + tail
    }

    /// Distances of the codes of nodes `ids`, where node `i`'s code is
    /// `codes[i * code_bytes()..][..code_bytes()]`, into `out` (one per id).
    ///
    /// Eight codes at a time, subspace by subspace, with eight running sums in registers:
    /// the eight lookups of a subspace are independent, so their waits on the table (96 KiB
    /// at 384 dimensions, beyond L1) overlap, where one code at a time waits on each in turn.
    ///
    /// Panics when `out` and `ids` differ in length or a code lies beyond `codes`.
    pub fn distances(&self, codes: &[u8], ids: &[u32], out: &mut [f32]) {
        const BLOCK: usize = 8;
        assert_eq!(ids.len(), out.len(), "one distance per id");
        let m = self.values.len();
        let code = |id: u32| &codes[id as usize * m..(id as usize + 1) * m];
        let mut blocks = ids.chunks_exact(BLOCK);
        let mut outs = out.chunks_exact_mut(BLOCK);
        for (block, out) in (&mut blocks).zip(&mut outs) {
            let block: [&[u8]; BLOCK] = std::array::from_fn(|j| code(block[j]));
            let mut sums = [0f32; BLOCK];
            for (s, row) in self.values.iter().enumerate() {
                for j in 0..BLOCK {
                    sums[j] += row[block[j][s] as usize];
                }
            }
            out.copy_from_slice(&sums);
        }
        for (&id, o) in blocks.remainder().iter().zip(outs.into_remainder()) {
            *o = self.distance(code(id));
        }
    }

    /// Code bytes this table scores (one per subspace).
    pub fn code_bytes(&self) -> usize {
        self.values.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metric::l2sq_short;
    use rand::Rng;

    fn random_data(n: usize, dim: usize) -> Vec<f32> {
        let mut rng = SmallRng::seed_from_u64(3);
        (0..n * dim).map(|_| rng.random_range(-1.0..1.0)).collect()
    }

    /// Rows of `dim` values spread along `latent` random directions, plus a little noise.
    fn low_rank(n: usize, dim: usize, latent: usize) -> Vec<f32> {
        let mut rng = SmallRng::seed_from_u64(11);
        let map: Vec<f32> = (0..latent * dim)
            .map(|_| rng.random_range(-1.0..1.0))
            .collect();
        let mut out = Vec::with_capacity(n * dim);
        for _ in 0..n {
            let z: Vec<f32> = (0..latent).map(|_| rng.random_range(-1.0..1.0)).collect();
            for d in 0..dim {
                let x: f32 = (0..latent).map(|l| z[l] * map[l * dim + d]).sum();
                out.push(x + rng.random_range(-0.02..0.02));
            }
        }
        out
    }

    /// Recall@10 of ranking `data` by the codes' distances to each of `queries` rows.
    fn ranking_recall(pq: &ProductQuantizer, data: &[f32], queries: &[f32]) -> f64 {
        let dim = pq.dim;
        let codes = pq.encode_all(data);
        let m = pq.code_bytes();
        let mut found = 0;
        let queries: Vec<&[f32]> = queries.chunks_exact(dim).collect();
        for q in &queries {
            let table = pq.table(q);
            let top = |score: &dyn Fn(usize) -> f32| {
                let mut all: Vec<(f32, usize)> =
                    (0..data.len() / dim).map(|i| (score(i), i)).collect();
                all.sort_by(|a, b| a.0.total_cmp(&b.0));
                all.into_iter().take(10).map(|e| e.1).collect::<Vec<_>>()
            };
            let exact = top(&|i| l2sq_short(q, &data[i * dim..(i + 1) * dim]));
            let coded = top(&|i| table.distance(&codes[i * m..(i + 1) * m]));
            found += coded.iter().filter(|i| exact.contains(i)).count();
        }
        found as f64 / (10 * queries.len()) as f64
    }

    #[test]
    fn a_projected_codebook_ranks_low_rank_data_better_with_the_same_bytes() {
        let (dim, subspaces) = (96, 6);
        let data = low_rank(3000, dim, 12);
        let queries = low_rank(3040, dim, 12).split_off(3000 * dim);
        let plain = ProductQuantizer::train(&data, dim, subspaces, true, 3000, 1).unwrap();
        let projected =
            ProductQuantizer::train_projected(&data, dim, subspaces, true, 3000, 1).unwrap();
        assert_eq!(projected.code_bytes(), subspaces);
        let (r_plain, r_projected) = (
            ranking_recall(&plain, &data, &queries),
            ranking_recall(&projected, &data, &queries),
        );
        eprintln!("recall@10 by codes: projected {r_projected}, plain {r_plain}");
        assert!(
            r_projected > r_plain + 0.1,
            "recall@10 by codes: projected {r_projected}, plain {r_plain}"
        );
        let back = ProductQuantizer::from_bytes(&projected.to_bytes()).unwrap();
        assert_eq!(back, projected);
        assert_eq!(
            back.encode_all(&data[..dim * 5]),
            projected.encode_all(&data[..dim * 5])
        );
        assert!(ProductQuantizer::train_projected(&data, dim, 97, true, 3000, 1).is_err());
        // A projected codebook's bytes cut short, or with a bad flag, are refused.
        let bytes = projected.to_bytes();
        assert!(ProductQuantizer::from_bytes(&bytes[..bytes.len() - 4]).is_none());
        let mut flagged = bytes.clone();
        flagged[8] = 4;
        assert!(ProductQuantizer::from_bytes(&flagged).is_none());
    }

    #[test]
    fn distortion_tells_rows_of_the_training_distribution_from_shifted_ones() {
        let dim = 32;
        for rows in [600, 8000] {
            let trained_on = random_data(rows, dim);
            let (pq, held_out) =
                ProductQuantizer::train_holding_out(&trained_on, dim, 8, true, rows, 1, 2048)
                    .unwrap();
            let mut rng = SmallRng::seed_from_u64(11);
            let alike: Vec<f32> = (0..2000 * dim)
                .map(|_| rng.random_range(-1.0..1.0))
                .collect();
            let shifted: Vec<f32> = alike.iter().map(|x| x + 2.0).collect();
            let (alike, shifted) = (pq.distortion(&alike, 2048), pq.distortion(&shifted, 2048));
            assert!(held_out > 0.0);
            assert!(
                (alike / held_out - 1.0).abs() < 0.15,
                "{rows} rows: alike {alike} held out {held_out}"
            );
            assert!(
                shifted / held_out > 5.0,
                "{rows} rows: shifted {shifted} held out {held_out}"
            );
        }
    }

    #[test]
    fn table_distance_tracks_true_distance() {
        let dim = 16;
        let data = random_data(2000, dim);
        let pq = ProductQuantizer::train(&data, dim, 8, true, 2000, 1).unwrap();
        let codes = pq.encode_all(&data);
        let q = &data[..dim];
        let table = pq.table(q);
        // The approximate ranking must agree with the exact one far better than chance.
        let exact: Vec<f32> = data.chunks_exact(dim).map(|v| l2sq_short(q, v)).collect();
        let approx: Vec<f32> = codes.chunks_exact(8).map(|c| table.distance(c)).collect();
        let mut agree = 0;
        let mut total = 0;
        for i in (1..2000).step_by(7) {
            for j in (2..2000).step_by(13) {
                if (exact[i] - exact[j]).abs() > 1.0 {
                    total += 1;
                    agree += ((exact[i] < exact[j]) == (approx[i] < approx[j])) as usize;
                }
            }
        }
        assert!(agree as f64 / total as f64 > 0.9, "{agree}/{total}");
    }

    #[test]
    fn table_equals_a_direct_computation() {
        let dim = 10;
        let data = random_data(400, dim);
        for use_l2 in [true, false] {
            let pq = ProductQuantizer::train(&data, dim, 3, use_l2, 400, 2).unwrap();
            let q = &data[dim..2 * dim];
            let t = pq.table(q);
            for m in 0..3 {
                let (lo, hi) = (pq.offsets[m], pq.offsets[m + 1]);
                for (c, cent) in pq.subspace_centroids(m).chunks_exact(hi - lo).enumerate() {
                    let want = if use_l2 {
                        l2sq_short(&q[lo..hi], cent)
                    } else {
                        -q[lo..hi].iter().zip(cent).map(|(a, b)| a * b).sum::<f32>()
                    };
                    assert!((t.values[m][c] - want).abs() < 1e-4);
                }
            }
        }
    }

    #[test]
    fn uneven_subspaces_cover_every_dimension() {
        let dim = 10;
        let data = random_data(300, dim);
        let pq = ProductQuantizer::train(&data, dim, 3, false, 300, 1).unwrap();
        assert_eq!(pq.offsets, vec![0, 4, 7, 10]);
        assert_eq!(pq.encode_all(&data).len(), 900);
    }

    #[test]
    fn serialization_round_trips_and_rejects_garbage() {
        let dim = 8;
        let data = random_data(500, dim);
        let pq = ProductQuantizer::train(&data, dim, 4, true, 500, 1).unwrap();
        let bytes = pq.to_bytes();
        assert_eq!(
            pq.dram_bytes(),
            4 * 256 * (dim + 4) + std::mem::size_of::<usize>() * 5,
            "centroids, their norms (one per centroid of each of 4 subspaces), offsets"
        );
        let back = ProductQuantizer::from_bytes(&bytes).unwrap();
        assert_eq!(
            back.to_bytes(),
            bytes,
            "serialized centroid by centroid, as before"
        );
        assert_eq!(back, pq);
        assert_eq!(
            ProductQuantizer::from_bytes(&bytes[..bytes.len() - 1]),
            None
        );
        assert_eq!(ProductQuantizer::from_bytes(&[0u8; 8]), None);
    }

    #[test]
    fn batched_distances_match_one_at_a_time() {
        let data = random_data(500, 12);
        let pq = ProductQuantizer::train(&data, 12, 5, true, 500, 1).unwrap();
        let t = pq.table(&data[..12]);
        let codes: Vec<u8> = (0..30u8 * 5).map(|b| b.wrapping_mul(37)).collect();
        for n in [0, 1, 7, 8, 9, 17, 30] {
            let ids: Vec<u32> = (0..n as u32).map(|i| (i * 11) % 30).collect();
            let mut out = vec![f32::NAN; n];
            t.distances(&codes, &ids, &mut out);
            for (&id, d) in ids.iter().zip(&out) {
                let one = t.distance(&codes[id as usize * 5..][..5]);
                assert!((d - one).abs() < 1e-4, "{n} codes, id {id}: {d} vs {one}");
            }
        }
        let beyond = std::panic::catch_unwind(|| t.distances(&codes, &[30], &mut [0.0]));
        assert!(beyond.is_err(), "a code beyond the array is refused");
    }

    /// `distance` is safe, so it must be sound for any code: every byte value scores,
    /// and a code of the wrong length is refused rather than read past the table.
    #[test]
    fn distance_is_sound_for_every_code() {
        let data = random_data(300, 4);
        let pq = ProductQuantizer::train(&data, 4, 2, true, 300, 1).unwrap();
        let t = pq.table(&data[..4]);
        for b in 0..=255u8 {
            assert!(t.distance(&[b, 255 - b]).is_finite());
        }
        for len in [0, 1, 3, 1000] {
            let code = vec![255u8; len];
            assert!(std::panic::catch_unwind(|| t.distance(&code)).is_err());
        }
    }

    #[test]
    fn lying_sizes_are_refused_before_allocating() {
        let data = random_data(300, 4);
        let bytes = ProductQuantizer::train(&data, 4, 2, true, 300, 1)
            .unwrap()
            .to_bytes();
        for (at, v) in [(0, u32::MAX), (4, u32::MAX), (0, 1 << 30), (8, 2), (16, 9)] {
            let mut bad = bytes.clone();
            bad[at..at + 4].copy_from_slice(&v.to_le_bytes());
            assert_eq!(ProductQuantizer::from_bytes(&bad), None, "field {at} = {v}");
        }
    }

    #[test]
    fn refuses_impossible_code_sizes() {
        let data = random_data(10, 4);
        assert!(ProductQuantizer::train(&data, 4, 0, true, 10, 1).is_err());
        assert!(ProductQuantizer::train(&data, 4, 5, true, 10, 1).is_err());
    }
}
