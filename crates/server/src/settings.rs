//! The settings a collection's body sets at creation and `PATCH /collections/{name}`
//! changes later: strict mode, metadata, HNSW settings (the collection's and each space's),
//! a sparse space's modifier, the vacuum threshold, where sealed segments keep payloads.

use diskvec_db::{CollectionConfig, SparseModifier, StrictMode};
use serde_json::Value;

use crate::convert::opt_uint;
use crate::envelope::ApiError;
use crate::quantization;

type Result<T> = std::result::Result<T, ApiError>;

/// Applies every setting `body` names to `c`; what it does not name stays.
pub fn apply(c: &mut CollectionConfig, body: &Value) -> Result<()> {
    strict_and_metadata(c, body)?;
    if let Some(h) = body.get("hnsw_config").filter(|h| !h.is_null()) {
        if let Some(m) = opt_uint(h.get("m"), "hnsw_config.m")? {
            c.hnsw_m = m;
        }
        if let Some(ef) = opt_uint(h.get("ef_construct"), "hnsw_config.ef_construct")? {
            c.hnsw_ef_construction = ef;
        }
    }
    if let Some(q) = quantization::parse(body.get("quantization_config"), "quantization_config")? {
        c.quantization = q;
    }
    let mut on_disk = None;
    if let Some(Value::Object(spaces)) = body.get("vectors") {
        for (name, params) in spaces {
            let space = c
                .dense
                .iter_mut()
                .chain(c.multi.iter_mut())
                .find(|s| s.name == *name)
                .ok_or_else(|| {
                    ApiError::bad_request(format!(
                        "Wrong input: Not existing vector name error: {name}"
                    ))
                })?;
            if let Some(h) = params.get("hnsw_config").filter(|h| !h.is_null()) {
                let at = format!("vectors.{name}.hnsw_config");
                if let Some(m) = opt_uint(h.get("m"), &format!("{at}.m"))? {
                    space.hnsw.m = Some(m);
                }
                if let Some(ef) = opt_uint(h.get("ef_construct"), &format!("{at}.ef_construct"))? {
                    space.hnsw.ef_construct = Some(ef);
                }
            }
            let at = format!("vectors.{name}.quantization_config");
            if let Some(q) = quantization::parse(params.get("quantization_config"), &at)? {
                space.quantization = q;
            }
            // diskvec keeps (or caches) nodes per collection, not per space.
            match params.get("on_disk") {
                None | Some(Value::Null) => {}
                Some(Value::Bool(b)) => on_disk = Some(on_disk.unwrap_or(true) && *b),
                Some(other) => {
                    return Err(ApiError::bad_request(format!(
                        "vectors.{name}.on_disk must be true or false, got {other}"
                    )))
                }
            }
        }
    }
    if let Some(o) = on_disk {
        c.on_disk = o;
    }
    if let Some(Value::Object(spaces)) = body.get("sparse_vectors") {
        for (name, params) in spaces {
            let space = c
                .sparse
                .iter_mut()
                .find(|s| s.name == *name)
                .ok_or_else(|| {
                    ApiError::bad_request(format!(
                        "Wrong input: Not existing vector name error: {name}"
                    ))
                })?;
            if let Some(on_disk) = crate::convert::sparse_on_disk(params, name)? {
                space.on_disk = Some(on_disk);
            }
            match params.get("modifier") {
                None | Some(Value::Null) => {}
                Some(Value::String(m)) if m == "idf" => space.modifier = SparseModifier::Idf,
                Some(Value::String(m)) if m == "none" => space.modifier = SparseModifier::None,
                Some(other) => {
                    return Err(ApiError::bad_request(format!(
                        "sparse_vectors.{name}.modifier must be \"idf\" or \"none\", got {other}"
                    )))
                }
            }
        }
    }
    if let Some(on_ssd) = on_disk_payload(
        body.get("params").and_then(|p| p.get("on_disk_payload")),
        "params.on_disk_payload",
    )? {
        c.on_disk_payload = on_ssd;
    }
    max_segment_size(c, body)?;
    if let Some(o) = body.get("optimizers_config").filter(|o| !o.is_null()) {
        match o.get("deleted_threshold") {
            None | Some(Value::Null) => {}
            Some(v) => match v.as_f64().filter(|t| (0.0..=1.0).contains(t)) {
                Some(t) => c.vacuum_threshold = t,
                None => {
                    return Err(ApiError::bad_request(format!(
                        "optimizers_config.deleted_threshold must be from 0 to 1, got {v}"
                    )))
                }
            },
        }
    }
    Ok(())
}

/// Qdrant's `optimizers_config.max_segment_size`, in KB of float32 vectors as Qdrant counts
/// it, when given: the most points a merge may put in one segment (`max_segment_points`).
/// Fewer, larger segments read less a query (each segment's walk pays its own way in from
/// its entry) and cost longer merges. Below the seal threshold it is refused.
pub fn max_segment_size(c: &mut CollectionConfig, body: &Value) -> Result<()> {
    let Some(o) = body.get("optimizers_config").filter(|o| !o.is_null()) else {
        return Ok(());
    };
    let Some(kb) = opt_uint(
        o.get("max_segment_size"),
        "optimizers_config.max_segment_size",
    )?
    else {
        return Ok(());
    };
    let points = crate::convert::points_in_kb(c, kb);
    if points < c.seal_threshold {
        return Err(ApiError::bad_request(format!(
            "optimizers_config.max_segment_size ({kb} KB: {points} points of this collection) \
             must hold at least the indexing threshold ({} points)",
            c.seal_threshold
        )));
    }
    c.max_segment_points = points;
    Ok(())
}

/// Qdrant's `on_disk_payload` at `place`, when given: sealed segments leave their payloads
/// on SSD.
pub fn on_disk_payload(field: Option<&Value>, place: &str) -> Result<Option<bool>> {
    match field {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(other) => Err(ApiError::bad_request(format!(
            "{place} must be true or false, got {other}"
        ))),
    }
}

/// Strict mode (merged into what is set: a patch names only what it changes) and metadata
/// (merged by key; a key set to null is removed).
pub fn strict_and_metadata(c: &mut CollectionConfig, body: &Value) -> Result<()> {
    if let Some(v) = body.get("strict_mode_config").filter(|v| !v.is_null()) {
        let change: StrictMode = serde_json::from_value(v.clone())
            .map_err(|e| ApiError::bad_request(format!("strict_mode_config: {e}")))?;
        c.strict_mode.merge(change);
    }
    match body.get("metadata") {
        None | Some(Value::Null) => {}
        Some(Value::Object(m)) => {
            for (key, value) in m {
                if value.is_null() {
                    c.metadata.remove(key);
                } else {
                    c.metadata.insert(key.clone(), value.clone());
                }
            }
        }
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "metadata must be a JSON object, got {other}"
            )))
        }
    }
    Ok(())
}
