//! Synthetic datasets in VectorDBBench's layout, for scales the bundled real sets do not
//! reach. Vectors are clustered and of low intrinsic dimension, like text embeddings: a
//! point is a cluster centre plus spread in a `intrinsic_dim`-dimensional latent space,
//! lifted to `dim` dimensions by a fixed random map, plus a little full-dimensional noise,
//! then normalised (the metric is cosine). Rows are generated in seeded chunks, so the set
//! is the same for the same parameters whatever the thread count, and the exact ground
//! truth is computed one block of rows at a time within a memory budget.

use std::path::Path;

use anyhow::{ensure, Context};
use diskvec_dataset::{write_neighbors, write_vectors, Matrix, VectorWriter};
use diskvec_index::Progress;
use diskvec_vector::{ElementType, Metric};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::running_truth::RunningTruth;

/// What to generate. Written next to the data as `synthetic.json`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct SynthParams {
    pub n: usize,
    pub dim: usize,
    pub queries: usize,
    pub clusters: usize,
    pub intrinsic_dim: usize,
    /// Neighbours per query in the ground truth.
    pub k: usize,
    pub seed: u64,
    /// How the train vectors are stored: "float32" or "float16" (rounded after the
    /// normalization; the truth is of the rounded values). Queries stay float32.
    #[serde(default = "float32", skip_serializing_if = "is_float32")]
    pub dtype: String,
}

fn float32() -> String {
    ElementType::Float32.name().to_string()
}

fn is_float32(dtype: &String) -> bool {
    *dtype == float32()
}

impl Default for SynthParams {
    fn default() -> Self {
        Self {
            n: 100_000,
            dim: 768,
            queries: 1000,
            clusters: 1024,
            intrinsic_dim: 32,
            k: 100,
            seed: 42,
            dtype: float32(),
        }
    }
}

pub const SYNTH_FILE: &str = "synthetic.json";
const CHUNK_ROWS: usize = 4096;
/// Streams of the generator: the map and centres, train rows, test rows.
const MODEL_STREAM: u64 = 0;
const TRAIN_STREAM: u64 = 1;
const TEST_STREAM: u64 = 2;
/// Spread of a cluster relative to the spread of the centres, and the weight of the
/// full-dimensional noise: enough overlap that neighbours cross clusters.
const CLUSTER_SPREAD: f32 = 0.45;
const NOISE: f32 = 0.08;

/// The fixed parts of the generator: the latent-to-full map and the cluster centres.
pub struct Generator {
    p: SynthParams,
    /// `intrinsic_dim` rows of `dim` values.
    lift: Vec<f32>,
    /// `clusters` rows of `intrinsic_dim` values.
    centres: Vec<f32>,
}

fn gaussian(rng: &mut SmallRng) -> f32 {
    // Box-Muller; one of the pair is enough here.
    let u: f32 = rng.random::<f32>().max(f32::MIN_POSITIVE);
    let v: f32 = rng.random();
    (-2.0 * u.ln()).sqrt() * (std::f32::consts::TAU * v).cos()
}

fn stream_rng(seed: u64, stream: u64, chunk: u64) -> SmallRng {
    let mix = seed
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(stream.wrapping_mul(0xBF58_476D_1CE4_E5B9))
        .wrapping_add(chunk.wrapping_mul(0x94D0_49BB_1331_11EB));
    SmallRng::seed_from_u64(mix)
}

impl Generator {
    pub fn new(p: &SynthParams) -> anyhow::Result<Self> {
        ensure!(p.n > 0 && p.queries > 0, "n and queries must be at least 1");
        ensure!(p.dim >= 2, "dim must be at least 2");
        ensure!(
            p.intrinsic_dim >= 1 && p.intrinsic_dim <= p.dim,
            "intrinsic dimension must be between 1 and dim"
        );
        ensure!(p.clusters >= 1, "clusters must be at least 1");
        ensure!(p.k >= 1, "k must be at least 1");
        let mut rng = stream_rng(p.seed, MODEL_STREAM, 0);
        let scale = 1.0 / (p.intrinsic_dim as f32).sqrt();
        let lift = (0..p.intrinsic_dim * p.dim)
            .map(|_| gaussian(&mut rng) * scale)
            .collect();
        let centres = (0..p.clusters * p.intrinsic_dim)
            .map(|_| gaussian(&mut rng))
            .collect();
        Ok(Self {
            p: p.clone(),
            lift,
            centres,
        })
    }

