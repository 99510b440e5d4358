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

    /// The out-neighbours that the rows of the last chunk already have in a graph of
    /// their own, as row numbers of this source (0..rows), one list per row. A merge of
    /// sealed segments passes on their graphs, so a build in shards only has to add the
    /// edges between them. Sources without such a graph leave `lists` empty (the
    /// default).
    fn seed_lists(&mut self, lists: &mut Vec<Vec<u32>>) {
        lists.clear();
    }
}

/// The next chunk of `source`, after `seen` rows: its row count (0 at the end), refused
/// when it does not hold whole finite rows of the announced dimension, one id each, or goes
/// past the rows announced.
pub(crate) fn next_checked(
    source: &mut dyn VectorSource,
    seen: usize,
    data: &mut Vec<f32>,
    ids: &mut Vec<i64>,
) -> crate::Result<usize> {
    use crate::IndexError::InvalidArgument;
    let (n, dim) = (source.rows(), source.dim());
    let rows = source.next_chunk(data, ids).map_err(InvalidArgument)?;
    if rows == 0 {
        return Ok(0);
    }
    if seen + rows > n {
        return Err(InvalidArgument(format!(
            "the input delivered more than the {n} rows it announced"
        )));
    }
    if data.len() != rows * dim || ids.len() != rows {
        return Err(InvalidArgument(format!(
            "rows {seen}..{}: {} values and {} ids for {rows} rows of dimension {dim} \
             (the rows changed length?)",
            seen + rows,
            data.len(),
            ids.len()
        )));
    }
    if let Some(pos) = data.iter().position(|x| !x.is_finite()) {
        return Err(InvalidArgument(format!(
            "vector {} (id {}) has a non-finite value (NaN or infinity) at position {}",
            seen + pos / dim,
            ids[pos / dim],
            pos % dim
        )));
    }
    Ok(rows)
}

/// Rounds prepared rows (row `seen` first, `ids` theirs) to what the node records store;
/// refuses, naming row, id and position, a value the type cannot hold.
pub(crate) fn round_to_element(
    element: diskvec_vector::ElementType,
    data: &mut [f32],
    dim: usize,
    seen: usize,
    ids: &[i64],
) -> crate::Result<()> {
    element.round_in_place(data).map_err(|e| {
        crate::IndexError::InvalidArgument(format!(
            "vector {} (id {}): position {}: {e}",
            seen + e.position / dim,
            ids[e.position / dim],
            e.position % dim
        ))
    })
}

/// Refuses an input that ended before the rows it announced.
pub(crate) fn check_complete(announced: usize, delivered: usize) -> crate::Result<()> {
    if announced != delivered {
        return Err(crate::IndexError::InvalidArgument(format!(
            "the input ended after {delivered} of the {announced} rows it announced"
        )));
    }
    Ok(())
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
