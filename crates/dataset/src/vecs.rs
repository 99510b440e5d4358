use std::path::Path;

use crate::{invalid, io_error, Matrix, Neighbors, Result};

/// Checks that `bytes` is a .fvecs/.bvecs/.ivecs file: rows of a little-endian i32
/// dimension followed by `dim` elements of `elem` bytes, every row of the first row's
/// dimension. Returns the dimension and the rows' elements.
fn rows<'a>(
    bytes: &'a [u8],
    path: &Path,
    elem: usize,
) -> Result<(usize, impl Iterator<Item = &'a [u8]>)> {
    if bytes.len() < 4 {
        return Err(invalid(path, "the file is too short to hold a vector"));
    }
    let dim = i32::from_le_bytes(bytes[..4].try_into().unwrap());
    if dim <= 0 {
        return Err(invalid(
            path,
            format!("bad dimension {dim} in the first row"),
        ));
    }
    let dim = dim as usize;
    let row_bytes = 4 + dim * elem;
    if !bytes.len().is_multiple_of(row_bytes) {
        return Err(invalid(
            path,
            format!(
                "size {} is not a whole number of {dim}-dimensional rows of {row_bytes} bytes (truncated?)",
                bytes.len()
            ),
        ));
    }
    for (i, row) in bytes.chunks_exact(row_bytes).enumerate() {
        let d = i32::from_le_bytes(row[..4].try_into().unwrap());
        if d as i64 != dim as i64 {
            return Err(invalid(
                path,
                format!(
                    "row {i} (offset {}) says dimension {d}, the first said {dim}",
                    i * row_bytes
                ),
            ));
        }
    }
    Ok((dim, bytes.chunks_exact(row_bytes).map(|r| &r[4..])))
}

fn matrix(dim: usize, data: Vec<f32>) -> Matrix {
    let n = data.len() / dim;
    Matrix {
        data,
        dim,
        ids: (0..n as i64).collect(),
    }
}

pub(crate) fn read_fvecs(path: &Path) -> Result<Matrix> {
    decode_fvecs(&std::fs::read(path).map_err(io_error(path))?, path)
}

pub(crate) fn read_bvecs(path: &Path) -> Result<Matrix> {
    decode_bvecs(&std::fs::read(path).map_err(io_error(path))?, path)
}

pub(crate) fn read_ivecs(path: &Path) -> Result<Neighbors> {
    decode_ivecs(&std::fs::read(path).map_err(io_error(path))?, path)
}

/// Parses the bytes of an .fvecs file read from `path`.
pub fn decode_fvecs(bytes: &[u8], path: &Path) -> Result<Matrix> {
    let (dim, rows) = rows(bytes, path, 4)?;
    let data = rows
        .flat_map(|r| {
            r.chunks_exact(4)
                .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        })
        .collect();
    Ok(matrix(dim, data))
}

/// Parses the bytes of a .bvecs file read from `path`.
pub fn decode_bvecs(bytes: &[u8], path: &Path) -> Result<Matrix> {
    let (dim, rows) = rows(bytes, path, 1)?;
    Ok(matrix(dim, rows.flatten().map(|&b| b as f32).collect()))
}

/// Parses the bytes of an .ivecs file (ground truth, one list per query) read from `path`.
pub fn decode_ivecs(bytes: &[u8], path: &Path) -> Result<Neighbors> {
    let (_, rows) = rows(bytes, path, 4)?;
    let lists: Vec<Vec<i64>> = rows
        .map(|r| {
            r.chunks_exact(4)
                .map(|b| i32::from_le_bytes(b.try_into().unwrap()) as i64)
                .collect()
        })
        .collect();
    Ok(Neighbors {
        query_ids: (0..lists.len() as i64).collect(),
        lists,
    })
}
