//! Point routes: upsert, retrieve, delete, payload updates, scroll, count, search, query.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use diskvec_db::{Collection, PointId, SearchRequest, SparseVector};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::convert::{
    dense_vector, filter, hit, opt_positive, opt_uint, parse_body, payload, payload_selector,
    point_id, point_ids, point_vectors, record, sparse_vector, string_list, upsert_points,
    with_vector, IdOut, PayloadSelector, PointOut, ScoredPoint, VectorSelector,
};
use crate::envelope::{ok, ApiError, ApiResult};
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

/// Qdrant's answer to a write. The write is applied (and, by default, durable) before
/// diskvec answers either way; `wait=false` only changes the reported status.
fn update_result(op: u64, params: &WriteParams, t: Instant) -> axum::response::Response {
    let status = if params.wait.unwrap_or(false) {
        "completed"
    } else {
        "acknowledged"
    };
    ok(json!({"operation_id": op, "status": status}), t)
}

fn collection(s: &AppState, name: &str) -> Result<Arc<Collection>, ApiError> {
    Ok(s.db.collection(name)?)
}

pub async fn upsert(
    State(s): State<AppState>,
    Path(name): Path<String>,
    Query(params): Query<WriteParams>,
    body: Bytes,
) -> ApiResult {
    let t = Instant::now();
    let col = collection(&s, &name)?;
    let points = upsert_points(parse_body(&body)?)?;
    let deadline = params
        .timeout
        .map(|secs| t + Duration::from_secs(secs).saturating_sub(HELD_BACK_MARGIN));
    let op = blocking(move || {
        Ok(match deadline {
            Some(d) => col.upsert_within(points, d)?,
            None => col.upsert(points)?,
        })
    })
    .await?;
    Ok(update_result(op, &params, t))
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

pub async fn delete(
    State(s): State<AppState>,
    Path(name): Path<String>,
    Query(params): Query<WriteParams>,
    body: Bytes,
) -> ApiResult {
    let t = Instant::now();
    let col = collection(&s, &name)?;
    let body = parse_body(&body)?;
    let op = blocking(move || match target(&body)? {
        Target::Ids(ids) => Ok(col.delete(ids)?),
        Target::Matching(f) => Ok(col.delete_where(&f)?.0),
    })
    .await?;
    Ok(update_result(op, &params, t))
}

async fn payload_write(
    s: AppState,
    name: String,
    params: WriteParams,
    body: Bytes,
    write: fn(&Collection, &[PointId], &Value) -> Result<u64, ApiError>,
) -> ApiResult {
    let t = Instant::now();
    let col = collection(&s, &name)?;
    let body = parse_body(&body)?;
    let op = blocking(move || {
        let ids = target_ids(&col, target(&body)?)?;
        if ids.is_empty() {
            return Ok(0);
        }
        write(&col, &ids, &body)
    })
    .await?;
    Ok(update_result(op, &params, t))
}

pub async fn set_payload(
    State(s): State<AppState>,
    Path(name): Path<String>,
    Query(params): Query<WriteParams>,
    body: Bytes,
) -> ApiResult {
    payload_write(s, name, params, body, |col, ids, body| {
        Ok(col.set_payload(ids, &payload(body.get("payload"))?)?)
    })
    .await
}

pub async fn overwrite_payload(
    State(s): State<AppState>,
    Path(name): Path<String>,
    Query(params): Query<WriteParams>,
    body: Bytes,
) -> ApiResult {
    payload_write(s, name, params, body, |col, ids, body| {
        Ok(col.overwrite_payload(ids, &payload(body.get("payload"))?)?)
    })
    .await
}

pub async fn delete_payload(
    State(s): State<AppState>,
    Path(name): Path<String>,
    Query(params): Query<WriteParams>,
    body: Bytes,
) -> ApiResult {
    payload_write(s, name, params, body, |col, ids, body| {
        let error = "keys must be a list of strings";
        let keys = string_list(body.get("keys").unwrap_or(&Value::Null), error)?;
        Ok(col.delete_payload_keys(ids, &keys)?)
    })
    .await
}

pub async fn clear_payload(
    State(s): State<AppState>,
    Path(name): Path<String>,
    Query(params): Query<WriteParams>,
    body: Bytes,
) -> ApiResult {
    payload_write(s, name, params, body, |col, ids, _| {
        Ok(col.clear_payload(ids)?)
    })
    .await
}

/// `PUT points/vectors`: `{"points": [{"id", "vector": {name: vector}}]}` sets those
/// vectors of existing points, keeping their others and their payloads.
pub async fn update_vectors(
    State(s): State<AppState>,
    Path(name): Path<String>,
    Query(params): Query<WriteParams>,
    body: Bytes,
) -> ApiResult {
    let t = Instant::now();
    let col = collection(&s, &name)?;
    let body = parse_body(&body)?;
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
    let op = blocking(move || Ok(col.update_vectors(points)?)).await?;
    Ok(update_result(op, &params, t))
}

/// `POST points/vectors/delete`: `{"points": [ids] | "filter": .., "vector": [names]}`
/// removes those vectors of the points.
pub async fn delete_vectors(
    State(s): State<AppState>,
    Path(name): Path<String>,
    Query(params): Query<WriteParams>,
    body: Bytes,
) -> ApiResult {
    payload_write(s, name, params, body, |col, ids, body| {
        let names = string_list(
            body.get("vector").unwrap_or(&Value::Null),
            "vector must be a list of vector names",
        )?;
        Ok(col.delete_vectors(ids, &names)?)
    })
    .await
}

pub async fn retrieve(
    State(s): State<AppState>,
    Path(name): Path<String>,
    body: Bytes,
) -> ApiResult {
    let t = Instant::now();
    let col = collection(&s, &name)?;
    let body = parse_body(&body)?;
    let ids = point_ids(body.get("ids"), "ids")?;
    let sel = payload_selector(body.get("with_payload"), true)?;
    let vectors = with_vector(body.get("with_vector").or_else(|| body.get("with_vectors")))?;
    let (wanted, with_vectors) = (sel.wanted(), vectors.wanted());
    let records = blocking(move || Ok(col.get(&ids, wanted, with_vectors)?)).await?;
    let out: Vec<PointOut> = records
        .into_iter()
        .map(|r| record(r, &sel, &vectors))
        .collect();
    Ok(ok(out, t))
}

pub async fn get_one(
    State(s): State<AppState>,
    Path((name, id)): Path<(String, String)>,
) -> ApiResult {
    let t = Instant::now();
    let col = collection(&s, &name)?;
    let id = match id.parse::<u64>() {
        Ok(n) => PointId::Num(n),
        Err(_) => point_id(&Value::String(id))?,
    };
    let mut records = blocking(move || Ok(col.get(&[id], true, true)?)).await?;
    match records.pop() {
        Some(r) => Ok(ok(
            record(r, &PayloadSelector::All, &VectorSelector::All),
            t,
        )),
        None => Err(ApiError::not_found(format!(
            "No point with id {} found",
            id
        ))),
    }
}

pub async fn scroll(State(s): State<AppState>, Path(name): Path<String>, body: Bytes) -> ApiResult {
    let t = Instant::now();
    let col = collection(&s, &name)?;
    let body = parse_body(&body)?;
    let f = filter(body.get("filter"))?;
    let limit = opt_positive(body.get("limit"), "limit")?.unwrap_or(10);
    let offset = match body.get("offset") {
        None | Some(Value::Null) => None,
        Some(v) => Some(point_id(v)?),
    };
    let sel = payload_selector(body.get("with_payload"), true)?;
    let vectors = with_vector(body.get("with_vector").or_else(|| body.get("with_vectors")))?;
    let (wanted, with_vectors) = (sel.wanted(), vectors.wanted());
    let (records, next) =
        blocking(move || Ok(col.scroll(f.as_ref(), limit, offset, wanted, with_vectors)?)).await?;
    let points: Vec<PointOut> = records
        .into_iter()
        .map(|r| record(r, &sel, &vectors))
        .collect();
    Ok(ok(
        ScrollPage {
            points,
            next_page_offset: next.map(IdOut),
        },
        t,
    ))
}

pub async fn count(State(s): State<AppState>, Path(name): Path<String>, body: Bytes) -> ApiResult {
    let t = Instant::now();
    let col = collection(&s, &name)?;
    let f = filter(parse_body(&body)?.get("filter"))?;
    let n = blocking(move || Ok(col.count(f.as_ref()))).await?;
    Ok(ok(json!({"count": n}), t))
}

/// `points/query`'s answer.
#[derive(Serialize)]
struct QueryAnswer {
    points: Vec<ScoredPoint>,
}

/// `points/scroll`'s answer.
#[derive(Serialize)]
struct ScrollPage {
    points: Vec<PointOut>,
    next_page_offset: Option<IdOut>,
}

/// A query vector of a search or query request.
enum QueryVector {
    Dense(Vec<f32>),
    Sparse(SparseVector),
}

/// A search as Qdrant's `search` and `query` bodies describe it.
struct ParsedSearch {
    vector: QueryVector,
    req: SearchRequest,
    payload: PayloadSelector,
    vectors: VectorSelector,
}

/// A query vector in one of Qdrant's forms, with the space it names (if it does):
/// `[...]`, `{"indices", "values"}`, `{"name": .., "vector": ..}` (search) or
/// `{"nearest": ..}` (query).
fn query_vector(v: &Value, what: &str) -> Result<(QueryVector, Option<String>), ApiError> {
    match v {
        Value::Array(_) => Ok((QueryVector::Dense(dense_vector(v, what)?), None)),
        Value::Object(m) if m.contains_key("indices") => {
            Ok((QueryVector::Sparse(sparse_vector(v, what)?), None))
        }
        Value::Object(m) if m.contains_key("nearest") => query_vector(&m["nearest"], what),
        Value::Object(m) if m.contains_key("vector") => {
            let (q, _) = query_vector(&m["vector"], what)?;
            let name = match m.get("name") {
                None | Some(Value::Null) => None,
                Some(Value::String(n)) => Some(n.clone()),
                Some(_) => {
                    return Err(ApiError::bad_request(format!(
                        "{what}.name must be a string"
                    )))
                }
            };
            Ok((q, name))
        }
        _ => Err(ApiError::bad_request(format!(
            "{what} must be a list of numbers, a sparse vector or {{\"name\": .., \"vector\": ..}}"
        ))),
    }
}

fn parse_search(body: &Value, vector_key: &str) -> Result<ParsedSearch, ApiError> {
    let raw = body
        .get(vector_key)
        .ok_or_else(|| ApiError::bad_request(format!("{vector_key} is missing")))?;
    let (vector, named) = query_vector(raw, vector_key)?;
    let limit = opt_positive(body.get("limit").or_else(|| body.get("top")), "limit")?.unwrap_or(10);
    let mut req = SearchRequest::new(limit);
    req.using = match (named, body.get("using")) {
        (Some(name), _) => name,
        (None, None | Some(Value::Null)) => String::new(),
        (None, Some(Value::String(u))) => u.clone(),
        (None, Some(_)) => return Err(ApiError::bad_request("using must be a vector name")),
    };
    req.filter = filter(body.get("filter"))?;
    req.offset = opt_uint(body.get("offset"), "offset")?.unwrap_or(0);
    // hnsw_ef is the candidate list of Qdrant's graph search: our search list.
    let ef = body.get("params").and_then(|p| p.get("hnsw_ef"));
    req.search_list = opt_positive(ef, "params.hnsw_ef")?;
    req.score_threshold = match body.get("score_threshold") {
        None | Some(Value::Null) => None,
        Some(x) => Some(
            x.as_f64()
                .ok_or_else(|| ApiError::bad_request("score_threshold must be a number"))?
                as f32,
        ),
    };
    let payload = payload_selector(body.get("with_payload"), false)?;
    req.with_payload = payload.wanted();
    let vectors = with_vector(body.get("with_vector").or_else(|| body.get("with_vectors")))?;
    req.with_vector = vectors.wanted();
    Ok(ParsedSearch {
        vector,
        req,
        payload,
        vectors,
    })
}

async fn run_searches(
    s: &AppState,
    name: &str,
    searches: Vec<ParsedSearch>,
) -> Result<Vec<Vec<ScoredPoint>>, ApiError> {
    let col = collection(s, name)?;
    blocking(move || {
        searches
            .into_iter()
            .map(|p| {
                let hits = match p.vector {
                    QueryVector::Dense(v) => col.search(&v, &p.req)?,
                    QueryVector::Sparse(v) => col.search_sparse(v, &p.req)?,
                };
                Ok(hits
                    .into_iter()
                    .map(|h| hit(h, &p.payload, &p.vectors))
                    .collect())
            })
            .collect()
    })
    .await
}

fn searches_of(body: &Value, vector_key: &str) -> Result<Vec<ParsedSearch>, ApiError> {
    body.get("searches")
        .and_then(Value::as_array)
        .ok_or_else(|| ApiError::bad_request("searches must be a list"))?
        .iter()
        .map(|b| parse_search(b, vector_key))
        .collect()
}

pub async fn search(State(s): State<AppState>, Path(name): Path<String>, body: Bytes) -> ApiResult {
    let t = Instant::now();
    let parsed = parse_search(&parse_body(&body)?, "vector")?;
    let mut out = run_searches(&s, &name, vec![parsed]).await?;
    Ok(ok(out.pop().unwrap_or_default(), t))
}

pub async fn search_batch(
    State(s): State<AppState>,
    Path(name): Path<String>,
    body: Bytes,
) -> ApiResult {
    let t = Instant::now();
    let searches = searches_of(&parse_body(&body)?, "vector")?;
    let out = run_searches(&s, &name, searches).await?;
    Ok(ok(out, t))
}

pub async fn query(State(s): State<AppState>, Path(name): Path<String>, body: Bytes) -> ApiResult {
    let t = Instant::now();
    let parsed = parse_search(&parse_body(&body)?, "query")?;
    let mut out = run_searches(&s, &name, vec![parsed]).await?;
    let points = out.pop().unwrap_or_default();
    Ok(ok(QueryAnswer { points }, t))
}

pub async fn query_batch(
    State(s): State<AppState>,
    Path(name): Path<String>,
    body: Bytes,
) -> ApiResult {
    let t = Instant::now();
    let searches = searches_of(&parse_body(&body)?, "query")?;
    let out = run_searches(&s, &name, searches).await?;
    let out: Vec<QueryAnswer> = out
        .into_iter()
        .map(|points| QueryAnswer { points })
        .collect();
    Ok(ok(out, t))
}
