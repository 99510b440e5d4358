//! Point writes: upsert, delete, payload and vector updates, one route each and all of them
//! in one `points/batch` request, through one dispatcher (`apply`).

use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use diskvec_db::{Collection, PointId, Rate, StrictMode, UpsertMode};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::convert::{
    filter, parse_body, payload, point_id, point_ids, point_vectors, string_list, upsert_points,
};
use crate::envelope::{ok, ApiError, ApiResult};
use crate::points::collection;
use crate::strict::Limits;
use crate::{blocking, AppState};

#[derive(Deserialize, Default)]
pub struct WriteParams {
    wait: Option<bool>,
    /// Qdrant's `timeout` (seconds; checked by the deadline layer).
    timeout: Option<u64>,
}

/// How long before the request's own deadline a held-back write gives up, so the client
/// gets the database's 503 (nothing written, safe to retry) rather than the 408 of the
/// deadline layer (which cannot say whether the write was applied).
const HELD_BACK_MARGIN: Duration = Duration::from_millis(250);

/// Qdrant's `UpdateResult`. The write is applied (and, by default, durable) before diskvec
/// answers either way; `wait=false` only changes the reported status.
fn update_result(op: u64, params: &WriteParams) -> Value {
    let status = if params.wait.unwrap_or(false) {
        "completed"
    } else {
        "acknowledged"
    };
    json!({"operation_id": op, "status": status})
}

/// The kinds of write, by the names `points/batch` gives them.
#[derive(Clone, Copy, Debug)]
pub enum Write {
    Upsert,
    Delete,
    SetPayload,
    OverwritePayload,
    DeletePayload,
    ClearPayload,
    UpdateVectors,
    DeleteVectors,
}

impl Write {
    pub fn named(name: &str) -> Option<Self> {
        Some(match name {
            "upsert" => Self::Upsert,
            "delete" => Self::Delete,
            "set_payload" => Self::SetPayload,
            "overwrite_payload" => Self::OverwritePayload,
            "delete_payload" => Self::DeletePayload,
            "clear_payload" => Self::ClearPayload,
            "update_vectors" => Self::UpdateVectors,
            "delete_vectors" => Self::DeleteVectors,
            _ => return None,
        })
    }
}

/// What a delete or payload request names: `points` (ids), or every point matching `filter`.
enum Target {
    Ids(Vec<PointId>),
    Matching(diskvec_db::Filter),
}

fn target(body: &Value) -> Result<Target, ApiError> {
    if body.get("points").is_some() {
        return Ok(Target::Ids(point_ids(body.get("points"), "points")?));
    }
    filter(body.get("filter"))?
        .map(Target::Matching)
        .ok_or_else(|| ApiError::bad_request("expected `points` (ids) or `filter`"))
}

/// The ids of `target`: listed, or found by scrolling through the matches.
fn target_ids(col: &Collection, target: Target) -> Result<Vec<PointId>, ApiError> {
    let f = match target {
        Target::Ids(ids) => return Ok(ids),
        Target::Matching(f) => f,
    };
    let mut ids = Vec::new();
    let mut offset = None;
    loop {
        let (page, next) = col.scroll(Some(&f), 10_000, offset, false, false)?;
        ids.extend(page.into_iter().map(|r| r.id));
        match next {
            Some(n) => offset = Some(n),
            None => return Ok(ids),
        }
    }
}

/// `PUT points/vectors`' points: `[{"id", "vector": {name: vector}}]`, each naming at
/// least one vector.
fn vector_updates(body: &Value) -> Result<Vec<(PointId, diskvec_db::NamedVectors)>, ApiError> {
    let list = body
        .get("points")
        .and_then(Value::as_array)
        .ok_or_else(|| ApiError::bad_request("points must be a list of {id, vector}"))?;
    let mut points = Vec::with_capacity(list.len());
    for (i, p) in list.iter().enumerate() {
        let id = point_id(
            p.get("id")
                .ok_or_else(|| ApiError::bad_request(format!("points[{i}]: id is missing")))?,
        )?;
        let what = format!("points[{i}].vector");
        let vectors = point_vectors(
            p.get("vector")
                .ok_or_else(|| ApiError::bad_request(format!("{what} is missing")))?,
            &what,
        )?;
        if vectors.is_empty() {
            return Err(ApiError::validation(format!(
                "{what}: must specify vectors to update for point"
            )));
        }
        points.push((id, vectors));
    }
    Ok(points)
}

