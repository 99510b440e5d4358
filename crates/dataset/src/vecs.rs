use std::path::Path;

use crate::{invalid, io_error, Matrix, Neighbors, Result};

/// Splits a .fvecs/.bvecs/.ivecs file into rows: each row is a little-endian i32 dimension
/// followed by `dim` elements of `elem` bytes.
fn rows(path: &Path, elem: usize) -> Result<(usize, Vec<Vec<u8>>)> {
    let bytes = std::fs::read(path).map_err(io_error(path))?;
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
    if bytes.len() % row_bytes != 0 {
        return Err(invalid(
            path,
            format!(
                "size {} is not a whole number of {dim}-dimensional rows (truncated?)",
                bytes.len()
            ),
        ));
    }
    let mut out = Vec::with_capacity(bytes.len() / row_bytes);
    for (i, row) in bytes.chunks_exact(row_bytes).enumerate() {
        let d = i32::from_le_bytes(row[..4].try_into().unwrap());
        if d as usize != dim {
            return Err(invalid(
                path,
                format!("row {i} says dimension {d}, the first said {dim}"),
            ));
        }
        out.push(row[4..].to_vec());
    }
    Ok((dim, out))
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
    let (dim, rows) = rows(path, 4)?;
    let data = rows
        .iter()
        .flat_map(|r| {
            r.chunks_exact(4)
                .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        })
        .collect();
    Ok(matrix(dim, data))
}

pub(crate) fn read_bvecs(path: &Path) -> Result<Matrix> {
    let (dim, rows) = rows(path, 1)?;
    Ok(matrix(
        dim,
        rows.iter().flatten().map(|&b| b as f32).collect(),
    ))
}

pub(crate) fn read_ivecs(path: &Path) -> Result<Neighbors> {
    let (_, rows) = rows(path, 4)?;
    let lists: Vec<Vec<i64>> = rows
        .iter()
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
