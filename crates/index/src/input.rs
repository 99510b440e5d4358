use std::collections::HashSet;

use diskvec_vector::check_vectors;

use crate::{IndexError, Result};

/// Checks what every index kind is built from: `dim`-dimensional finite vectors, one
/// external id each, no id twice. Returns the number of vectors.
pub(crate) fn check_build_input(data: &[f32], dim: usize, ids: &[i64]) -> Result<usize> {
    let n = check_vectors(data, dim)?;
    if ids.len() != n {
        return Err(IndexError::InvalidArgument(format!(
            "{} ids given for {n} vectors",
            ids.len()
        )));
    }
    let mut seen = HashSet::with_capacity(n);
    if let Some(dup) = ids.iter().find(|id| !seen.insert(**id)) {
        return Err(IndexError::InvalidArgument(format!(
            "id {dup} appears more than once"
        )));
    }
    Ok(n)
}
