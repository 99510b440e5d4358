//! Point reads: retrieve, scroll, count, search, query (the writes are in writes.rs).

use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::{Path, State};
use diskvec_db::query::QueryRequest;
use diskvec_db::{Collection, PointId, SearchRequest, SparseVector};
use serde::Serialize;
use serde_json::{json, Value};

use crate::convert::{
    dense_vector, filter, hit, opt_positive, opt_uint, parse_body, payload_selector, point_id,
    point_ids, record, sparse_vector, with_vector, IdOut, PayloadSelector, PointOut, ScoredPoint,
    VectorSelector,
};
use crate::envelope::{ok, ApiError, ApiResult};
use crate::{blocking, AppState};

pub(crate) fn collection(s: &AppState, name: &str) -> Result<Arc<Collection>, ApiError> {
    check_name_length(name)?;
    Ok(s.db.collection(name)?)
}

/// A collection name in a path longer than any can be is a validation error (Qdrant's), not
/// an unknown collection.
pub(crate) fn check_name_length(name: &str) -> Result<(), ApiError> {
    if name.len() > 255 {
        return Err(ApiError::validation_in(
            "path parameters",
            "collection_name: value is too long, at most 255 bytes",
        ));
    }
    Ok(())
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
    crate::strict::retrieve(&*col, ids.len())?;
    let sel = payload_selector(body.get("with_payload"), true)?;
    let vectors = with_vector(body.get("with_vector").or_else(|| body.get("with_vectors")))?;
    vectors.check(&col.config())?;
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
    crate::strict::read(&*col, &body)?;
    let f = filter(body.get("filter"))?;
    let limit = opt_positive(body.get("limit"), "limit")?.unwrap_or(10);
    let offset = match body.get("offset") {
        None | Some(Value::Null) => None,
        Some(v) => Some(point_id(v)?),
    };
    let sel = payload_selector(body.get("with_payload"), true)?;
    let vectors = with_vector(body.get("with_vector").or_else(|| body.get("with_vectors")))?;
    let (wanted, with_vectors) = (sel.wanted(), vectors.wanted());
    if let Some(order) = body.get("order_by").filter(|v| !v.is_null()) {
        // Ordered by a payload value: pages go on from `start_from`, not from an id.
        if offset.is_some() {
            return Err(ApiError::bad_request(
                "offset cannot be used with order_by: page with order_by.start_from",
            ));
        }
        let mut req = QueryRequest::new(Some(crate::query::order_by(order, "order_by")?), limit);
        req.filter = f;
        let hits = blocking(move || Ok(col.query(&req, wanted, with_vectors)?)).await?;
        let points: Vec<PointOut> = hits
            .into_iter()
            .map(|h| {
                let r = diskvec_db::Record {
                    id: h.id,
                    version: h.version,
                    payload: h.payload,
                    vectors: h.vectors,
                };
                record(r, &sel, &vectors)
            })
            .collect();
        return Ok(ok(
            ScrollPage {
                points,
                next_page_offset: None,
            },
            t,
        ));
    }
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
    let body = parse_body(&body)?;
    crate::strict::read(&*col, &body)?;
    let f = filter(body.get("filter"))?;
    let n = blocking(move || Ok(col.count(f.as_ref())?)).await?;
    Ok(ok(json!({"count": n}), t))
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

/// A search as Qdrant's `search` bodies describe it.
pub(crate) struct ParsedSearch {
    vector: QueryVector,
    pub(crate) req: SearchRequest,
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

pub(crate) fn parse_search(body: &Value, vector_key: &str) -> Result<ParsedSearch, ApiError> {
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
    req.search_list = crate::convert::search_ef(ef)?;
    req.exact = crate::convert::search_exact(body.get("params"))?;
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
    col: Arc<Collection>,
    searches: Vec<ParsedSearch>,
) -> Result<Vec<Vec<ScoredPoint>>, ApiError> {
    blocking(move || {
        searches
            .into_iter()
            .map(|p| {
                let (payload, vectors) = (p.payload.clone(), p.vectors.clone());
                Ok(run_search(&col, p)?
                    .into_iter()
                    .map(|h| hit(h, &payload, &vectors))
                    .collect())
            })
            .collect()
    })
    .await
}

/// Runs one parsed search.
pub(crate) fn run_search(
    col: &Collection,
    p: ParsedSearch,
) -> Result<Vec<diskvec_db::Hit>, ApiError> {
    Ok(match p.vector {
        QueryVector::Dense(v) => col.search(&v, &p.req)?,
        QueryVector::Sparse(v) => col.search_sparse(v, &p.req)?,
    })
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
    let body = parse_body(&body)?;
    let col = collection(&s, &name)?;
    crate::strict::read(&*col, &body)?;
    let parsed = parse_search(&body, "vector")?;
    let mut out = run_searches(col, vec![parsed]).await?;
    Ok(ok(out.pop().unwrap_or_default(), t))
}

pub async fn search_batch(
    State(s): State<AppState>,
    Path(name): Path<String>,
    body: Bytes,
) -> ApiResult {
    let t = Instant::now();
    let body = parse_body(&body)?;
    let col = collection(&s, &name)?;
    let bodies = body.get("searches").and_then(Value::as_array);
    crate::strict::batch(&*col, bodies.map_or(0, Vec::len))?;
    for b in bodies.into_iter().flatten() {
        crate::strict::read(&*col, b)?;
    }
    let searches = searches_of(&body, "vector")?;
    let out = run_searches(col, searches).await?;
    Ok(ok(out, t))
}

/// `POST /collections/{name}/facet`: `{"key", "filter"?, "limit"? (10), "exact"?}`; the
/// counts are always exact.
pub async fn facet(State(s): State<AppState>, Path(name): Path<String>, body: Bytes) -> ApiResult {
    let t = Instant::now();
    let col = collection(&s, &name)?;
    let body = parse_body(&body)?;
    crate::strict::read(&*col, &body)?;
    let key = body
        .get("key")
        .and_then(Value::as_str)
        .ok_or_else(|| ApiError::validation("key: must be a payload key"))?
        .to_string();
    let f = filter(body.get("filter"))?;
    let limit = opt_positive(body.get("limit"), "limit")?.unwrap_or(10);
    let hits = blocking(move || Ok(col.facet(&key, f.as_ref(), limit)?)).await?;
    let hits: Vec<Value> = hits
        .into_iter()
        .map(|(value, count)| json!({"value": value.to_json(), "count": count}))
        .collect();
    Ok(ok(json!({"hits": hits}), t))
}
