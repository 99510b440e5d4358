/// Why a batch of vectors was refused.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum VectorError {
    #[error("no vectors given")]
    Empty,
    #[error("vector dimension must be at least 1")]
    ZeroDimension,
    #[error("data length {len} is not a multiple of the dimension {dim}")]
    Ragged { len: usize, dim: usize },
    #[error("vector {row} has a non-finite value (NaN or infinity) at position {col}")]
    NonFinite { row: usize, col: usize },
}

/// Checks a row-major block of `dim`-dimensional vectors: non-empty, whole rows, finite.
pub fn check_vectors(data: &[f32], dim: usize) -> Result<usize, VectorError> {
    if dim == 0 {
        return Err(VectorError::ZeroDimension);
    }
    if data.is_empty() {
        return Err(VectorError::Empty);
    }
    if !data.len().is_multiple_of(dim) {
        return Err(VectorError::Ragged {
            len: data.len(),
            dim,
        });
    }
    if let Some(pos) = data.iter().position(|x| !x.is_finite()) {
        return Err(VectorError::NonFinite {
            row: pos / dim,
            col: pos % dim,
        });
    }
    Ok(data.len() / dim)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_bad_blocks() {
        assert_eq!(check_vectors(&[], 3), Err(VectorError::Empty));
        assert_eq!(check_vectors(&[1.0], 0), Err(VectorError::ZeroDimension));
        assert!(matches!(
            check_vectors(&[1.0, 2.0], 3),
            Err(VectorError::Ragged { .. })
        ));
        assert_eq!(
            check_vectors(&[1.0, 2.0, 3.0, f32::NAN], 2),
            Err(VectorError::NonFinite { row: 1, col: 1 })
        );
        assert!(check_vectors(&[f32::INFINITY], 1).is_err());
        assert_eq!(check_vectors(&[1.0, 2.0, 3.0, 4.0], 2), Ok(2));
    }
}
