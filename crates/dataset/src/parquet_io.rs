use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use arrow_array::builder::{Float16Builder, Float32Builder, Int64Builder, ListBuilder};
use arrow_array::cast::AsArray;
use arrow_array::types::{
    Float16Type, Float32Type, Float64Type, Int32Type, Int64Type, UInt32Type, UInt64Type, UInt8Type,
};
use arrow_array::{Array, ArrayRef, Int64Array, OffsetSizeTrait, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use parquet::arrow::arrow_reader::{ArrowReaderOptions, ParquetRecordBatchReaderBuilder};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::file::reader::ChunkReader;

use crate::{invalid, io_error, Matrix, Neighbors, Result};
use diskvec_vector::ElementType;

/// Turns bytes into the in-memory input the parquet reader takes (`bytes::Bytes`), naming
/// that type through `File`'s `get_bytes`, so this crate needs no `bytes` dependency of its own.
pub(crate) fn in_memory(bytes: &[u8]) -> impl ChunkReader + 'static {
    fn same_as<B: From<Vec<u8>>>(
        _: fn(&File, u64, usize) -> parquet::errors::Result<B>,
        v: Vec<u8>,
    ) -> B {
        B::from(v)
    }
    same_as(<File as ChunkReader>::get_bytes, bytes.to_vec())
}

fn batches<R: ChunkReader + 'static>(input: R, path: &Path) -> Result<Vec<RecordBatch>> {
    crate::parquet_footer::check(&input)
        .map_err(|e| invalid(path, format!("not a readable parquet file: {e}")))?;
    let read = || -> Result<Vec<RecordBatch>> {
        // The embedded Arrow schema (base64 flatbuffers in the footer's key-value metadata)
        // is not needed to read our columns, and decoding it lets a few damaged bytes
        // reserve gigabytes (found by fuzzing): the Parquet schema alone is used.
        let options = ArrowReaderOptions::new().with_skip_arrow_metadata(true);
        let reader = ParquetRecordBatchReaderBuilder::try_new_with_options(input, options)
            .and_then(|b| b.with_batch_size(8192).build())
            .map_err(|e| invalid(path, format!("not a readable parquet file: {e}")))?;
        reader
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| invalid(path, format!("corrupt parquet data: {e}")))
    };
    guarded(path, read)
}

/// Runs a parquet call that may panic on a malformed file instead of returning an error (a
/// negative column chunk offset in the footer, for one): such a file is reported like any
/// other corrupt one. Nothing the closure touched outlives it, so no broken state is seen.
pub(crate) fn guarded<T>(path: &Path, f: impl FnOnce() -> Result<T>) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|p| {
        let why = p
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        Err(invalid(path, format!("corrupt parquet file: {why}")))
    })
}

fn column<'a>(path: &Path, batch: &'a RecordBatch, names: &[&str]) -> Result<&'a ArrayRef> {
    names
        .iter()
        .find_map(|n| batch.column_by_name(n))
        .ok_or_else(|| invalid(path, format!("no column named {}", names.join(" or "))))
}

fn ids_of(path: &Path, batch: &RecordBatch, first_row: usize) -> Result<Vec<i64>> {
    let Some(col) = batch.column_by_name("id") else {
        return Ok((first_row as i64..(first_row + batch.num_rows()) as i64).collect());
    };
    if col.null_count() > 0 {
        return Err(invalid(path, "the id column has nulls"));
    }
    Ok(match col.data_type() {
        DataType::Int64 => col.as_primitive::<Int64Type>().values().to_vec(),
        DataType::Int32 => col
            .as_primitive::<Int32Type>()
            .values()
            .iter()
            .map(|&v| v as i64)
            .collect(),
        DataType::UInt32 => col
            .as_primitive::<UInt32Type>()
            .values()
            .iter()
            .map(|&v| v as i64)
            .collect(),
        DataType::UInt64 => col
            .as_primitive::<UInt64Type>()
            .values()
            .iter()
            .map(|&v| v as i64)
            .collect(),
        other => {
            return Err(invalid(
                path,
                format!("the id column has type {other}, expected an integer"),
            ))
        }
    })
}

