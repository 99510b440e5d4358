//! The write-ahead log. (Being written.)

/// Why the log could not be opened or written.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct WalError(pub String);
