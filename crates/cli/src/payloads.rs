//! Payloads from a parquet file: an integer `id` column, and scalar columns (string, integer,
//! float, bool) that become the payload fields of the point with that id.

use std::collections::HashMap;
use std::fs::File;
use std::path::Path;

use anyhow::{anyhow, bail, Context};
use arrow_array::cast::AsArray;
use arrow_array::types::{
    Float32Type, Float64Type, Int16Type, Int32Type, Int64Type, Int8Type, UInt16Type, UInt32Type,
    UInt64Type, UInt8Type,
};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::DataType;
use diskvec_db::Payload;
use parquet::arrow::arrow_reader::{ArrowReaderOptions, ParquetRecordBatchReaderBuilder};
use serde_json::Value;

/// Payloads by point id.
pub type Payloads = HashMap<u64, Payload>;

pub fn read_payloads(path: &Path) -> anyhow::Result<Payloads> {
    let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let read = || -> anyhow::Result<Payloads> {
        // As in diskvec-dataset: the Parquet schema alone is enough, and decoding the
        // embedded Arrow schema lets a few damaged bytes reserve gigabytes.
        let options = ArrowReaderOptions::new().with_skip_arrow_metadata(true);
        let reader = ParquetRecordBatchReaderBuilder::try_new_with_options(file, options)
            .and_then(|b| b.with_batch_size(8192).build())
            .map_err(|e| anyhow!("not a readable parquet file: {e}"))?;
        let mut out = Payloads::new();
        for batch in reader {
            let batch = batch.map_err(|e| anyhow!("corrupt parquet data: {e}"))?;
            add_batch(&batch, &mut out)?;
        }
        Ok(out)
    };
    // The parquet crate panics on some malformed files instead of returning an error.
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(read))
        .unwrap_or_else(|_| Err(anyhow!("corrupt parquet file")));
    outcome.with_context(|| format!("reading payloads from {}", path.display()))
}

fn add_batch(batch: &RecordBatch, out: &mut Payloads) -> anyhow::Result<()> {
    let ids = batch
        .column_by_name("id")
        .ok_or_else(|| anyhow!("no column named id"))?;
    if ids.null_count() > 0 {
        bail!("the id column has nulls");
    }
    let schema = batch.schema();
    let fields: Vec<(&str, &ArrayRef)> = schema
        .fields()
        .iter()
        .zip(batch.columns())
        .filter(|(f, _)| f.name() != "id")
        .map(|(f, c)| (f.name().as_str(), c))
        .collect();
    for row in 0..batch.num_rows() {
        let id = match scalar(ids, row) {
            Some(Value::Number(n)) if n.is_u64() => n.as_u64().unwrap_or_default(),
            Some(v) => bail!("row {row}: id {v} is not an unsigned integer"),
            None => bail!(
                "the id column has type {}, expected an integer",
                ids.data_type()
            ),
        };
        let mut payload = Payload::new();
        for (name, col) in &fields {
            if col.is_null(row) {
                // A null is an absent field, as Qdrant's `is_empty` sees it.
                continue;
            }
            let value = scalar(col, row).ok_or_else(|| {
                anyhow!(
                    "column {name} has type {}: payload columns must be strings, integers, floats or booleans",
                    col.data_type()
                )
            })?;
            payload.insert(name.to_string(), value);
        }
        if out.insert(id, payload).is_some() {
            bail!("id {id} has two rows");
        }
    }
    Ok(())
}

/// The JSON value of one non-null cell; `None` for a column type payloads do not take.
fn scalar(col: &ArrayRef, row: usize) -> Option<Value> {
    macro_rules! num {
        ($t:ty) => {
            Value::from(col.as_primitive::<$t>().value(row))
        };
    }
    Some(match col.data_type() {
        DataType::Utf8 => Value::from(col.as_string::<i32>().value(row)),
        DataType::LargeUtf8 => Value::from(col.as_string::<i64>().value(row)),
        DataType::Utf8View => Value::from(col.as_string_view().value(row)),
        DataType::Boolean => Value::from(col.as_boolean().value(row)),
        DataType::Int8 => num!(Int8Type),
        DataType::Int16 => num!(Int16Type),
        DataType::Int32 => num!(Int32Type),
        DataType::Int64 => num!(Int64Type),
        DataType::UInt8 => num!(UInt8Type),
        DataType::UInt16 => num!(UInt16Type),
        DataType::UInt32 => num!(UInt32Type),
        DataType::UInt64 => num!(UInt64Type),
        // JSON has no NaN or infinity: such a value becomes null.
        DataType::Float32 => Value::from(col.as_primitive::<Float32Type>().value(row) as f64),
        DataType::Float64 => num!(Float64Type),
        _ => return None,
    })
}