/// Calls `push(values, lo, hi)` for each row of a list column, the row being
/// `values[lo..hi]`; refuses null rows and null values (a null would read as 0).
fn for_each_list_row(
    path: &Path,
    col: &ArrayRef,
    mut push: impl FnMut(&ArrayRef, usize, usize) -> Result<()>,
) -> Result<()> {
    let mut row = |values: &ArrayRef, i: usize, lo: usize, hi: usize| -> Result<()> {
        if values.null_count() > 0 && (lo..hi).any(|j| values.is_null(j)) {
            return Err(invalid(
                path,
                format!("row {i} of a list column holds a null"),
            ));
        }
        push(values, lo, hi)
    };
    fn rows<O: OffsetSizeTrait>(
        path: &Path,
        list: &arrow_array::GenericListArray<O>,
        row: &mut impl FnMut(&ArrayRef, usize, usize, usize) -> Result<()>,
    ) -> Result<()> {
        let offsets = list.value_offsets();
        for i in 0..list.len() {
            if list.is_null(i) {
                return Err(invalid(path, format!("row {i} of a list column is null")));
            }
            row(
                list.values(),
                i,
                offsets[i].as_usize(),
                offsets[i + 1].as_usize(),
            )?;
        }
        Ok(())
    }
    match col.data_type() {
        DataType::List(_) => rows(path, col.as_list::<i32>(), &mut row),
        DataType::LargeList(_) => rows(path, col.as_list::<i64>(), &mut row),
        DataType::FixedSizeList(_, _) => {
            let list = col.as_fixed_size_list();
            let len = list.value_length() as usize;
            for i in 0..list.len() {
                if list.is_null(i) {
                    return Err(invalid(path, format!("row {i} of a list column is null")));
                }
                let lo = list.value_offset_at(i);
                row(list.values(), i, lo, lo + len)?;
            }
            Ok(())
        }
        other => Err(invalid(
            path,
            format!("expected a list column, found {other}"),
        )),
    }
}

pub(crate) fn read_vectors(path: &Path) -> Result<Matrix> {
    vectors(
        batches(File::open(path).map_err(io_error(path))?, path)?,
        path,
    )
}

/// Parses the bytes of a vector parquet file (train/test) read from `path`.
pub fn decode_vectors(bytes: &[u8], path: &Path) -> Result<Matrix> {
    vectors(batches(in_memory(bytes), path)?, path)
}

fn vectors(batches: Vec<RecordBatch>, path: &Path) -> Result<Matrix> {
    let mut m = Matrix {
        data: Vec::new(),
        dim: 0,
        ids: Vec::new(),
    };
    for batch in batches {
        let first_row = m.ids.len();
        append_vectors(path, &batch, first_row, &mut m)?;
    }
    m.dim = m.dim.max(1);
    Ok(m)
}

/// Appends the rows of one record batch (the file's rows from `first_row` on) to `m`; a
/// `m.dim` of 0 takes the first row's length, any other must match every row.
pub(crate) fn append_vectors(
    path: &Path,
    batch: &RecordBatch,
    first_row: usize,
    m: &mut Matrix,
) -> Result<()> {
    m.ids.extend(ids_of(path, batch, first_row)?);
    let col = column(path, batch, &["emb", "vector", "embedding"])?;
    let Matrix { data, dim, .. } = m;
    let data_before = data.len();
    for_each_list_row(path, col, |values, lo, hi| {
        let row = first_row + (data.len() - data_before) / (*dim).max(1);
        if *dim == 0 {
            *dim = hi - lo;
            if *dim == 0 {
                return Err(invalid(path, "the first vector is empty"));
            }
        } else if hi - lo != *dim {
            return Err(invalid(
                path,
                format!("vector {row} has {} values, the first had {dim}", hi - lo),
            ));
        }
        match values.data_type() {
            DataType::Float32 => {
                data.extend_from_slice(&values.as_primitive::<Float32Type>().values()[lo..hi])
            }
            DataType::Float64 => data.extend(
                values.as_primitive::<Float64Type>().values()[lo..hi]
                    .iter()
                    .map(|&v| v as f32),
            ),
            // Widened: every float16 and uint8 value is an f32 exactly.
            DataType::Float16 => data.extend(
                values.as_primitive::<Float16Type>().values()[lo..hi]
                    .iter()
                    .map(|v| v.to_f32()),
            ),
            DataType::UInt8 => data.extend(
                values.as_primitive::<UInt8Type>().values()[lo..hi]
                    .iter()
                    .map(|&v| f32::from(v)),
            ),
            other => {
                return Err(invalid(
                    path,
                    format!("vector values have type {other}, expected float"),
                ))
            }
        }
        Ok(())
    })
}