/// Qdrant's `update_mode` of an upsert: `upsert` (the default), `insert_only`,
/// `update_only`.
fn upsert_mode(v: Option<&Value>) -> Result<UpsertMode, ApiError> {
    Ok(match v {
        None | Some(Value::Null) => UpsertMode::Upsert,
        Some(Value::String(m)) if m == "upsert" => UpsertMode::Upsert,
        Some(Value::String(m)) if m == "insert_only" => UpsertMode::InsertOnly,
        Some(Value::String(m)) if m == "update_only" => UpsertMode::UpdateOnly,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "update_mode must be \"upsert\", \"insert_only\" or \"update_only\", got {other}"
            )))
        }
    })
}

/// `update_filter`: existing points are changed only where their stored payload matches
/// it (strict mode checks it as a write's filter).
fn update_filter(col: &Collection, body: &Value) -> Result<Option<diskvec_db::Filter>, ApiError> {
    let f = filter(body.get("update_filter"))?;
    col.check_filter(f.as_ref(), true)?;
    Ok(f)
}

/// Strict mode's checks of one write that its request alone answers (batch size, vector
/// lengths, a filter's size) and the write rate it spends: what a cluster's router checks
/// before the write is logged (its replicas check what their data answers). A write by
/// filter spends 1 here: the router does not know how many points match.
pub fn check_request(limits: &impl Limits, write: Write, body: &Value) -> Result<(), ApiError> {
    let Some(strict) = limits.strict_mode() else {
        return Ok(());
    };
    let inserted = |count: usize, what: &str| {
        StrictMode::check_limit(Some(count), strict.upsert_max_batchsize, what)?;
        limits.check_filter(filter(body.get("update_filter"))?.as_ref(), true)?;
        Ok::<_, ApiError>(count)
    };
    let cost = match write {
        Write::Upsert => {
            let points = upsert_points(body.clone())?;
            for p in &points {
                strict.check_vectors(p.vectors.iter().map(|(n, v)| (n.as_str(), v)))?;
            }
            inserted(points.len(), "upsert limit")?
        }
        Write::UpdateVectors => {
            let points = vector_updates(body)?;
            for (_, vectors) in &points {
                strict.check_vectors(vectors.iter().map(|(n, v)| (n.as_str(), v)))?;
            }
            inserted(points.len(), "update limit")?
        }
        // `points/batch` takes a clear_payload's ids as a bare list too.
        Write::ClearPayload if body.is_array() => point_ids(Some(body), "clear_payload")?.len(),
        _ => match target(body)? {
            Target::Ids(ids) => ids.len(),
            Target::Matching(f) => {
                limits.check_filter(Some(&f), true)?;
                1
            }
        },
    };
    Ok(limits.charge(Rate::Write, cost.max(1))?)
}

/// Applies one write (a blocking call: run it off the async threads); returns its
/// operation number. An upsert given a `deadline` is refused unwritten once it passes.
fn apply(
    col: &Collection,
    write: Write,
    body: Value,
    deadline: Option<Instant>,
) -> Result<u64, ApiError> {
    // A payload or vector write names points by id or by filter; none matched, none written.
    // Strict mode: a filter must obey the write rules, and the rate is spent per point.
    let ids = |body: &Value| {
        let target = target(body)?;
        if let Target::Matching(f) = &target {
            col.check_filter(Some(f), true)?;
        }
        let ids = target_ids(col, target)?;
        col.charge(Rate::Write, ids.len().max(1))?;
        Ok::<_, ApiError>(ids)
    };
    Ok(match write {
        Write::Upsert => {
            let mode = upsert_mode(body.get("update_mode"))?;
            let only = update_filter(col, &body)?;
            let mut points = upsert_points(body)?;
            let config = col.config();
            points
                .iter_mut()
                .for_each(|p| config.cast_uint8_like_qdrant(&mut p.vectors));
            col.check_insert(
                points.len(),
                points.iter().map(|p| &p.vectors),
                "upsert limit",
            )?;
            col.charge(Rate::Write, points.len().max(1))?;
            col.upsert_if(points, mode, only.as_ref(), deadline)?
        }
        Write::Delete => match target(&body)? {
            Target::Ids(ids) => {
                col.charge(Rate::Write, ids.len().max(1))?;
                col.delete(ids)?
            }
            Target::Matching(f) => {
                col.check_filter(Some(&f), true)?;
                col.charge(Rate::Write, 1)?;
                col.delete_where(&f)?.0
            }
        },
        Write::SetPayload => {
            let values = payload(body.get("payload"))?;
            match body.get("key").and_then(Value::as_str) {
                Some(key) => col.set_payload_at(&ids(&body)?, key, &values)?,
                None => col.set_payload(&ids(&body)?, &values)?,
            }
        }
        Write::OverwritePayload => {
            col.overwrite_payload(&ids(&body)?, &payload(body.get("payload"))?)?
        }
        Write::DeletePayload => {
            let error = "keys must be a list of strings";
            let keys = string_list(body.get("keys").unwrap_or(&Value::Null), error)?;
            col.delete_payload_keys(&ids(&body)?, &keys)?
        }
        Write::ClearPayload => col.clear_payload(&ids(&body)?)?,
        Write::UpdateVectors => {
            let mut points = vector_updates(&body)?;
            let config = col.config();
            points
                .iter_mut()
                .for_each(|(_, v)| config.cast_uint8_like_qdrant(v));
            let only = update_filter(col, &body)?;
            col.check_insert(points.len(), points.iter().map(|p| &p.1), "update limit")?;
            col.charge(Rate::Write, points.len().max(1))?;
            match only {
                Some(f) => col.update_vectors_where(points, &f)?,
                None => col.update_vectors(points)?,
            }
        }
        Write::DeleteVectors => {
            let names = string_list(
                body.get("vector").unwrap_or(&Value::Null),
                "vector must be a list of vector names",
            )?;
            col.delete_vectors(&ids(&body)?, &names)?
        }
    })
}

