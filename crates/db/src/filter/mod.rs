//! Qdrant's filter model over JSON payloads, and payload indexes. (Being written.)

/// Why a filter was refused.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct FilterError(pub String);