    /// Rows `first..first + count` of a stream, row-major.
    fn rows(&self, stream: u64, first: usize, count: usize) -> Vec<f32> {
        assert!(
            first.is_multiple_of(CHUNK_ROWS),
            "blocks start at chunk boundaries"
        );
        let (dim, r) = (self.p.dim, self.p.intrinsic_dim);
        let mut out = vec![0f32; count * dim];
        out.par_chunks_mut(CHUNK_ROWS * dim)
            .enumerate()
            .for_each(|(c, chunk)| {
                let mut rng = stream_rng(self.p.seed, stream, (first / CHUNK_ROWS + c) as u64);
                let mut latent = vec![0f32; r];
                for row in chunk.chunks_exact_mut(dim) {
                    let cluster = rng.random_range(0..self.p.clusters);
                    let centre = &self.centres[cluster * r..(cluster + 1) * r];
                    for (l, c) in latent.iter_mut().zip(centre) {
                        *l = c + CLUSTER_SPREAD * gaussian(&mut rng);
                    }
                    for x in row.iter_mut() {
                        *x = NOISE * gaussian(&mut rng);
                    }
                    for (j, &l) in latent.iter().enumerate() {
                        let basis = &self.lift[j * dim..(j + 1) * dim];
                        for (x, b) in row.iter_mut().zip(basis) {
                            *x += l * b;
                        }
                    }
                    let norm = row.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
                    row.iter_mut().for_each(|x| *x /= norm);
                }
            });
        out
    }

    pub fn train_rows(&self, first: usize, count: usize) -> Vec<f32> {
        self.rows(TRAIN_STREAM, first, count)
    }

    pub fn test_rows(&self) -> Vec<f32> {
        self.rows(TEST_STREAM, 0, self.p.queries)
    }
}

/// Rows per block for a memory budget: a block's vectors must fit in it.
pub fn block_rows(dim: usize, budget_bytes: usize) -> usize {
    let rows = budget_bytes / (dim * 4);
    (rows / CHUNK_ROWS).max(1) * CHUNK_ROWS
}

/// Writes `train.parquet`, `test.parquet`, `neighbors.parquet` (exact, cosine) and
/// `synthetic.json` into `out`, holding at most about `budget_bytes` of train vectors at once.
pub fn write_synthetic(
    p: &SynthParams,
    out: &Path,
    budget_bytes: usize,
    progress: &dyn Progress,
) -> anyhow::Result<()> {
    let gen = Generator::new(p)?;
    let element: ElementType = p.dtype.parse().map_err(anyhow::Error::msg)?;
    ensure!(
        element != ElementType::Uint8,
        "synthetic vectors are unit vectors: float32 or float16, not uint8"
    );
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let metric = Metric::Cosine;
    let queries = gen.test_rows();
    let query_ids: Vec<i64> = (0..p.queries as i64).collect();
    write_vectors(
        &out.join("test.parquet"),
        &Matrix {
            data: queries.clone(),
            dim: p.dim,
            ids: query_ids.clone(),
        },
    )?;
    let block = block_rows(p.dim, budget_bytes);
    let mut truth = RunningTruth::new(queries, query_ids, p.dim, metric, p.k.min(p.n));
    let mut train = VectorWriter::create(&out.join("train.parquet"), p.dim, element)?;
    progress.phase("generate + truth", p.n as u64);
    let mut first = 0;
    while first < p.n {
        let count = block.min(p.n - first);
        let (ids, mut rows) = append_train_rows(&gen, element, &mut train, first, count)?;
        truth.add(&mut rows, &ids)?;
        progress.advance(count as u64);
        first += count;
    }
    train.finish()?;
    write_neighbors(&out.join("neighbors.parquet"), &truth.finish())?;
    write_synthetic_params(out, p)
}

