//! Collection routes: list, create, info, exists, update, delete; payload indexes.

use std::time::Instant;

use axum::body::Bytes;
use axum::extract::{Path, State};
use serde_json::{json, Value};

use crate::convert::{collection_config, collection_info, indexing_threshold_kb, parse_body};
use crate::envelope::{ok, ApiError, ApiResult};
use crate::{blocking, AppState};

pub async fn list(State(s): State<AppState>) -> ApiResult {
    let t = Instant::now();
    let names: Vec<Value> =
        s.db.collection_names()
            .into_iter()
            .map(|n| json!({"name": n}))
            .collect();
    Ok(ok(json!({"collections": names}), t))
}

pub async fn create(State(s): State<AppState>, Path(name): Path<String>, body: Bytes) -> ApiResult {
    let t = Instant::now();
    let body = parse_body(&body)?;
    let config = collection_config(&body)?;
    let indexing_off = indexing_threshold_kb(&body)? == Some(0);
    blocking(move || {
        let col = s.db.create_collection(&name, config)?;
        if indexing_off {
            col.set_indexing(false);
        }
        Ok(())
    })
    .await?;
    Ok(ok(json!(true), t))
}

pub async fn info(State(s): State<AppState>, Path(name): Path<String>) -> ApiResult {
    let t = Instant::now();
    let col = s.db.collection(&name)?;
    let (info, indexed) = blocking(move || {
        let info = col.info();
        let mut indexed = Vec::with_capacity(info.payload_indexes.len());
        for (field, _) in &info.payload_indexes {
            // From the index where it has a structure (no payload read: with payloads on
            // SSD a count would read every one); else the points with a value there.
            if let Some(n) = col.indexed_points(field) {
                indexed.push(n);
                continue;
            }
            let has = json!({"must_not": [{"is_empty": {"key": field}}]});
            let f = diskvec_db::Filter::from_json(&has)
                .map_err(|e| ApiError::bad_request(e.to_string()))?;
            indexed.push(col.count(Some(&f))?);
        }
        Ok((info, indexed))
    })
    .await?;
    Ok(ok(collection_info(&info, &indexed), t))
}

pub async fn exists(State(s): State<AppState>, Path(name): Path<String>) -> ApiResult {
    let t = Instant::now();
    let exists = s.db.collection_names().contains(&name);
    Ok(ok(json!({"exists": exists}), t))
}

/// PATCH: the settings that may change while the collection serves (`settings_change`):
/// HNSW settings of the collection and of each space, a sparse space's modifier, the
/// deleted share that triggers a vacuum, strict mode, metadata. `optimizers_config.
/// indexing_threshold` 0 turns indexing off for a bulk load (Qdrant's recipe), any other
/// value turns it back on.
pub async fn update(State(s): State<AppState>, Path(name): Path<String>, body: Bytes) -> ApiResult {
    let t = Instant::now();
    let col = s.db.collection(&name)?;
    let body = parse_body(&body)?;
    if !body.is_object() {
        return Err(ApiError::bad_request("expected a JSON object"));
    }
    let indexing = indexing_threshold_kb(&body)?;
    blocking(move || {
        let mut refused = None;
        let updated = col.update_settings(|c| {
            crate::settings::apply(c, &body).map_err(|e| {
                let message = e.message.clone();
                refused = Some(e);
                diskvec_db::DbError::BadRequest(message)
            })
        });
        if let Some(e) = refused {
            return Err(e);
        }
        updated?;
        if let Some(kb) = indexing {
            col.set_indexing(kb > 0);
        }
        Ok(())
    })
    .await?;
    Ok(ok(json!(true), t))
}

pub async fn remove(State(s): State<AppState>, Path(name): Path<String>) -> ApiResult {
    let t = Instant::now();
    let existed = blocking(move || match s.db.drop_collection(&name) {
        Ok(()) => Ok(true),
        Err(diskvec_db::DbError::UnknownCollection(_)) => Ok(false),
        Err(e) => Err(e.into()),
    })
    .await?;
    Ok(ok(json!(existed), t))
}

