//! Python objects to JSON values and back, for payloads, filters and point ids.
//!
//! Done here rather than through `json.dumps` so that what JSON cannot hold is refused instead
//! of coerced (`json.dumps` turns the key `1` into `"1"` and NaN into a bare `NaN`), and so
//! that the error names where in the value the problem is.

use diskvec_db::PointId;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use pyo3::IntoPyObjectExt;
use serde_json::{Map, Number, Value};

/// Deepest nesting of lists and dicts taken. The database stores payloads as JSON and reads
/// them back with serde_json, whose parser stops at 128 levels: a deeper payload would be
/// written but could not be read back when the log is replayed. Also stops cycles.
pub const MAX_DEPTH: usize = 64;

/// Why a value was refused, and where in it (innermost step last).
pub struct JsonError {
    path: Vec<String>,
    message: String,
}

impl JsonError {
    fn new(message: impl Into<String>) -> Self {
        Self {
            path: Vec::new(),
            message: message.into(),
        }
    }

    fn at(mut self, step: String) -> Self {
        self.path.push(step);
        self
    }

    /// `what` names the value as a whole, say `point 7: payload`.
    pub fn describe(&self, what: &str) -> String {
        let mut at = what.to_string();
        for step in self.path.iter().rev() {
            at.push_str(step);
        }
        format!("{at}: {}", self.message)
    }
}

fn type_name(v: &Bound<'_, PyAny>) -> String {
    v.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into())
}

/// Numpy scalars and arrays: their `tolist()` gives plain Python values. Recognised by their
/// type's module, so numpy need not be imported here.
fn is_numpy(v: &Bound<'_, PyAny>) -> bool {
    v.get_type()
        .module()
        .is_ok_and(|m| m.to_string_lossy().starts_with("numpy"))
        && v.hasattr("tolist").unwrap_or(false)
}

fn text(s: &Bound<'_, PyString>) -> Result<String, JsonError> {
    s.to_cow()
        .map(|c| c.into_owned())
        .map_err(|_| JsonError::new("string is not valid Unicode (it holds a lone surrogate)"))
}

/// A JSON value of `v`: None, bool, int (64-bit), finite float, str, list, tuple, dict with
/// str keys, or numpy values of those.
pub fn to_json(v: &Bound<'_, PyAny>) -> Result<Value, JsonError> {
    value(v, 0)
}

fn value(v: &Bound<'_, PyAny>, depth: usize) -> Result<Value, JsonError> {
    if v.is_none() {
        return Ok(Value::Null);
    }
    if let Ok(b) = v.cast::<PyBool>() {
        return Ok(Value::Bool(b.is_true()));
    }
    if let Ok(i) = v.cast::<PyInt>() {
        if let Ok(n) = i.extract::<i64>() {
            return Ok(Value::from(n));
        }
        return i.extract::<u64>().map(Value::from).map_err(|_| {
            JsonError::new(format!(
                "integer {i} does not fit in 64 bits (JSON payload integers are i64 or u64)"
            ))
        });
    }
    if let Ok(f) = v.cast::<PyFloat>() {
        let x = f.value();
        return Number::from_f64(x).map(Value::Number).ok_or_else(|| {
            JsonError::new(format!("{x} is not a JSON number (only finite floats are)"))
        });
    }
    if let Ok(s) = v.cast::<PyString>() {
        return text(s).map(Value::String);
    }
    if depth >= MAX_DEPTH {
        return Err(JsonError::new(format!(
            "nested more than {MAX_DEPTH} levels deep (or holds itself)"
        )));
    }
    if let Ok(d) = v.cast::<PyDict>() {
        let mut out = Map::new();
        for (k, item) in d.iter() {
            let Ok(key) = k.cast::<PyString>() else {
                return Err(JsonError::new(format!(
                    "key {} is of type {}; JSON object keys are strings",
                    k.repr().map(|r| r.to_string()).unwrap_or_default(),
                    type_name(&k)
                )));
            };
            let key = text(key)?;
            let item = value(&item, depth + 1).map_err(|e| e.at(format!("[{key:?}]")))?;
            out.insert(key, item);
        }
        return Ok(Value::Object(out));
    }
    if v.cast::<PyList>().is_ok() || v.cast::<PyTuple>().is_ok() {
        let mut out = Vec::new();
        for (i, item) in v
            .try_iter()
            .map_err(|e| JsonError::new(e.to_string()))?
            .enumerate()
        {
            let item = item.map_err(|e| JsonError::new(e.to_string()))?;
            out.push(value(&item, depth + 1).map_err(|e| e.at(format!("[{i}]")))?);
        }
        return Ok(Value::Array(out));
    }
    if is_numpy(v) {
        let plain = v
            .call_method0("tolist")
            .map_err(|e| JsonError::new(e.to_string()))?;
        return value(&plain, depth + 1);
    }
    Err(JsonError::new(format!(
        "a value of type {} is not JSON (use None, bool, int, float, str, list or dict)",
        type_name(v)
    )))
}

/// A JSON value as plain Python objects.
pub fn to_py<'py>(py: Python<'py>, v: &Value) -> PyResult<Bound<'py, PyAny>> {
    match v {
        Value::Null => Ok(py.None().into_bound(py)),
        Value::Bool(b) => b.into_bound_py_any(py),
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                u.into_bound_py_any(py)
            } else if let Some(i) = n.as_i64() {
                i.into_bound_py_any(py)
            } else {
                n.as_f64().unwrap_or(f64::NAN).into_bound_py_any(py)
            }
        }
        Value::String(s) => s.into_bound_py_any(py),
        Value::Array(items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(to_py(py, item)?)?;
            }
            Ok(list.into_any())
        }
        Value::Object(map) => Ok(map_to_py(py, map)?.into_any()),
    }
}

pub fn map_to_py<'py>(py: Python<'py>, map: &Map<String, Value>) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (k, item) in map {
        d.set_item(k, to_py(py, item)?)?;
    }
    Ok(d)
}

/// A point id: a non-negative int below 2**64 or a UUID string. Bools and floats are refused
/// even though Python would compare `True == 1` and `1.0 == 1`.
pub fn point_id(v: &Bound<'_, PyAny>) -> Result<PointId, String> {
    if v.cast::<PyBool>().is_err() && type_name(v) != "bool" && type_name(v) != "bool_" {
        if let Ok(i) = v.cast::<PyInt>() {
            return i.extract::<u64>().map(PointId::Num).map_err(|_| {
                format!("point id {i} is out of range: ids are integers from 0 to 2**64-1 (non-negative) or UUID strings")
            });
        }
        if let Ok(s) = v.cast::<PyString>() {
            return PointId::parse_uuid(&s.to_string_lossy());
        }
        if is_numpy(v) && v.hasattr("__index__").unwrap_or(false) {
            if let Ok(plain) = v.call_method0("tolist") {
                if plain.cast::<PyInt>().is_ok() {
                    return point_id(&plain);
                }
            }
        }
    }
    Err(format!(
        "point id {} is of type {}: ids are non-negative integers or UUID strings",
        v.repr().map(|r| r.to_string()).unwrap_or_default(),
        type_name(v)
    ))
}

/// An id as Python sees it: an int, or the UUID in canonical lowercase hyphenated form.
pub fn id_to_py<'py>(py: Python<'py>, id: PointId) -> PyResult<Bound<'py, PyAny>> {
    match id {
        PointId::Num(n) => n.into_bound_py_any(py),
        PointId::Uuid(_) => id.to_string().into_bound_py_any(py),
    }
}
