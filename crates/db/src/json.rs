//! Qdrant's JSON forms of the values a request carries (numbers, vectors, point ids,
//! search parameters), read the same way by the HTTP server and the Python API.
//!
//! A value of the wrong shape is `DbError::BadRequest`; one that has the shape but breaks a
//! rule of Qdrant's schema (an empty multivector row, repeated sparse indices) is
//! `DbError::Validation`, which Qdrant answers with 422.

use serde_json::Value;

use crate::filter::Filter;
use crate::{DbError, PointId, Result, SparseVector};

fn bad(message: impl Into<String>) -> DbError {
    DbError::BadRequest(message.into())
}

/// An optional non-negative integer field (absent or `null`: `None`).
pub fn opt_uint(v: Option<&Value>, what: &str) -> Result<Option<usize>> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(x) => x
            .as_u64()
            .map(|n| Some(n as usize))
            .ok_or_else(|| bad(format!("{what} must be a non-negative integer"))),
    }
}

/// An optional positive integer field (absent or `null`: `None`).
pub fn opt_positive(v: Option<&Value>, what: &str) -> Result<Option<usize>> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(x) => x
            .as_u64()
            .filter(|&n| n > 0)
            .map(|n| Some(n as usize))
            .ok_or_else(|| bad(format!("{what} must be a positive integer"))),
    }
}

/// `params.hnsw_ef` (the search list): a positive integer; 0 fails validation in Qdrant's
/// words.
pub fn search_ef(v: Option<&Value>) -> Result<Option<usize>> {
    if v.and_then(Value::as_u64) == Some(0) {
        return Err(DbError::Validation(
            "params.hnsw_ef: value 0 invalid, must be 1 or larger".into(),
        ));
    }
    opt_positive(v, "params.hnsw_ef")
}

/// `params.exact`: compare with every matching point instead of searching the indexes.
pub fn search_exact(params: Option<&Value>) -> Result<bool> {
    match params.and_then(|p| p.get("exact")) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(bad("params.exact must be true or false")),
    }
}

pub fn point_id(v: &Value) -> Result<PointId> {
    PointId::from_json(v).map_err(bad)
}

/// A list of numbers.
pub fn dense_vector(v: &Value, what: &str) -> Result<Vec<f32>> {
    let wrong = || bad(format!("{what} must be a list of numbers"));
    v.as_array()
        .ok_or_else(wrong)?
        .iter()
        .map(|x| x.as_f64().map(|f| f as f32).ok_or_else(wrong))
        .collect()
}

/// `{"indices": [...], "values": [...]}`.
pub fn sparse_vector(v: &Value, what: &str) -> Result<SparseVector> {
    let wrong = |m: &str| bad(format!("{what}: {m}"));
    let indices = v
        .get("indices")
        .and_then(Value::as_array)
        .ok_or_else(|| wrong("indices must be a list of unsigned integers"))?
        .iter()
        .map(|i| {
            i.as_u64()
                .and_then(|i| u32::try_from(i).ok())
                .ok_or_else(|| wrong("indices must be a list of unsigned 32-bit integers"))
        })
        .collect::<Result<Vec<u32>>>()?;
    let values = v
        .get("values")
        .and_then(Value::as_array)
        .ok_or_else(|| wrong("values must be a list of numbers"))?
        .iter()
        .map(|x| {
            x.as_f64()
                .map(|f| f as f32)
                .ok_or_else(|| wrong("values must be a list of numbers"))
        })
        .collect::<Result<Vec<f32>>>()?;
    // Qdrant's validation wording (its suite checks it).
    if values.len() != indices.len() {
        return Err(DbError::Validation(format!(
            "{what}.values: Validation error: must be the same length as indices [{{}}]"
        )));
    }
    let mut sorted = indices.clone();
    sorted.sort_unstable();
    if sorted.windows(2).any(|w| w[0] == w[1]) {
        return Err(DbError::Validation(format!(
            "{what}.indices: Validation error: must be unique [{{}}]"
        )));
    }
    Ok(SparseVector { indices, values })
}

/// A multivector: a list of rows of numbers, all of one length.
pub fn multi_rows(rows: &[Value], what: &str) -> Result<Vec<Vec<f32>>> {
    let rows = rows
        .iter()
        .enumerate()
        .map(|(i, row)| dense_vector(row, &format!("{what}[{i}]")))
        .collect::<Result<Vec<_>>>()?;
    // Qdrant's validation words (its suite checks them).
    if rows.iter().any(Vec::is_empty) {
        return Err(DbError::Validation(format!(
            "{what}.data: all vectors must be non-empty"
        )));
    }
    if let Some(odd) = rows.iter().find(|r| r.len() != rows[0].len()) {
        return Err(DbError::Validation(format!(
            "{what}.data: all vectors must have the same dimension, found vector with \
             dimension {}",
            odd.len()
        )));
    }
    Ok(rows)
}

/// An optional filter (absent or `null`: none); a rule of the schema broken is a
/// validation error, anything else a bad filter.
pub fn filter(v: Option<&Value>) -> Result<Option<Filter>> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(f) => Filter::from_json(f).map(Some).map_err(|e| {
            if e.is_validation() {
                DbError::Validation(e.to_string())
            } else {
                DbError::BadFilter(e)
            }
        }),
    }
}
