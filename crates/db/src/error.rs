use std::path::PathBuf;

/// Why a database operation failed. Messages name the collection, file or argument at fault;
/// an operation that fails this way has written nothing.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// The caller's input is wrong (dimension, NaN, id type, payload size, ...).
    #[error("{0}")]
    InvalidInput(String),
    /// The request is well formed but asks for something that makes no sense together (a
    /// score threshold without a query, prefetches without one to merge them).
    #[error("{0}")]
    BadRequest(String),
    /// The request has the right shape but breaks a rule of the schema (Qdrant answers 422).
    #[error("{0}")]
    Validation(String),
    #[error("collection {0:?} does not exist")]
    UnknownCollection(String),
    #[error("collection {0:?} already exists")]
    CollectionExists(String),
    /// Something other than a collection or a point is not there (a snapshot).
    #[error("{0}")]
    NotFound(String),
    #[error("no point with id {0}")]
    PointNotFound(crate::PointId),
    #[error("bad filter: {0}")]
    BadFilter(#[from] crate::filter::FilterError),
    #[error("write-ahead log: {0}")]
    Wal(#[from] crate::wal::WalError),
    #[error("{path}: {message}")]
    Corrupt { path: PathBuf, message: String },
    #[error("{path}: {source}")]
    File {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The index failed (storage, damage, a build); the caller's own mistakes in what it
    /// asked of the index are `InvalidInput` instead.
    #[error(transparent)]
    Index(diskvec_index::IndexError),
    /// The database was closed, or a background failure stopped writes.
    #[error("{0}")]
    Unavailable(String),
    /// A write was held back past its deadline (indexing is behind ingest); nothing was
    /// written and it may be retried.
    #[error("{0}")]
    Busy(String),
    /// Strict mode's read or write rate is spent; `retry_after`: when enough is back
    /// (`None`: the request alone costs more than the rate allows in a minute).
    #[error("Rate limiting exceeded: {message}")]
    RateLimited {
        message: String,
        retry_after: Option<std::time::Duration>,
    },
}

pub type Result<T> = std::result::Result<T, DbError>;

impl From<diskvec_index::IndexError> for DbError {
    fn from(e: diskvec_index::IndexError) -> Self {
        use diskvec_index::IndexError as E;
        match e {
            // A limit or search list past its bound, a wrong dimension, NaN: the caller's
            // mistake, whichever layer found it (over HTTP, a 400, not a 500). Other invalid
            // arguments of the index (a build already running, too little disk) are not.
            E::OutOfRange(_) | E::InvalidVectors(_) | E::DimensionMismatch { .. } => {
                DbError::InvalidInput(e.to_string())
            }
            other => DbError::Index(other),
        }
    }
}

pub(crate) fn file_error(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> DbError + '_ {
    move |source| DbError::File {
        path: path.to_path_buf(),
        source,
    }
}
