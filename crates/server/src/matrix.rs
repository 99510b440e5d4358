//! `points/search/matrix/pairs` and `/offsets`: the distance matrix of a sample of points
//! (Qdrant's): each sampled point with its `limit` closest others among the sample, by
//! exact scores in one dense space.

use std::time::Instant;

use axum::body::Bytes;
use axum::extract::{Path, State};
use diskvec_db::{Metric, PointId, Vector};
use serde::Serialize;
use serde_json::Value;

use crate::convert::{filter, opt_positive, parse_body, IdOut};
use crate::envelope::{ok, ApiError, ApiResult};
use crate::points::collection;
use crate::{blocking, AppState};

type Result<T> = std::result::Result<T, ApiError>;

/// Points a matrix samples at most (its work grows with the square).
const MAX_SAMPLE: usize = 2_000;

/// For each sampled point (ascending ids), its `limit` best others: (row, column, score).
pub struct Matrix {
    ids: Vec<PointId>,
    entries: Vec<(usize, usize, f32)>,
}

/// Qdrant's score of two stored vectors: the dot product (cosine similarity for unit
/// vectors) or the Euclidean distance; summed in order, as f32.
fn score(metric: Metric, a: &[f32], b: &[f32]) -> f32 {
    match metric {
        Metric::L2 => a
            .iter()
            .zip(b)
            .map(|(x, y)| (x - y) * (x - y))
            .sum::<f32>()
            .sqrt(),
        Metric::Cosine | Metric::InnerProduct => a.iter().zip(b).map(|(x, y)| x * y).sum(),
    }
}

/// How many points a matrix request samples (`sample`, at most `MAX_SAMPLE`) and how many
/// others each keeps (`limit`).
pub fn sizes(body: &Value) -> Result<(usize, usize)> {
    let sample = opt_positive(body.get("sample"), "sample")?
        .unwrap_or(10)
        .min(MAX_SAMPLE);
    // More others than the sample holds is all of them.
    let limit = opt_positive(body.get("limit"), "limit")?
        .unwrap_or(3)
        .min(sample);
    Ok((sample, limit))
}

/// The matrix of sampled points `ids` (ascending) with their stored `vectors` in a space of
/// `metric`: each with its `limit` best others, ties by position.
pub fn of_sample(ids: Vec<PointId>, vectors: &[Vec<f32>], metric: Metric, limit: usize) -> Matrix {
    let mut entries = Vec::with_capacity(ids.len() * limit);
    for (row, a) in vectors.iter().enumerate() {
        let mut scored: Vec<(usize, f32)> = vectors
            .iter()
            .enumerate()
            .filter(|(col, _)| *col != row)
            .map(|(col, b)| (col, score(metric, a, b)))
            .collect();
        scored.sort_by(|x, y| {
            let by_score = if metric == Metric::L2 {
                x.1.total_cmp(&y.1)
            } else {
                y.1.total_cmp(&x.1)
            };
            by_score.then(x.0.cmp(&y.0))
        });
        entries.extend(scored.into_iter().take(limit).map(|(c, s)| (row, c, s)));
    }
    Matrix { ids, entries }
}

fn matrix(col: &diskvec_db::Collection, body: &Value) -> Result<Matrix> {
    let using = body.get("using").and_then(Value::as_str).unwrap_or("");
    let space = col
        .config()
        .dense_space(using)
        .map(|i| col.config().dense[i].clone())
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "Wrong input: Not existing vector name error: {using}"
            ))
        })?;
    let (sample, limit) = sizes(body)?;
    let f = filter(body.get("filter"))?;
    // The first `sample` matching points with a vector in the space, by id.
    let mut ids = Vec::new();
    let mut vectors = Vec::new();
    let mut offset = None;
    while ids.len() < sample {
        let (page, next) = col.scroll(f.as_ref(), 1_000, offset, false, true)?;
        for r in page {
            if let Some(Vector::Dense(v)) = r.vectors.and_then(|mut v| v.remove(using)) {
                if ids.len() < sample {
                    ids.push(r.id);
                    vectors.push(v);
                }
            }
        }
        match next {
            Some(n) => offset = Some(n),
            None => break,
        }
    }
    Ok(of_sample(ids, &vectors, space.metric, limit))
}

#[derive(Serialize)]
struct Pair {
    a: IdOut,
    b: IdOut,
    score: f32,
}

#[derive(Serialize)]
pub struct Pairs {
    pairs: Vec<Pair>,
}

#[derive(Serialize)]
pub struct Offsets {
    offsets_row: Vec<usize>,
    offsets_col: Vec<usize>,
    scores: Vec<f32>,
    ids: Vec<IdOut>,
}

/// `pairs`' answer (serialized as it is: scores as f32, not widened).
pub fn pairs_of(m: &Matrix) -> Pairs {
    let pairs: Vec<Pair> = m
        .entries
        .iter()
        .map(|&(r, c, score)| Pair {
            a: IdOut(m.ids[r]),
            b: IdOut(m.ids[c]),
            score,
        })
        .collect();
    Pairs { pairs }
}

/// `offsets`' answer.
pub fn offsets_of(m: Matrix) -> Offsets {
    Offsets {
        offsets_row: m.entries.iter().map(|e| e.0).collect(),
        offsets_col: m.entries.iter().map(|e| e.1).collect(),
        scores: m.entries.iter().map(|e| e.2).collect(),
        ids: m.ids.into_iter().map(IdOut).collect(),
    }
}

pub async fn pairs(State(s): State<AppState>, Path(name): Path<String>, body: Bytes) -> ApiResult {
    let t = Instant::now();
    let col = collection(&s, &name)?;
    let body = parse_body(&body)?;
    crate::strict::read(&*col, &body)?;
    let m = blocking(move || matrix(&col, &body)).await?;
    Ok(ok(pairs_of(&m), t))
}

pub async fn offsets(
    State(s): State<AppState>,
    Path(name): Path<String>,
    body: Bytes,
) -> ApiResult {
    let t = Instant::now();
    let col = collection(&s, &name)?;
    let body = parse_body(&body)?;
    crate::strict::read(&*col, &body)?;
    let m = blocking(move || matrix(&col, &body)).await?;
    Ok(ok(offsets_of(m), t))
}
