//! Where a build's vectors come from: a stream of chunks, so a build never needs the input
//! whole in memory (a file reader in the CLI, a slice for callers that hold the vectors).

/// Vectors delivered a chunk at a time, with one external id per row.
pub trait VectorSource {
    fn dim(&self) -> usize;
    /// The rows the source announces; delivering fewer or more is an error of the source.
    fn rows(&self) -> usize;
    /// Appends the next chunk's values to `data` and its ids to `ids` (both cleared first)
    /// and returns how many rows it added: 0 once every row was delivered.
    fn next_chunk(
        &mut self,
        data: &mut Vec<f32>,
        ids: &mut Vec<i64>,
    ) -> std::result::Result<usize, String>;
}

/// Vectors held in memory, delivered `chunk_rows` at a time.
pub struct SliceSource<'a> {
    data: &'a [f32],
    ids: &'a [i64],
    dim: usize,
    at: usize,
    chunk_rows: usize,
}

impl<'a> SliceSource<'a> {
    /// `data` is row-major with `dim` columns; `ids` has one id per row (checked by the build).
    pub fn new(data: &'a [f32], dim: usize, ids: &'a [i64]) -> Self {
        Self {
            data,
            ids,
            dim: dim.max(1),
            at: 0,
            chunk_rows: 8192,
        }
    }
}

impl VectorSource for SliceSource<'_> {
    fn dim(&self) -> usize {
        self.dim
    }

    fn rows(&self) -> usize {
        self.ids.len()
    }

    fn next_chunk(
        &mut self,
        data: &mut Vec<f32>,
        ids: &mut Vec<i64>,
    ) -> std::result::Result<usize, String> {
        data.clear();
        ids.clear();
        let end = (self.at + self.chunk_rows).min(self.ids.len());
        if self.data.len() != self.ids.len() * self.dim {
            return Err(format!(
                "{} values are not {} rows of dimension {}",
                self.data.len(),
                self.ids.len(),
                self.dim
            ));
        }
        data.extend_from_slice(&self.data[self.at * self.dim..end * self.dim]);
        ids.extend_from_slice(&self.ids[self.at..end]);
        let rows = end - self.at;
        self.at = end;
        Ok(rows)
    }
}