/// Reads VectorDBBench's `neighbors.parquet`: `id` and `neighbors_id` (list of int64).
pub fn read_neighbors(path: &Path) -> Result<Neighbors> {
    neighbors(
        batches(File::open(path).map_err(io_error(path))?, path)?,
        path,
    )
}

/// Parses the bytes of a ground-truth parquet file read from `path`.
pub fn decode_neighbors(bytes: &[u8], path: &Path) -> Result<Neighbors> {
    neighbors(batches(in_memory(bytes), path)?, path)
}

fn neighbors(batches: Vec<RecordBatch>, path: &Path) -> Result<Neighbors> {
    let mut query_ids = Vec::new();
    let mut lists = Vec::new();
    for batch in batches {
        query_ids.extend(ids_of(path, &batch, query_ids.len())?);
        let col = column(path, &batch, &["neighbors_id", "neighbors"])?;
        for_each_list_row(path, col, |values, lo, hi| {
            let ids: Vec<i64> = match values.data_type() {
                DataType::Int64 => values.as_primitive::<Int64Type>().values()[lo..hi].to_vec(),
                DataType::Int32 => values.as_primitive::<Int32Type>().values()[lo..hi]
                    .iter()
                    .map(|&v| v as i64)
                    .collect(),
                other => {
                    return Err(invalid(
                        path,
                        format!("neighbour ids have type {other}, expected integers"),
                    ))
                }
            };
            lists.push(ids);
            Ok(())
        })?;
    }
    if lists.is_empty() {
        return Err(invalid(path, "the ground-truth file has no rows"));
    }
    Ok(Neighbors { query_ids, lists })
}

fn write_batch(path: &Path, batch: RecordBatch) -> Result<()> {
    let file = File::create(path).map_err(io_error(path))?;
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .build();
    let mut writer = ArrowWriter::try_new(file, batch.schema(), Some(props))
        .map_err(|e| invalid(path, e.to_string()))?;
    writer
        .write(&batch)
        .map_err(|e| invalid(path, e.to_string()))?;
    writer.close().map_err(|e| invalid(path, e.to_string()))?;
    Ok(())
}

/// Writes `neighbors.parquet` in VectorDBBench's layout.
pub fn write_neighbors(path: &Path, neighbors: &Neighbors) -> Result<()> {
    let mut lists = ListBuilder::new(Int64Builder::new());
    for l in &neighbors.lists {
        lists.values().append_slice(l);
        lists.append(true);
    }
    let lists = lists.finish();
    let schema = Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("neighbors_id", lists.data_type().clone(), true),
    ]);
    let batch = RecordBatch::try_new(
        Arc::new(schema),
        vec![
            Arc::new(Int64Array::from(neighbors.query_ids.clone())),
            Arc::new(lists),
        ],
    )
    .map_err(|e| invalid(path, e.to_string()))?;
    write_batch(path, batch)
}

/// Writes vectors as `id`, `emb` parquet (VectorDBBench's train/test layout).
pub fn write_vectors(path: &Path, m: &Matrix) -> Result<()> {
    let mut w = VectorWriter::create(path, m.dim, ElementType::Float32)?;
    w.append(&m.ids, &m.data)?;
    w.finish()
}

/// Rows per row group of a float16 vector file.
const FLOAT16_ROW_GROUP: usize = 4096;

/// Writes a vector file a block at a time (one row group per block; float16 files in row
/// groups of `FLOAT16_ROW_GROUP`), so sets larger than memory can be written.
pub struct VectorWriter {
    path: std::path::PathBuf,
    dim: usize,
    element: ElementType,
    schema: Arc<Schema>,
    writer: ArrowWriter<File>,
}

