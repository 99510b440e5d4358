use std::path::Path;

use crate::{invalid, io_error, Matrix, Result};

/// Reads a 2-D, C-ordered .npy array of float32 or float64 (NumPy format versions 1-3).
pub(crate) fn read_npy(path: &Path) -> Result<Matrix> {
    let bytes = std::fs::read(path).map_err(io_error(path))?;
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        return Err(invalid(path, "not a .npy file (bad magic)"));
    }
    let (header_len, header_start) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 if bytes.len() >= 12 => (
            u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as usize,
            12,
        ),
        v => return Err(invalid(path, format!("unsupported .npy version {v}"))),
    };
    let header = bytes
        .get(header_start..header_start + header_len)
        .and_then(|h| std::str::from_utf8(h).ok())
        .ok_or_else(|| invalid(path, "truncated .npy header"))?;
    let field = |key: &str| -> Option<&str> {
        let at = header.find(&format!("'{key}'"))?;
        Some(header[at + key.len() + 2..].trim_start_matches([':', ' ']))
    };
    let descr = field("descr").ok_or_else(|| invalid(path, "no descr in the .npy header"))?;
    let elem = if descr.starts_with("'<f4'") || descr.starts_with("'float32'") {
        4
    } else if descr.starts_with("'<f8'") {
        8
    } else {
        return Err(invalid(
            path,
            format!(
                "unsupported dtype {}: expected <f4 or <f8",
                descr.split(',').next().unwrap_or("")
            ),
        ));
    };
    if field("fortran_order").is_some_and(|v| v.starts_with("True")) {
        return Err(invalid(path, "Fortran-ordered arrays are not supported"));
    }
    let shape = field("shape").ok_or_else(|| invalid(path, "no shape in the .npy header"))?;
    let inner = &shape[1..shape.find(')').ok_or_else(|| invalid(path, "bad shape"))?];
    let dims: Vec<usize> = inner
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<usize>())
        .collect::<std::result::Result<_, _>>()
        .map_err(|_| invalid(path, "bad shape in the .npy header"))?;
    let [n, dim] = dims[..] else {
        return Err(invalid(
            path,
            format!("expected a 2-D array, found shape {dims:?}"),
        ));
    };
    if dim == 0 {
        return Err(invalid(path, "vectors have dimension 0"));
    }
    let body = &bytes[header_start + header_len..];
    if body.len() < n * dim * elem {
        return Err(invalid(
            path,
            "the .npy data is shorter than its shape says (truncated?)",
        ));
    }
    let data: Vec<f32> = if elem == 4 {
        body[..n * dim * 4]
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect()
    } else {
        body[..n * dim * 8]
            .chunks_exact(8)
            .map(|b| f64::from_le_bytes(b.try_into().unwrap()) as f32)
            .collect()
    };
    Ok(Matrix {
        data,
        dim,
        ids: (0..n as i64).collect(),
    })
}
