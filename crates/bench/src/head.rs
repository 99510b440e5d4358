//! A smaller dataset cut from a larger one: its first `n` train vectors, the same test
//! queries and their exact ground truth over those `n`, streamed a block at a time so a
//! 10M set yields its 1M, 2M and 5M prefixes without being held in memory (how cost grows
//! with n is measured on prefixes of one set). The synthetic generator makes each row from
//! its position alone, so the first `n` rows of a synthetic set are the set `dataset synth`
//! writes for `n`: the prefix is described by the same `synthetic.json` with `n` changed.

use std::path::Path;

use anyhow::{ensure, Context};
use diskvec_dataset::{open_stream, write_neighbors, write_vectors, DatasetDir, VectorWriter};
use diskvec_index::Progress;
use diskvec_vector::{ElementType, Metric};

use crate::running_truth::RunningTruth;
use crate::synth::{block_rows, synthetic_params, write_synthetic_params};

pub struct HeadParams {
    pub n: usize,
    /// Neighbours per query in the new ground truth.
    pub k: usize,
    pub metric: Metric,
    /// How the train vectors are stored; `None`: the source's synthetic type, else float32.
    pub dtype: Option<ElementType>,
}

/// Writes `train.parquet` (ids and vectors only), `test.parquet` and `neighbors.parquet`
/// into `out`, holding about `budget_bytes` of train vectors at once.
pub fn write_head(
    from: &Path,
    p: &HeadParams,
    out: &Path,
    budget_bytes: usize,
    progress: &dyn Progress,
) -> anyhow::Result<()> {
    ensure!(p.n >= 1, "--n must be at least 1");
    let source = DatasetDir::open(from)?;
    let test = source.test()?;
    let mut stream = open_stream(&source.train_path()?, block_rows(test.dim, budget_bytes))?;
    ensure!(
        stream.dim() == test.dim,
        "{}: train vectors have dimension {}, test vectors {}",
        from.display(),
        stream.dim(),
        test.dim
    );
    ensure!(
        p.n <= stream.rows(),
        "{} has {} train vectors, fewer than the {} asked",
        from.display(),
        stream.rows(),
        p.n
    );
    let synthetic = synthetic_params(from);
    let element = match (p.dtype, &synthetic) {
        (Some(e), _) => e,
        (None, Some(s)) => s.dtype.parse().map_err(anyhow::Error::msg)?,
        (None, None) => ElementType::Float32,
    };
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    write_vectors(&out.join("test.parquet"), &test)?;
    let (dim, k) = (test.dim, p.k.min(p.n));
    let mut truth = RunningTruth::new(test.data, test.ids, dim, p.metric, k);
    let mut train = VectorWriter::create(&out.join("train.parquet"), dim, element)?;
    progress.phase("copy + truth", p.n as u64);
    let mut written = 0;
    while written < p.n {
        let mut block = stream
            .next_chunk()?
            .with_context(|| format!("{} ended early", from.display()))?;
        let keep = block.len().min(p.n - written);
        block.ids.truncate(keep);
        block.data.truncate(keep * block.dim);
        element.round_in_place(&mut block.data).map_err(|e| {
            anyhow::anyhow!(
                "train row {} does not fit {}: {e}",
                written + e.position / block.dim,
                element.name()
            )
        })?;
        train.append(&block.ids, &block.data)?;
        truth.add(&mut block.data, &block.ids)?;
        written += keep;
        progress.advance(keep as u64);
    }
    train.finish()?;
    write_neighbors(&out.join("neighbors.parquet"), &truth.finish())?;
    if let Some(mut s) = synthetic {
        s.n = p.n;
        s.k = k;
        s.dtype = element.name().to_string();
        write_synthetic_params(out, &s)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synth::{small_params, write_synthetic, SynthParams};
    use diskvec_index::NoProgress;

    /// The first n rows of a synthetic set, with their truth, are the set written for n.
    #[test]
    fn the_head_of_a_synthetic_set_is_the_smaller_set() {
        let big = SynthParams {
            dtype: "float16".into(),
            ..small_params()
        };
        let small = SynthParams {
            n: 5_000,
            ..big.clone()
        };
        let dirs = [(); 3].map(|_| tempfile::tempdir().unwrap());
        write_synthetic(&big, dirs[0].path(), 1 << 20, &NoProgress).unwrap();
        write_synthetic(&small, dirs[1].path(), 1 << 20, &NoProgress).unwrap();
        let p = HeadParams {
            n: small.n,
            k: small.k,
            metric: Metric::Cosine,
            dtype: None,
        };
        // A budget smaller than the set: the truth is merged over blocks.
        write_head(
            dirs[0].path(),
            &p,
            dirs[2].path(),
            4096 * 24 * 4,
            &NoProgress,
        )
        .unwrap();
        let (want, got) = (
            DatasetDir::open(dirs[1].path()).unwrap(),
            DatasetDir::open(dirs[2].path()).unwrap(),
        );
        let (wt, gt) = (want.train().unwrap(), got.train().unwrap());
        assert_eq!((wt.ids, wt.data), (gt.ids, gt.data));
        assert_eq!(
            want.neighbors().unwrap().lists,
            got.neighbors().unwrap().lists
        );
        assert_eq!(want.test().unwrap().data, got.test().unwrap().data);
        assert_eq!(synthetic_params(dirs[2].path()), Some(small));
        let too_many = HeadParams { n: 10_001, ..p };
        let err = write_head(
            dirs[0].path(),
            &too_many,
            dirs[2].path(),
            1 << 20,
            &NoProgress,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("fewer than the 10001 asked"), "{err}");
    }
}
