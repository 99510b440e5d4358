//! `PUT` and `DELETE /collections/{c}/vectors/{name}`: adding a vector space to a
//! collection (`{"dense": {"size", "distance", "multivector_config"?}}` or `{"sparse":
//! {"modifier"?}}`) and deleting one with every point's vector in it.

use std::time::Instant;

use axum::body::Bytes;
use axum::extract::{Path, State};
use diskvec_db::NewSpace;
use serde_json::{json, Map, Value};

use crate::convert::parse_body;
use crate::envelope::{ok, ApiError, ApiResult};
use crate::{blocking, AppState};

/// The space a body describes, by the collection-create rules of its kind.
fn new_space(name: &str, body: &Value) -> Result<NewSpace, ApiError> {
    let named = |kind: &str, v: &Value| {
        let mut spaces = Map::new();
        spaces.insert(name.to_string(), v.clone());
        json!({ kind: Value::Object(spaces) })
    };
    match (body.get("dense"), body.get("sparse")) {
        (Some(dense), None) => {
            // Qdrant's schema bounds, checked before anything else (422 naming the field).
            if let Some(size) = dense.get("size").and_then(Value::as_u64) {
                if size == 0 || size > diskvec_db::MAX_DIM as u64 {
                    return Err(ApiError::validation(format!(
                        "dense.size: value {size} invalid, must be from 1 to {}",
                        diskvec_db::MAX_DIM
                    )));
                }
            }
            let config = crate::convert::collection_config(&named("vectors", dense))?;
            Ok(match (config.dense.first(), config.multi.first()) {
                (Some(s), _) => NewSpace::Dense(s.clone()),
                (None, Some(s)) => NewSpace::Multi(s.clone()),
                (None, None) => return Err(ApiError::bad_request("dense.size is missing")),
            })
        }
        (None, Some(sparse)) => {
            let mut body = named("sparse_vectors", sparse);
            body["vectors"] = json!({});
            let config = crate::convert::collection_config(&body)?;
            config
                .sparse
                .first()
                .map(|s| NewSpace::Sparse(s.clone()))
                .ok_or_else(|| ApiError::bad_request("sparse must be an object"))
        }
        _ => Err(ApiError::validation(
            "the body must be {\"dense\": {\"size\", \"distance\"}} or {\"sparse\": {...}}",
        )),
    }
}

pub async fn create(
    State(s): State<AppState>,
    Path((name, vector)): Path<(String, String)>,
    body: Bytes,
) -> ApiResult {
    let t = Instant::now();
    let body = parse_body(&body)?;
    let space = new_space(&vector, &body)?;
    let col = s.db.collection(&name)?;
    blocking(move || Ok(col.create_space(space)?)).await?;
    Ok(ok(json!({"operation_id": 0, "status": "completed"}), t))
}

pub async fn delete(
    State(s): State<AppState>,
    Path((name, vector)): Path<(String, String)>,
) -> ApiResult {
    let t = Instant::now();
    let col = s.db.collection(&name)?;
    blocking(move || Ok(col.delete_space(&vector)?)).await?;
    Ok(ok(json!({"operation_id": 0, "status": "completed"}), t))
}