/// Generates train rows `first..first + count`, rounds them to `element` and appends them
/// with their row numbers as ids; returns the ids and the rounded rows.
fn append_train_rows(
    gen: &Generator,
    element: ElementType,
    train: &mut VectorWriter,
    first: usize,
    count: usize,
) -> anyhow::Result<(Vec<i64>, Vec<f32>)> {
    let dim = gen.p.dim;
    let mut rows = gen.train_rows(first, count);
    // Unit vectors are within float16's range: an error here is a generator bug.
    element
        .round_in_place(&mut rows)
        .map_err(|e| anyhow::anyhow!("generated row {}: {e}", first + e.position / dim))?;
    let ids: Vec<i64> = (first as i64..(first + count) as i64).collect();
    train.append(&ids, &rows)?;
    Ok((ids, rows))
}

/// Writes `count` more train rows of the synthetic set `p` describes into `out/train.parquet`:
/// rows the set does not hold (the generator's rows from the first chunk after its `n`), from
/// the same clusters and map, with their row numbers as ids. No queries and no truth: they are
/// new points of the same distribution, for benchmarks that write into a loaded collection.
/// Returns the first row's number.
pub fn write_more_rows(
    p: &SynthParams,
    count: usize,
    out: &Path,
    budget_bytes: usize,
    progress: &dyn Progress,
) -> anyhow::Result<usize> {
    ensure!(count >= 1, "--n must be at least 1");
    let gen = Generator::new(p)?;
    let element: ElementType = p.dtype.parse().map_err(anyhow::Error::msg)?;
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let first_row = p.n.div_ceil(CHUNK_ROWS) * CHUNK_ROWS;
    let block = block_rows(p.dim, budget_bytes);
    let mut train = VectorWriter::create(&out.join("train.parquet"), p.dim, element)?;
    progress.phase("generate", count as u64);
    let mut done = 0;
    while done < count {
        let rows_now = block.min(count - done);
        append_train_rows(&gen, element, &mut train, first_row + done, rows_now)?;
        progress.advance(rows_now as u64);
        done += rows_now;
    }
    train.finish()?;
    Ok(first_row)
}

/// Writes `synthetic.json`: what a synthetic set in `out` was made with.
pub(crate) fn write_synthetic_params(out: &Path, p: &SynthParams) -> anyhow::Result<()> {
    let meta = serde_json::to_string_pretty(p)? + "\n";
    std::fs::write(out.join(SYNTH_FILE), meta)
        .with_context(|| format!("writing {}", out.join(SYNTH_FILE).display()))
}

/// The parameters of a synthetic dataset directory, or `None` for a real one.
pub fn synthetic_params(dir: &Path) -> Option<SynthParams> {
    let text = std::fs::read_to_string(dir.join(SYNTH_FILE)).ok()?;
    serde_json::from_str(&text).ok()
}

