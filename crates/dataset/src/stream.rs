//! Vectors read a chunk at a time, so a file larger than memory can be built from. Every
//! chunk is checked as it arrives (row length, finite values); a file that ends before the
//! rows its header or size announced is an error naming the row where it stopped.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};

use crate::parquet_ahead::{footer, ParquetAhead};
use crate::{invalid, io_error, Matrix, Result};

/// Rows per chunk unless the caller asks otherwise: 8,192 rows of 768 dimensions is 24 MiB.
pub const DEFAULT_CHUNK_ROWS: usize = 8192;

/// A vector file opened for reading in chunks (see `open_stream`).
pub struct VectorStream {
    path: PathBuf,
    dim: usize,
    rows: usize,
    delivered: usize,
    chunk_rows: usize,
    source: Source,
}

enum Source {
    Parquet {
        chunks: ParquetAhead,
        /// The first chunk, read at open to learn the dimension.
        first: Option<Matrix>,
    },
    /// .fvecs (4-byte floats) or .bvecs (bytes): each row is an i32 dimension, then values.
    Vecs {
        file: BufReader<File>,
        elem: usize,
        row: Vec<u8>,
    },
    Npy {
        file: BufReader<File>,
        elem: usize,
        buf: Vec<u8>,
    },
}

/// Opens a .parquet, .fvecs, .bvecs or .npy file for reading `chunk_rows` rows at a time.
/// The header (or, for .fvecs/.bvecs, the first row and the file size) fixes the dimension
/// and the number of rows up front.
pub fn open_stream(path: &Path, chunk_rows: usize) -> Result<VectorStream> {
    if !path.exists() {
        return Err(invalid(path, "no such file or directory"));
    }
    if path.is_dir() {
        return Err(invalid(path, "a directory, not a vector file"));
    }
    let chunk_rows = chunk_rows.max(1);
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_ascii_lowercase();
    let file = File::open(path).map_err(io_error(path))?;
    let file_len = file.metadata().map_err(io_error(path))?.len();
    let (dim, rows, source) = match ext.as_str() {
        "parquet" => open_parquet(path, file, chunk_rows)?,
        "fvecs" => open_vecs(path, file, file_len, 4)?,
        "bvecs" => open_vecs(path, file, file_len, 1)?,
        "npy" => open_npy(path, file, file_len)?,
        _ => {
            return Err(invalid(
                path,
                "unknown vector file type: expected .parquet, .fvecs, .bvecs or .npy",
            ))
        }
    };
    if rows == 0 {
        return Err(invalid(path, "the file holds no vectors"));
    }
    Ok(VectorStream {
        path: path.to_path_buf(),
        dim,
        rows,
        delivered: 0,
        chunk_rows,
        source,
    })
}

fn open_parquet(path: &Path, file: File, chunk_rows: usize) -> Result<(usize, usize, Source)> {
    crate::parquet_footer::check(&file)
        .map_err(|e| invalid(path, format!("not a readable parquet file: {e}")))?;
    let metadata = footer(path, &file)?;
    let rows = metadata.metadata().file_metadata().num_rows().max(0) as usize;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(DECODE_THREADS));
    let mut chunks = ParquetAhead::start(path, metadata, chunk_rows, threads)?;
    let first = chunks.next().transpose()?;
    let dim = first.as_ref().map_or(0, |m| m.dim);
    Ok((dim, rows, Source::Parquet { chunks, first }))
}

/// Threads decoding a parquet file at most: more than a build's other work keeps up with.
const DECODE_THREADS: usize = 4;