/// `PUT /collections/{name}/index`: `{"field_name": ..., "field_schema": "keyword" |
/// "integer" | "float" | "bool" | "datetime" | "uuid" | "text" | "geo" | {"type": ...}}`
/// (keyword, integer and text fields are indexed; the others are recorded, their filters read the
/// payloads).
pub async fn create_index(
    State(s): State<AppState>,
    Path(name): Path<String>,
    body: Bytes,
) -> ApiResult {
    let t = Instant::now();
    let body = parse_body(&body)?;
    let field = body
        .get("field_name")
        .and_then(Value::as_str)
        .ok_or_else(|| ApiError::bad_request("field_name is missing"))?
        .to_string();
    let (kind, params) = match body.get("field_schema") {
        Some(Value::String(k)) => (k.clone(), None),
        Some(schema @ Value::Object(m)) => {
            let kind = m
                .get("type")
                .and_then(Value::as_str)
                .ok_or_else(|| ApiError::bad_request("field_schema.type is missing"))?;
            let off = |k: &str| m.get(k) == Some(&Value::Bool(false));
            if kind == "integer" && off("lookup") && off("range") {
                return Err(ApiError {
                    status: axum::http::StatusCode::UNPROCESSABLE_ENTITY,
                    message: "Validation error: the 'lookup' and 'range' capabilities can't \
                              be both disabled"
                        .into(),
                    retry_after: None,
                });
            }
            (kind.to_string(), Some(schema.clone()))
        }
        _ => return Err(ApiError::bad_request("field_schema is missing")),
    };
    let col = s.db.collection(&name)?;
    blocking(move || Ok(col.create_payload_index_with(&field, &kind, params)?)).await?;
    Ok(ok(json!({"operation_id": 0, "status": "completed"}), t))
}

pub async fn delete_index(
    State(s): State<AppState>,
    Path((name, field)): Path<(String, String)>,
) -> ApiResult {
    let t = Instant::now();
    let col = s.db.collection(&name)?;
    blocking(move || Ok(col.delete_payload_index(&field)?)).await?;
    Ok(ok(json!({"operation_id": 0, "status": "completed"}), t))
}

/// `POST /collections/aliases`: `{"actions": [{"create_alias": {"alias_name",
/// "collection_name"}}, {"delete_alias": {"alias_name"}}, {"rename_alias":
/// {"old_alias_name", "new_alias_name"}}]}`, applied all or none.
pub async fn update_aliases(State(s): State<AppState>, body: Bytes) -> ApiResult {
    let t = Instant::now();
    let actions = alias_actions(&parse_body(&body)?)?;
    blocking(move || Ok(s.db.update_aliases(&actions)?)).await?;
    Ok(ok(json!(true), t))
}

/// The actions of `POST /collections/aliases`.
pub(crate) fn alias_actions(body: &Value) -> Result<Vec<diskvec_db::AliasAction>, ApiError> {
    let list = body
        .get("actions")
        .and_then(Value::as_array)
        .ok_or_else(|| ApiError::bad_request("actions must be a list"))?;
    let field = |v: &Value, at: &str, key: &str| -> Result<String, ApiError> {
        v.get(key)
            .and_then(Value::as_str)
            .map(String::from)
            .ok_or_else(|| ApiError::bad_request(format!("{at}.{key} must be a name")))
    };
    let mut actions = Vec::with_capacity(list.len());
    for (i, a) in list.iter().enumerate() {
        let at = format!("actions[{i}]");
        let action = if let Some(c) = a.get("create_alias") {
            diskvec_db::AliasAction::Create {
                alias: field(c, &at, "alias_name")?,
                collection: field(c, &at, "collection_name")?,
            }
        } else if let Some(d) = a.get("delete_alias") {
            diskvec_db::AliasAction::Delete {
                alias: field(d, &at, "alias_name")?,
            }
        } else if let Some(r) = a.get("rename_alias") {
            diskvec_db::AliasAction::Rename {
                from: field(r, &at, "old_alias_name")?,
                to: field(r, &at, "new_alias_name")?,
            }
        } else {
            return Err(ApiError::bad_request(format!(
                "{at} must be create_alias, delete_alias or rename_alias"
            )));
        };
        actions.push(action);
    }
    Ok(actions)
}

pub(crate) fn alias_list(aliases: impl Iterator<Item = (String, String)>) -> Value {
    let list: Vec<Value> = aliases
        .map(|(a, c)| json!({"alias_name": a, "collection_name": c}))
        .collect();
    json!({"aliases": list})
}

/// `GET /aliases`.
pub async fn list_aliases(State(s): State<AppState>) -> ApiResult {
    let t = Instant::now();
    Ok(ok(alias_list(s.db.aliases().into_iter()), t))
}

/// `GET /collections/{name}/aliases`.
pub async fn collection_aliases(State(s): State<AppState>, Path(name): Path<String>) -> ApiResult {
    let t = Instant::now();
    let col = s.db.collection(&name)?;
    let target = col.name().to_string();
    let mine =
        s.db.aliases()
            .into_iter()
            .filter(move |(_, c)| *c == target);
    Ok(ok(alias_list(mine), t))
}
