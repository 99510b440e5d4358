use std::path::PathBuf;

/// Why an index operation failed. Messages name the file or the argument at fault.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A size the caller chose (k, a search list, a degree, ...) outside its bound
    /// (`limits.rs`): always the caller's mistake, where `InvalidArgument` can also be the
    /// state of the index or the machine (another build running, too little disk space).
    #[error("invalid argument: {0}")]
    OutOfRange(String),
    #[error("invalid vectors: {0}")]
    InvalidVectors(#[from] diskvec_vector::VectorError),
    #[error("query has dimension {got}, the index has {expected}")]
    DimensionMismatch { expected: usize, got: usize },
    #[error("{path}: {message}")]
    Corrupt { path: PathBuf, message: String },
    #[error(
        "{path}: layout version {found} is not supported (this build reads version {supported})"
    )]
    UnsupportedVersion {
        path: PathBuf,
        found: u32,
        supported: u32,
    },
    #[error("search failed: {0}")]
    SearchFailed(String),
    /// The caller cancelled the build (`Progress::cancelled`).
    #[error("the build was cancelled")]
    Cancelled,
    #[error("storage: {0}")]
    Io(#[from] diskvec_io::IoError),
    #[error("{path}: {source}")]
    File {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

pub type Result<T> = std::result::Result<T, IndexError>;

pub(crate) fn file_error(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> IndexError + '_ {
    move |source| IndexError::File {
        path: path.to_path_buf(),
        source,
    }
}

pub(crate) fn corrupt(path: &std::path::Path, message: impl Into<String>) -> IndexError {
    IndexError::Corrupt {
        path: path.to_path_buf(),
        message: message.into(),
    }
}