impl VectorWriter {
    /// A file of `dim`-dimensional vectors whose values are stored as `element`: float32, or
    /// float16 (half the bytes; values are rounded to nearest even, and one beyond float16's
    /// range is refused). uint8 is not written.
    pub fn create(path: &Path, dim: usize, element: ElementType) -> Result<Self> {
        let item_type = match element {
            ElementType::Float32 => DataType::Float32,
            ElementType::Float16 => DataType::Float16,
            ElementType::Uint8 => {
                return Err(invalid(
                    path,
                    "vector files are written as float32 or float16",
                ))
            }
        };
        let item = Field::new("item", item_type, true);
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("emb", DataType::List(Arc::new(item)), true),
        ]));
        let file = File::create(path).map_err(io_error(path))?;
        let mut props =
            WriterProperties::builder().set_compression(Compression::ZSTD(ZstdLevel::default()));
        if element == ElementType::Float16 {
            // Parquet keeps float16 as 2-byte fixed-length values, which its writer buffers
            // as one heap object each until the row group closes (~20x their size): small row
            // groups keep a block's write within memory.
            props = props.set_max_row_group_row_count(Some(FLOAT16_ROW_GROUP));
            // And no statistics: their min and max of a float16 page are slices that keep
            // the page's whole source buffer alive until the file closes (1.5 KB a 768-d
            // row: the whole set, measured), and nothing reads min/max of vector values.
            props = props.set_statistics_enabled(EnabledStatistics::None);
        }
        let writer = ArrowWriter::try_new(file, schema.clone(), Some(props.build()))
            .map_err(|e| invalid(path, e.to_string()))?;
        Ok(Self {
            path: path.to_path_buf(),
            dim,
            element,
            schema,
            writer,
        })
    }

    /// Appends rows: `ids.len()` vectors of `dim` values each in `data`.
    pub fn append(&mut self, ids: &[i64], data: &[f32]) -> Result<()> {
        if data.len() != ids.len() * self.dim {
            return Err(invalid(
                &self.path,
                format!(
                    "{} values for {} rows of dimension {}",
                    data.len(),
                    ids.len(),
                    self.dim
                ),
            ));
        }
        if self.element != ElementType::Float16 {
            return self.write_rows(ids, data);
        }
        // A row group at a time: the writer turns each float16 value into a heap object of
        // its own, and glibc keeps those freed pages unless asked to give them back.
        for (ids, data) in ids
            .chunks(FLOAT16_ROW_GROUP)
            .zip(data.chunks(FLOAT16_ROW_GROUP * self.dim.max(1)))
        {
            self.write_rows(ids, data)?;
            diskvec_vector::release_freed_memory();
        }
        Ok(())
    }

    fn write_rows(&mut self, ids: &[i64], data: &[f32]) -> Result<()> {
        let embs: ArrayRef = match self.element {
            ElementType::Float16 => {
                let mut embs = ListBuilder::new(Float16Builder::with_capacity(data.len()));
                let mut rounded = Vec::with_capacity(self.dim);
                for (row, values) in data.chunks_exact(self.dim.max(1)).enumerate() {
                    rounded.clear();
                    rounded.extend_from_slice(values);
                    ElementType::Float16
                        .round_in_place(&mut rounded)
                        .map_err(|e| invalid(&self.path, format!("row {}: {e}", ids[row])))?;
                    for &x in &rounded {
                        embs.values().append_value(half::f16::from_f32(x));
                    }
                    embs.append(true);
                }
                Arc::new(embs.finish())
            }
            _ => {
                let mut embs = ListBuilder::new(Float32Builder::with_capacity(data.len()));
                for row in data.chunks_exact(self.dim.max(1)) {
                    embs.values().append_slice(row);
                    embs.append(true);
                }
                Arc::new(embs.finish())
            }
        };
        let batch = RecordBatch::try_new(
            self.schema.clone(),
            vec![Arc::new(Int64Array::from(ids.to_vec())), embs],
        )
        .map_err(|e| invalid(&self.path, e.to_string()))?;
        self.writer
            .write(&batch)
            .and_then(|_| self.writer.flush())
            .map_err(|e| invalid(&self.path, e.to_string()))
    }

    pub fn finish(self) -> Result<()> {
        let path = self.path;
        self.writer
            .close()
            .map(|_| ())
            .map_err(|e| invalid(&path, e.to_string()))
    }
}
