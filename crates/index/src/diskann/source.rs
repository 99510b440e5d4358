//! Where a build's vectors come from: a stream of chunks, so a build never needs the input
//! whole in memory (a file reader in the CLI, a slice for callers that hold the vectors).

/// Vectors delivered a chunk at a time, with one external id per row.
///
/// A build in shards reads its input three times (statistics and sample, codes, node
/// records) instead of keeping a copy of it: each pass after the first starts with
/// `rewind`, and must deliver the same rows (checked).
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

    /// Starts again from the first row, so the next chunk is the first one.
    fn rewind(&mut self) -> std::result::Result<(), String>;
}

/// One pass over a build's input: each chunk checked (`next_checked`), prepared for the
/// metric unless the input says it is, and rounded to the storage element type, as every
/// pass must see the same values. A fingerprint of the raw values and ids lets a later pass
/// prove it read what the first one did.
pub(crate) struct InputPass<'s> {
    source: &'s mut dyn VectorSource,
    prepare: Option<diskvec_vector::Metric>,
    element: diskvec_vector::ElementType,
    seen: usize,
    ids: Vec<i64>,
    fingerprint: twox_hash::XxHash3_64,
}

impl<'s> InputPass<'s> {
    /// The first pass, from where `source` stands (a fresh source: its first row).
    pub fn first(source: &'s mut dyn VectorSource, params: &super::BuildParams) -> Self {
        Self {
            source,
            prepare: (!params.input_prepared).then_some(params.metric),
            element: params.element,
            seen: 0,
            ids: Vec::new(),
            fingerprint: twox_hash::XxHash3_64::with_seed(0),
        }
    }

    /// A later pass: the source rewound to its first row.
    pub fn again(
        source: &'s mut dyn VectorSource,
        params: &super::BuildParams,
    ) -> crate::Result<Self> {
        source.rewind().map_err(|e| {
            crate::IndexError::InvalidArgument(format!("reading the input again: {e}"))
        })?;
        Ok(Self::first(source, params))
    }

    /// The next chunk's prepared, rounded rows into `data` (its ids in `ids()`): the row
    /// count, 0 at the end.
    pub fn next(&mut self, data: &mut Vec<f32>) -> crate::Result<usize> {
        use std::hash::Hasher;
        let dim = self.source.dim();
        let rows = next_checked(self.source, self.seen, data, &mut self.ids)?;
        self.fingerprint.write(bytemuck::cast_slice(data));
        self.fingerprint.write(bytemuck::cast_slice(&self.ids));
        if let Some(metric) = self.prepare {
            use rayon::prelude::*;
            data.par_chunks_exact_mut(dim)
                .for_each(|v| metric.prepare(v));
        }
        round_to_element(self.element, data, dim, self.seen, &self.ids)?;
        self.seen += rows;
        Ok(rows)
    }

    /// The ids of the last chunk.
    pub fn ids(&self) -> &[i64] {
        &self.ids
    }

    /// Rows delivered before the last chunk's, plus the last chunk's.
    pub fn seen(&self) -> usize {
        self.seen
    }

    pub fn source(&mut self) -> &mut dyn VectorSource {
        self.source
    }

    /// What this pass read, to compare with another pass over the same input.
    pub fn fingerprint(&self) -> u64 {
        use std::hash::Hasher;
        self.fingerprint.finish()
    }

    /// Refuses a pass that ended early or read other rows than the first pass (`first`,
    /// its fingerprint).
    pub fn finish_same_as(&self, first: u64) -> crate::Result<()> {
        check_complete(self.source.rows(), self.seen)?;
        if self.fingerprint() != first {
            return Err(crate::IndexError::InvalidArgument(
                "the input changed while the build read it (each of its passes must read the \
                 same rows, ids and values)"
                    .into(),
            ));
        }
        Ok(())
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

    fn rewind(&mut self) -> std::result::Result<(), String> {
        self.at = 0;
        Ok(())
    }
}
