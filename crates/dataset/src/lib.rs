//! Datasets on disk: VectorDBBench's layout (train/test/neighbors parquet), the
//! .fvecs/.bvecs/.ivecs files of the classic ANN benchmarks, and NumPy .npy arrays.

mod layout;
mod npy;
mod parquet_ahead;
mod parquet_footer;
mod parquet_io;
mod stream;
mod vecs;

use std::path::{Path, PathBuf};

pub use layout::decode;
pub use layout::DatasetDir;
pub use parquet_io::{read_neighbors, write_neighbors, write_vectors, VectorWriter};
pub use stream::{open_stream, VectorStream, DEFAULT_CHUNK_ROWS};

/// Vectors as loaded from a file: row-major `f32`, one external id per row.
#[derive(Clone, Debug, PartialEq)]
pub struct Matrix {
    pub data: Vec<f32>,
    pub dim: usize,
    pub ids: Vec<i64>,
}

impl Matrix {
    pub fn len(&self) -> usize {
        self.ids.len()
    }
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
    pub fn row(&self, i: usize) -> &[f32] {
        &self.data[i * self.dim..(i + 1) * self.dim]
    }
}

/// Ground truth: for each query id, the true neighbour ids, best first.
#[derive(Clone, Debug, PartialEq)]
pub struct Neighbors {
    pub query_ids: Vec<i64>,
    pub lists: Vec<Vec<i64>>,
}

#[derive(Debug, thiserror::Error)]
pub enum DatasetError {
    #[error("{path}: {message}")]
    Invalid { path: PathBuf, message: String },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

pub type Result<T> = std::result::Result<T, DatasetError>;

pub(crate) fn invalid(path: &Path, message: impl Into<String>) -> DatasetError {
    DatasetError::Invalid {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

pub(crate) fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> DatasetError + '_ {
    move |source| DatasetError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Reads vectors from a .parquet (VectorDBBench `emb` column), .fvecs, .bvecs or .npy file.
/// Refuses empty files, ragged rows and non-finite values.
pub fn read_vectors(path: &Path) -> Result<Matrix> {
    if !path.exists() {
        return Err(invalid(path, "no such file or directory"));
    }
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_ascii_lowercase();
    let m = match ext.as_str() {
        "parquet" => parquet_io::read_vectors(path)?,
        "fvecs" => vecs::read_fvecs(path)?,
        "bvecs" => vecs::read_bvecs(path)?,
        "npy" => npy::read_npy(path)?,
        _ => {
            return Err(invalid(
                path,
                "unknown vector file type: expected .parquet, .fvecs, .bvecs or .npy",
            ))
        }
    };
    if m.is_empty() {
        return Err(invalid(path, "the file holds no vectors"));
    }
    if let Some(pos) = m.data.iter().position(|x| !x.is_finite()) {
        return Err(invalid(
            path,
            format!(
                "vector {} (id {}) has a non-finite value (NaN or infinity) at position {}",
                pos / m.dim,
                m.ids[pos / m.dim],
                pos % m.dim
            ),
        ));
    }
    Ok(m)
}