/// A set small enough for unit tests: 10,000 x 24, 20 queries, float32.
#[cfg(test)]
pub(crate) fn small_params() -> SynthParams {
    SynthParams {
        n: 10_000,
        dim: 24,
        queries: 20,
        clusters: 16,
        intrinsic_dim: 6,
        k: 10,
        seed: 7,
        dtype: float32(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use diskvec_dataset::DatasetDir;
    use diskvec_index::flat;
    use diskvec_index::NoProgress;
    use diskvec_vector::Rows;

    fn small() -> SynthParams {
        small_params()
    }

    /// In both storage types: the truth written block by block is the exact top-k of the
    /// stored (for float16: rounded, read back widened) vectors.
    #[test]
    fn blockwise_truth_equals_one_pass_truth() {
        for dtype in ["float32", "float16"] {
            blockwise_truth_equals_one_pass_truth_in(dtype);
        }
    }

    /// More rows are the generator's rows past the set: none of them is a row of the set,
    /// and they are the rows a larger set of the same parameters holds there.
    #[test]
    fn more_rows_are_the_rows_a_larger_set_holds_past_the_set() {
        let p = small();
        let dir = tempfile::tempdir().unwrap();
        let first =
            write_more_rows(&p, 5000, dir.path(), CHUNK_ROWS * p.dim * 4, &NoProgress).unwrap();
        assert!(first >= p.n && first.is_multiple_of(CHUNK_ROWS), "{first}");
        let more = diskvec_dataset::read_vectors(&dir.path().join("train.parquet")).unwrap();
        assert_eq!(
            more.ids,
            (first as i64..first as i64 + 5000).collect::<Vec<_>>()
        );
        let larger = Generator::new(&SynthParams {
            n: first + 5000,
            ..p.clone()
        })
        .unwrap()
        .train_rows(first, 5000);
        assert_eq!(more.data, larger);
        let set = Generator::new(&p).unwrap().train_rows(0, p.n);
        let rows: std::collections::HashSet<Vec<u32>> = set
            .chunks_exact(p.dim)
            .map(|r| r.iter().map(|x| x.to_bits()).collect())
            .collect();
        assert!(more
            .data
            .chunks_exact(p.dim)
            .all(|r| !rows.contains(&r.iter().map(|x| x.to_bits()).collect::<Vec<_>>())));
    }

    fn blockwise_truth_equals_one_pass_truth_in(dtype: &str) {
        let p = SynthParams {
            dtype: dtype.to_string(),
            ..small()
        };
        let dir = tempfile::tempdir().unwrap();
        // A budget of one chunk: three blocks, the last one short.
        write_synthetic(&p, dir.path(), CHUNK_ROWS * p.dim * 4, &NoProgress).unwrap();
        let d = DatasetDir::open(dir.path()).unwrap();
        let (train, test, gt) = (
            d.train().unwrap(),
            d.test().unwrap(),
            d.neighbors().unwrap(),
        );
        assert_eq!(
            (train.len(), train.dim, test.len()),
            (p.n, p.dim, p.queries)
        );
        assert_eq!(train.ids, (0..p.n as i64).collect::<Vec<_>>());
        let element: ElementType = dtype.parse().unwrap();
        assert!(element.holds_exactly(&train.data));
        if element == ElementType::Float16 {
            assert!(
                !ElementType::Float16.holds_exactly(&test.data),
                "queries stay f32"
            );
            let size = std::fs::metadata(dir.path().join("train.parquet"))
                .unwrap()
                .len();
            assert!(
                size < (p.n * p.dim * 3) as u64,
                "{size} bytes for float16 values"
            );
        }
        // Cosine truth is of the stored rows normalized again (float16 rows are not unit).
        let mut prepared = train.data.clone();
        prepared
            .chunks_exact_mut(p.dim)
            .for_each(|r| Metric::Cosine.prepare(r));
        let whole = flat::search(
            Rows::new(&prepared, p.dim),
            Rows::new(&test.data, p.dim),
            Metric::Cosine,
            p.k,
            &NoProgress,
        )
        .unwrap();
        for (w, g) in whole.iter().zip(&gt.lists) {
            let ids: Vec<i64> = w.iter().map(|&(i, _)| i as i64).collect();
            assert_eq!(&ids, g);
        }
        assert_eq!(synthetic_params(dir.path()), Some(p));
    }

    #[test]
    fn the_same_parameters_give_the_same_rows_and_vectors_are_unit() {
        let p = small();
        let a = Generator::new(&p).unwrap().train_rows(CHUNK_ROWS, 100);
        let b = Generator::new(&p).unwrap().train_rows(0, 2 * CHUNK_ROWS);
        assert_eq!(a[..], b[CHUNK_ROWS * p.dim..(CHUNK_ROWS + 100) * p.dim]);
        for v in a.chunks_exact(p.dim) {
            let n: f32 = v.iter().map(|x| x * x).sum();
            assert!((n - 1.0).abs() < 1e-4);
        }
        let other = Generator::new(&SynthParams { seed: 8, ..p }).unwrap();
        assert_ne!(other.train_rows(0, 10), b[..10 * 24]);
    }

    #[test]
    fn bad_parameters_are_refused() {
        for bad in [
            SynthParams { n: 0, ..small() },
            SynthParams { dim: 1, ..small() },
            SynthParams {
                intrinsic_dim: 30,
                ..small()
            },
            SynthParams {
                clusters: 0,
                ..small()
            },
        ] {
            assert!(Generator::new(&bad).is_err(), "{bad:?}");
        }
    }
}
