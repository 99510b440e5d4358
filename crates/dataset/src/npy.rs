use std::path::Path;

use crate::{invalid, io_error, Matrix, Result};

/// Reads a 2-D, C-ordered .npy array of float32 or float64 (NumPy format versions 1-3).
pub(crate) fn read_npy(path: &Path) -> Result<Matrix> {
    let bytes = std::fs::read(path).map_err(io_error(path))?;
    decode_npy(&bytes, path)
}

/// What a .npy header says: rows, columns, bytes per element (4 or 8), and where the data
/// starts.
#[derive(Clone, Copy, Debug)]
pub(crate) struct NpyShape {
    pub rows: usize,
    pub dim: usize,
    pub elem: usize,
    pub data_start: usize,
}

/// Parses the header at the start of `bytes` (which may hold more of the file, or only the
/// header).
pub(crate) fn parse_header(bytes: &[u8], path: &Path) -> Result<NpyShape> {
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        return Err(invalid(path, "not a .npy file (bad magic)"));
    }
    let (header_len, header_start) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 if bytes.len() >= 12 => (
            u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as usize,
            12,
        ),
        2 | 3 => return Err(invalid(path, "truncated .npy header")),
        v => return Err(invalid(path, format!("unsupported .npy version {v}"))),
    };
    let header_end = header_start + header_len;
    let header = bytes
        .get(header_start..header_end)
        .ok_or_else(|| {
            invalid(
                path,
                format!(
                    "truncated .npy header: it says {header_len} bytes at offset {header_start}, the file has {}",
                    bytes.len()
                ),
            )
        })
        .and_then(|h| {
            std::str::from_utf8(h).map_err(|e| {
                invalid(
                    path,
                    format!(
                        "the .npy header is not text (offset {})",
                        header_start + e.valid_up_to()
                    ),
                )
            })
        })?;
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
    let bad_shape = || invalid(path, "bad shape in the .npy header");
    let shape = field("shape").ok_or_else(|| invalid(path, "no shape in the .npy header"))?;
    let inner = shape.strip_prefix('(').ok_or_else(bad_shape)?;
    let inner = &inner[..inner.find(')').ok_or_else(bad_shape)?];
    let mut dims = Vec::new();
    for s in inner.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        if dims.len() == 2 {
            return Err(invalid(path, "expected a 2-D array, found more dimensions"));
        }
        dims.push(s.parse::<usize>().map_err(|_| bad_shape())?);
    }
    let [n, dim] = dims[..] else {
        return Err(invalid(
            path,
            format!("expected a 2-D array, found shape {dims:?}"),
        ));
    };
    if dim == 0 {
        return Err(invalid(path, "vectors have dimension 0"));
    }
    Ok(NpyShape {
        rows: n,
        dim,
        elem,
        data_start: header_end,
    })
}

/// Parses the bytes of a .npy file read from `path` (see `read_npy`). The shape is checked
/// against the bytes present before anything is allocated for the data.
pub fn decode_npy(bytes: &[u8], path: &Path) -> Result<Matrix> {
    let NpyShape {
        rows: n,
        dim,
        elem,
        data_start: header_end,
    } = parse_header(bytes, path)?;
    let body = &bytes[header_end..];
    let need = n.checked_mul(dim).and_then(|v| v.checked_mul(elem));
    let Some(need) = need.filter(|&need| need <= body.len()) else {
        return Err(invalid(
            path,
            format!(
                "the .npy data ({} bytes from offset {header_end}) is shorter than its shape ({n}, {dim}) says (truncated?)",
                body.len()
            ),
        ));
    };
    let data: Vec<f32> = if elem == 4 {
        body[..need]
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect()
    } else {
        body[..need]
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
