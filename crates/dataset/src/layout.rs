use std::path::{Path, PathBuf};

use crate::{invalid, read_vectors, Matrix, Neighbors, Result};

/// A dataset directory. VectorDBBench's layout is `train.parquet`, `test.parquet` and
/// `neighbors.parquet`; `base.fvecs`/`query.fvecs`/`groundtruth.ivecs` and
/// `train.npy`/`test.npy` are accepted too.
pub struct DatasetDir {
    pub dir: PathBuf,
}

impl DatasetDir {
    pub fn open(dir: &Path) -> Result<Self> {
        if !dir.is_dir() {
            return Err(invalid(
                dir,
                "not a dataset directory (it does not exist or is not a directory)",
            ));
        }
        Ok(Self {
            dir: dir.to_path_buf(),
        })
    }

    fn first_existing(&self, names: &[&str]) -> Result<PathBuf> {
        names
            .iter()
            .map(|n| self.dir.join(n))
            .find(|p| p.exists())
            .ok_or_else(|| {
                invalid(
                    &self.dir,
                    format!("no {} in the dataset directory", names.join(" or ")),
                )
            })
    }

    pub fn train_path(&self) -> Result<PathBuf> {
        self.first_existing(&[
            "train.parquet",
            "base.fvecs",
            "base.bvecs",
            "train.fvecs",
            "train.npy",
        ])
    }

    pub fn test_path(&self) -> Result<PathBuf> {
        self.first_existing(&[
            "test.parquet",
            "query.fvecs",
            "query.bvecs",
            "test.fvecs",
            "test.npy",
        ])
    }

    pub fn neighbors_path(&self) -> Result<PathBuf> {
        self.first_existing(&["neighbors.parquet", "groundtruth.ivecs", "neighbors.ivecs"])
    }

    pub fn train(&self) -> Result<Matrix> {
        read_vectors(&self.train_path()?)
    }

    pub fn test(&self) -> Result<Matrix> {
        read_vectors(&self.test_path()?)
    }

    pub fn neighbors(&self) -> Result<Neighbors> {
        let p = self.neighbors_path()?;
        if p.extension().is_some_and(|e| e == "ivecs") {
            crate::vecs::read_ivecs(&p)
        } else {
            crate::read_neighbors(&p)
        }
    }
}

/// Bytes-in decoders of every file kind a dataset directory may hold, for callers (the
/// fuzz targets) that have bytes rather than files; `path` only names the source in errors.
#[doc(hidden)]
pub mod decode {
    pub use crate::npy::decode_npy as npy;
    pub use crate::parquet_io::{
        decode_neighbors as neighbors_parquet, decode_vectors as vectors_parquet,
    };
    pub use crate::vecs::{decode_bvecs as bvecs, decode_fvecs as fvecs, decode_ivecs as ivecs};
}