/// One write route.
async fn route(
    s: AppState,
    name: String,
    params: WriteParams,
    body: Bytes,
    write: Write,
) -> ApiResult {
    let t = Instant::now();
    let col = collection(&s, &name)?;
    let body = parse_body(&body)?;
    let deadline = params
        .timeout
        .map(|secs| t + Duration::from_secs(secs).saturating_sub(HELD_BACK_MARGIN));
    let op = blocking(move || apply(&col, write, body, deadline)).await?;
    Ok(ok(update_result(op, &params), t))
}

macro_rules! write_route {
    ($name:ident, $write:expr) => {
        pub async fn $name(
            State(s): State<AppState>,
            Path(name): Path<String>,
            Query(params): Query<WriteParams>,
            body: Bytes,
        ) -> ApiResult {
            route(s, name, params, body, $write).await
        }
    };
}

write_route!(upsert, Write::Upsert);
write_route!(delete, Write::Delete);
write_route!(set_payload, Write::SetPayload);
write_route!(overwrite_payload, Write::OverwritePayload);
write_route!(delete_payload, Write::DeletePayload);
write_route!(clear_payload, Write::ClearPayload);
write_route!(update_vectors, Write::UpdateVectors);
write_route!(delete_vectors, Write::DeleteVectors);

/// `POST points/batch`: `{"operations": [{"upsert": {...}}, {"delete": {...}}, ...]}`,
/// applied in order (each as its own route would); answers one result per operation. A
/// failing operation stops the batch with its error; those before it stay applied, as in
/// Qdrant.
pub async fn batch(
    State(s): State<AppState>,
    Path(name): Path<String>,
    Query(params): Query<WriteParams>,
    body: Bytes,
) -> ApiResult {
    let t = Instant::now();
    let col = collection(&s, &name)?;
    let mut body = parse_body(&body)?;
    let Some(Value::Array(list)) = body.get_mut("operations").map(Value::take) else {
        return Err(ApiError::bad_request("operations must be a list"));
    };
    let mut operations = Vec::with_capacity(list.len());
    for (i, op) in list.into_iter().enumerate() {
        let Value::Object(one) = op else {
            return Err(ApiError::bad_request(format!(
                "operations[{i}] must be an object of one operation"
            )));
        };
        let mut one = one.into_iter();
        let (kind, body) = match (one.next(), one.next()) {
            (Some((kind, body)), None) => (kind, body),
            _ => {
                return Err(ApiError::bad_request(format!(
                    "operations[{i}] must name exactly one operation"
                )))
            }
        };
        let write = Write::named(&kind).ok_or_else(|| {
            ApiError::bad_request(format!("operations[{i}]: unknown operation {kind:?}"))
        })?;
        operations.push((write, body));
    }
    let ops = blocking(move || {
        operations
            .into_iter()
            .map(|(write, body)| apply(&col, write, body, None))
            .collect::<Result<Vec<u64>, ApiError>>()
    })
    .await?;
    let results: Vec<Value> = ops.iter().map(|&op| update_result(op, &params)).collect();
    Ok(ok(results, t))
}
