//! Named and sparse vectors between Python and the database: a point's vectors arrive as a
//! dict of space name to a dense vector (a sequence of floats) or a sparse one (a dict of
//! `indices` and `values`); spaces are declared as (name, dim, metric) and (name, modifier).

use diskvec_db::{
    parse_metric, DenseSpace, NamedVectors, SparseModifier, SparseSpace, SparseVector, Vector,
};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::value_err;

/// Dense spaces from (name, dim, metric) triples.
/// A dense space as Python gives it: (name, dim, metric, datatype).
pub type DenseArgs = (String, i128, String, String);

/// A dense or multivector space as Python's `create_collection` gives it: (name, dim,
/// metric, multivector, datatype).
pub type SpaceArgs = (String, i128, String, bool, String);

pub fn dense_spaces(spaces: Vec<DenseArgs>) -> PyResult<Vec<DenseSpace>> {
    spaces
        .into_iter()
        .map(|(name, dim, metric, datatype)| {
            let dim = usize::try_from(dim).map_err(|_| {
                value_err(format!(
                    "vector space {name:?}: dim must be positive, got {dim}"
                ))
            })?;
            let metric = parse_metric(&metric)
                .map_err(|e| value_err(format!("vector space {name:?}: {e}")))?;
            let mut space = DenseSpace::new(&name, dim, metric);
            space.datatype = datatype
                .parse()
                .map_err(|e| value_err(format!("vector space {name:?}: {e}")))?;
            Ok(space)
        })
        .collect()
}

/// Sparse spaces from (name, modifier, on_disk) triples; the modifier is "none" or "idf",
/// `on_disk` puts sealed segments' posting lists on SSD.
pub fn sparse_spaces(spaces: Vec<(String, String, bool)>) -> PyResult<Vec<SparseSpace>> {
    spaces
        .into_iter()
        .map(|(name, modifier, on_disk)| {
            let modifier = match modifier.as_str() {
                "none" => SparseModifier::None,
                "idf" => SparseModifier::Idf,
                other => {
                    return Err(value_err(format!(
                        "sparse space {name:?}: modifier must be \"none\" or \"idf\", got {other:?}"
                    )))
                }
            };
            let mut space = SparseSpace::new(&name, modifier);
            space.on_disk = on_disk.then_some(true);
            Ok(space)
        })
        .collect()
}

/// A sparse vector from a dict of `indices` and `values`.
pub fn sparse_of(v: &Bound<'_, PyDict>, what: &str) -> PyResult<SparseVector> {
    let field = |key: &str| {
        v.get_item(key)?
            .ok_or_else(|| value_err(format!("{what}: a sparse vector needs {key:?}")))
    };
    let indices: Vec<u32> = field("indices")?.extract().map_err(|_| {
        value_err(format!(
            "{what}: indices must be non-negative 32-bit integers"
        ))
    })?;
    let values: Vec<f32> = field("values")?
        .extract()
        .map_err(|_| value_err(format!("{what}: values must be numbers")))?;
    Ok(SparseVector { indices, values })
}

/// One point's vectors from a dict of space name to vector.
pub fn named_of(v: &Bound<'_, PyAny>, what: &str) -> PyResult<NamedVectors> {
    let dict = v
        .cast::<PyDict>()
        .map_err(|_| value_err(format!("{what} must be a dict of space name to vector")))?;
    let mut out = NamedVectors::new();
    for (name, vector) in dict.iter() {
        let name: String = name
            .extract()
            .map_err(|_| value_err(format!("{what}: space names must be strings")))?;
        let at = format!("{what}[{name:?}]");
        let vector = match vector.cast::<PyDict>() {
            Ok(sparse) => Vector::Sparse(sparse_of(sparse, &at)?),
            Err(_) => match vector.extract::<Vec<f32>>() {
                Ok(dense) => Vector::Dense(dense),
                // Rows of numbers: a multivector.
                Err(_) => Vector::Multi(vector.extract().map_err(|_| {
                    value_err(format!(
                        "{at} must be a sequence of numbers (or of rows of numbers)"
                    ))
                })?),
            },
        };
        out.insert(name, vector);
    }
    Ok(out)
}
