//! `points/query` and `points/query/batch`: Qdrant's universal query, parsed into the
//! database's query tree (`diskvec_db::query`) and run by its executor.

use std::time::Instant;

use axum::body::Bytes;
use axum::extract::{Path, State};
use diskvec_db::query::{Query, QueryRequest};
use diskvec_db::Database;
use serde::Serialize;
use serde_json::Value;

use crate::convert::{
    hit, parse_body, payload_selector, plain, with_vector, PayloadSelector, ScoredPoint,
    VectorSelector,
};
use crate::envelope::{ok, ApiError, ApiResult};
use crate::points::collection;
use crate::{blocking, AppState};

type Result<T> = std::result::Result<T, ApiError>;

/// `points/query`'s answer.
#[derive(Serialize)]
struct QueryAnswer {
    points: Vec<ScoredPoint>,
}

/// A top-level query with what its answer shows.
struct Parsed {
    request: QueryRequest,
    payload: PayloadSelector,
    vectors: VectorSelector,
}

fn parse(body: &Value, db: &Database) -> Result<Parsed> {
    let payload = payload_selector(body.get("with_payload"), false)?;
    let vectors = with_vector(body.get("with_vector").or_else(|| body.get("with_vectors")))?;
    Ok(Parsed {
        request: parse_node(body, db)?,
        payload,
        vectors,
    })
}

/// The top node of a query body (point ids of a `lookup_from` resolved in `db`).
pub fn parse_node(body: &Value, db: &Database) -> Result<QueryRequest> {
    diskvec_db::query::json::request(body, db).map_err(plain)
}

/// `order_by`: a key, or `{"key", "direction", "start_from"}`.
pub fn order_by(body: &Value, what: &str) -> Result<Query> {
    diskvec_db::query::json::order_by(body, what).map_err(plain)
}

/// Parses every body (lookups included) and runs them, off the async threads.
async fn run(
    s: &AppState,
    name: &str,
    bodies: Vec<Value>,
    batch: bool,
) -> Result<Vec<QueryAnswer>> {
    let col = collection(s, name)?;
    if batch {
        crate::strict::batch(&*col, bodies.len())?;
    }
    for b in &bodies {
        crate::strict::read(&*col, b)?;
    }
    let db = std::sync::Arc::clone(&s.db);
    blocking(move || {
        let parsed = bodies
            .iter()
            .map(|b| parse(b, &db))
            .collect::<Result<Vec<_>>>()?;
        parsed
            .into_iter()
            .map(|p| {
                let hits = col.query(&p.request, p.payload.wanted(), p.vectors.wanted())?;
                Ok(QueryAnswer {
                    points: hits
                        .into_iter()
                        .map(|h| hit(h, &p.payload, &p.vectors))
                        .collect(),
                })
            })
            .collect()
    })
    .await
}

pub async fn query_one(
    State(s): State<AppState>,
    Path(name): Path<String>,
    body: Bytes,
) -> ApiResult {
    let t = Instant::now();
    let body = parse_body(&body)?;
    let mut out = run(&s, &name, vec![body], false).await?;
    Ok(ok(out.pop(), t))
}

pub async fn query_batch(
    State(s): State<AppState>,
    Path(name): Path<String>,
    body: Bytes,
) -> ApiResult {
    let t = Instant::now();
    let mut body = parse_body(&body)?;
    let Some(Value::Array(searches)) = body.get_mut("searches").map(Value::take) else {
        return Err(ApiError::bad_request("searches must be a list"));
    };
    let out = run(&s, &name, searches, true).await?;
    Ok(ok(out, t))
}