fn open_vecs(
    path: &Path,
    file: File,
    file_len: u64,
    elem: usize,
) -> Result<(usize, usize, Source)> {
    let mut file = BufReader::with_capacity(1 << 20, file);
    let mut head = [0u8; 4];
    file.read_exact(&mut head)
        .map_err(|_| invalid(path, "the file is too short to hold a vector"))?;
    let dim = i32::from_le_bytes(head);
    if dim <= 0 {
        return Err(invalid(
            path,
            format!("bad dimension {dim} in the first row"),
        ));
    }
    let dim = dim as usize;
    let row_bytes = (4 + dim * elem) as u64;
    if !file_len.is_multiple_of(row_bytes) {
        return Err(invalid(
            path,
            format!(
                "size {file_len} is not a whole number of {dim}-dimensional rows of {row_bytes} bytes (truncated?)"
            ),
        ));
    }
    let rows = (file_len / row_bytes) as usize;
    // The first row's dimension is read again with its row, so every row is read alike.
    let mut file = file;
    use std::io::Seek;
    file.seek(std::io::SeekFrom::Start(0))
        .map_err(io_error(path))?;
    let row = vec![0u8; row_bytes as usize];
    Ok((dim, rows, Source::Vecs { file, elem, row }))
}

fn open_npy(path: &Path, file: File, file_len: u64) -> Result<(usize, usize, Source)> {
    let mut file = BufReader::with_capacity(1 << 20, file);
    // NumPy pads its header to a multiple of 64 bytes; 64 KiB holds any real one.
    let mut head = Vec::new();
    (&mut file)
        .take(65_536)
        .read_to_end(&mut head)
        .map_err(io_error(path))?;
    let shape = crate::npy::parse_header(&head, path)?;
    if shape.dim == 0 {
        return Err(invalid(path, "vectors have dimension 0"));
    }
    let need = (shape.rows as u64)
        .checked_mul(shape.dim as u64)
        .and_then(|v| v.checked_mul(shape.elem as u64))
        .and_then(|v| v.checked_add(shape.data_start as u64));
    if need.is_none_or(|need| need > file_len) {
        return Err(invalid(
            path,
            format!(
                "the .npy data ({} bytes from offset {}) is shorter than its shape ({}, {}) says (truncated?)",
                file_len.saturating_sub(shape.data_start as u64),
                shape.data_start,
                shape.rows,
                shape.dim
            ),
        ));
    }
    use std::io::Seek;
    file.seek(std::io::SeekFrom::Start(shape.data_start as u64))
        .map_err(io_error(path))?;
    Ok((
        shape.dim,
        shape.rows,
        Source::Npy {
            file,
            elem: shape.elem,
            buf: Vec::new(),
        },
    ))
}

impl VectorStream {
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// The rows the file announced (its header, footer or size).
    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The same file opened again at its first row, refused if it no longer has the rows
    /// and dimension it had.
    pub fn reopen(&self) -> Result<VectorStream> {
        let again = open_stream(&self.path, self.chunk_rows)?;
        if (again.rows, again.dim) != (self.rows, self.dim) {
            return Err(invalid(
                &self.path,
                format!(
                    "changed while read: {} rows of dimension {} now, {} of {} before",
                    again.rows, again.dim, self.rows, self.dim
                ),
            ));
        }
        Ok(again)
    }

    /// Bytes the raw vectors take as f32.
    pub fn raw_bytes(&self) -> u64 {
        self.rows as u64 * self.dim as u64 * 4
    }

    /// The next chunk of up to `chunk_rows` rows, or `None` once every announced row was
    /// delivered. Ids are the file's `id` column (parquet) or row numbers.
    pub fn next_chunk(&mut self) -> Result<Option<Matrix>> {
        if self.delivered >= self.rows {
            return self.check_no_more();
        }
        let want = self.chunk_rows.min(self.rows - self.delivered);
        let first_row = self.delivered;
        let mut m = Matrix {
            data: Vec::new(),
            dim: self.dim,
            ids: Vec::new(),
        };
        let path = self.path.clone();
        let truncated = |got: usize| {
            invalid(
                &path,
                format!(
                    "the file ended at row {got} of the {} it announced (truncated while reading?)",
                    self.rows
                ),
            )
        };
        match &mut self.source {
            Source::Parquet { chunks, first } => {
                let chunk = match first.take() {
                    Some(m) => Some(m),
                    None => chunks.next().transpose()?,
                };
                let Some(chunk) = chunk else {
                    return Err(truncated(first_row));
                };
                if !chunk.ids.is_empty() && chunk.dim != self.dim {
                    return Err(invalid(
                        &path,
                        format!(
                            "vector {first_row} has {} values, the first had {}",
                            chunk.dim, self.dim
                        ),
                    ));
                }
                if chunk.ids.len() > self.rows - first_row {
                    return Err(invalid(
                        &path,
                        format!(
                            "the file holds more rows than the {} it announced",
                            self.rows
                        ),
                    ));
                }
                // Checked finite by the decoding thread.
                m = chunk;
            }
            Source::Vecs { file, elem, row } => {
                m.data.reserve(want * self.dim);
                m.ids.reserve(want);
                for i in first_row..first_row + want {
                    read_full(file, row, &path).map_err(|e| e.unwrap_or_else(|| truncated(i)))?;
                    let d = i32::from_le_bytes(row[..4].try_into().unwrap());
                    if d as i64 != self.dim as i64 {
                        return Err(invalid(
                            &path,
                            format!("row {i} says dimension {d}, the first said {}", self.dim),
                        ));
                    }
                    if *elem == 4 {
                        m.data.extend(
                            row[4..]
                                .chunks_exact(4)
                                .map(|b| f32::from_le_bytes(b.try_into().unwrap())),
                        );
                    } else {
                        m.data.extend(row[4..].iter().map(|&b| b as f32));
                    }
                    m.ids.push(i as i64);
                }
            }
            Source::Npy { file, elem, buf } => {
                buf.resize(want * self.dim * *elem, 0);
                read_full(file, buf, &path)
                    .map_err(|e| e.unwrap_or_else(|| truncated(first_row)))?;
                if *elem == 4 {
                    m.data.extend(
                        buf.chunks_exact(4)
                            .map(|b| f32::from_le_bytes(b.try_into().unwrap())),
                    );
                } else {
                    m.data.extend(
                        buf.chunks_exact(8)
                            .map(|b| f64::from_le_bytes(b.try_into().unwrap()) as f32),
                    );
                }
                m.ids.extend(first_row as i64..(first_row + want) as i64);
            }
        }
        if !matches!(self.source, Source::Parquet { .. }) {
            check_finite(&self.path, &m, first_row)?;
        }
        self.delivered += m.ids.len();
        Ok(Some(m))
    }

    /// After the last announced row: a parquet file must have no further batch.
    fn check_no_more(&mut self) -> Result<Option<Matrix>> {
        if let Source::Parquet { chunks, first } = &mut self.source {
            let extra = match first.take() {
                Some(m) => Some(m),
                None => chunks.next().transpose()?,
            };
            if extra.is_some_and(|m| !m.ids.is_empty()) {
                return Err(invalid(
                    &self.path,
                    format!(
                        "the file holds more rows than the {} it announced",
                        self.rows
                    ),
                ));
            }
        }
        Ok(None)
    }
}

/// Refuses a chunk (its first row is `first_row` of the file) holding NaN or infinity,
/// naming the vector, its id and the position.
pub(crate) fn check_finite(path: &Path, m: &Matrix, first_row: usize) -> Result<()> {
    let Some(pos) = m.data.iter().position(|x| !x.is_finite()) else {
        return Ok(());
    };
    let row = pos / m.dim.max(1);
    Err(invalid(
        path,
        format!(
            "vector {} (id {}) has a non-finite value (NaN or infinity) at position {}",
            first_row + row,
            m.ids[row],
            pos % m.dim.max(1)
        ),
    ))
}

/// Fills `buf` from `r`; `Err(None)` when the input ends first, `Err(Some(e))` on an I/O error.
fn read_full(
    r: &mut impl Read,
    buf: &mut [u8],
    path: &Path,
) -> std::result::Result<(), Option<crate::DatasetError>> {
    r.read_exact(buf).map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => None,
        _ => Some(io_error(path)(e)),
    })
}
