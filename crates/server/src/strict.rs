//! Strict mode at the HTTP edge: reads a request body's facts (limit, search parameters,
//! filters, query vectors) for the collection's checks (`diskvec_db::strict`) and spends its
//! read rate. Writes are checked where they are applied (`writes.rs`). The same questions
//! are asked of a local collection and, in a cluster, of the router's view of a cluster
//! collection (`Limits`).

use diskvec_db::query::formula::Formula;
use diskvec_db::{Collection, Filter, Rate, StrictMode};
use serde_json::Value;

use crate::convert::plain;
use crate::envelope::ApiError;

type Result<T> = std::result::Result<T, ApiError>;

/// Whatever holds a collection's strict mode and its rates: the collection itself, or a
/// cluster's router, which checks the limits a request can be judged by alone.
pub trait Limits {
    /// The limits, when strict mode is on.
    fn strict_mode(&self) -> Option<StrictMode>;
    fn charge(&self, rate: Rate, cost: usize) -> diskvec_db::Result<()>;
    fn check_filter(&self, filter: Option<&Filter>, write: bool) -> diskvec_db::Result<()>;
    fn check_formula(&self, formula: &Formula) -> diskvec_db::Result<()>;
    fn check_group_by(&self, key: &str) -> diskvec_db::Result<()>;
}

impl Limits for Collection {
    fn strict_mode(&self) -> Option<StrictMode> {
        Collection::strict_mode(self)
    }
    fn charge(&self, rate: Rate, cost: usize) -> diskvec_db::Result<()> {
        Collection::charge(self, rate, cost)
    }
    fn check_filter(&self, filter: Option<&Filter>, write: bool) -> diskvec_db::Result<()> {
        Collection::check_filter(self, filter, write)
    }
    fn check_formula(&self, formula: &Formula) -> diskvec_db::Result<()> {
        Collection::check_formula(self, formula)
    }
    fn check_group_by(&self, key: &str) -> diskvec_db::Result<()> {
        Collection::check_group_by(self, key)
    }
}

/// What a read costs the read rate: one per query vector it compares with (a
/// recommendation's examples each count), one per point it fetches by id, one per filter
/// condition; at least one.
fn read_cost(body: &Value) -> usize {
    let vectors = match body.get("query") {
        // A multivector compares each of its rows.
        Some(Value::Array(rows)) if rows.first().is_some_and(Value::is_array) => rows.len(),
        Some(Value::Object(q)) => {
            let list = |v: Option<&Value>| v.and_then(Value::as_array).map_or(0, Vec::len);
            if let Some(r) = q.get("recommend") {
                list(r.get("positive")) + list(r.get("negative"))
            } else if let Some(d) = q.get("discover") {
                1 + 2 * list(d.get("context"))
            } else if let Some(c) = q.get("context") {
                2 * c.as_array().map_or(1, Vec::len)
            } else {
                1
            }
        }
        _ => 1,
    };
    let prefetched: usize = prefetches(body).map(read_cost).sum();
    let conditions: usize = filters(body).map(|f| f.condition_count()).sum();
    (vectors + prefetched + conditions).max(1)
}

fn prefetches(body: &Value) -> impl Iterator<Item = &Value> {
    let list: Vec<&Value> = match body.get("prefetch") {
        Some(Value::Array(a)) => a.iter().collect(),
        Some(p @ Value::Object(_)) => vec![p],
        _ => Vec::new(),
    };
    list.into_iter()
}

/// The filters a body carries itself (its prefetches' are theirs); one that does not parse
/// is left to the request's own parse, which reports it.
fn filters(body: &Value) -> impl Iterator<Item = Filter> + '_ {
    // The IDF corpus is read like a filter too.
    let corpus = body
        .get("params")
        .and_then(|p| p.get("idf"))
        .and_then(|i| i.get("corpus"));
    [body.get("filter"), corpus]
        .into_iter()
        .flatten()
        .filter(|f| !f.is_null())
        .filter_map(|f| Filter::from_json(f).ok())
}

/// The points a request may answer: its `limit`, times the group size of a grouped one,
/// times the sample of a distance matrix (Qdrant's defaults: 3 each).
fn effective_limit(body: &Value) -> Option<usize> {
    let get = |k: &str| body.get(k).and_then(Value::as_u64).map(|v| v as usize);
    let limit = get("limit");
    if body.get("group_by").is_some() {
        return Some(limit.unwrap_or(10) * get("group_size").unwrap_or(3));
    }
    if body.get("sample").is_some() {
        return Some(get("sample").unwrap_or(10) * limit.unwrap_or(3));
    }
    limit
}

fn search_params(body: &Value) -> (Option<usize>, bool, Option<f64>) {
    let params = body.get("params");
    let get = |k: &str| params.and_then(|p| p.get(k));
    (
        get("hnsw_ef").and_then(Value::as_u64).map(|v| v as usize),
        get("exact").and_then(Value::as_bool).unwrap_or(false),
        get("quantization")
            .and_then(|q| q.get("oversampling"))
            .and_then(Value::as_f64),
    )
}

/// Checks one read request (a search, query, scroll, count, group or retrieval) and its
/// prefetches against strict mode, then spends its cost of the read rate.
pub fn read(col: &impl Limits, body: &Value) -> Result<()> {
    let Some(strict) = col.strict_mode() else {
        return Ok(());
    };
    check_node(col, &strict, body)?;
    if let Some(key) = body.get("group_by").and_then(Value::as_str) {
        col.check_group_by(key)?;
    }
    col.charge(Rate::Read, read_cost(body))?;
    Ok(())
}

fn check_node(col: &impl Limits, strict: &StrictMode, body: &Value) -> Result<()> {
    let limit = effective_limit(body);
    let (ef, exact, oversampling) = search_params(body);
    strict.check_search(limit, ef, exact, oversampling)?;
    for f in filters(body) {
        col.check_filter(Some(&f), false)?;
    }
    if let Some(q) = body.get("query").filter(|q| q.get("formula").is_some()) {
        let formula = Formula::from_json(q).map_err(plain)?;
        col.check_formula(&formula)?;
    }
    for p in prefetches(body) {
        check_node(col, strict, p)?;
    }
    Ok(())
}

/// A batch of `n` searches or queries.
pub fn batch(col: &impl Limits, n: usize) -> Result<()> {
    if let Some(strict) = col.strict_mode() {
        StrictMode::check_limit(Some(n), strict.search_max_batchsize, "search batch size")?;
    }
    Ok(())
}

/// Retrieval of `ids` points.
pub fn retrieve(col: &impl Limits, ids: usize) -> Result<()> {
    Ok(col.charge(Rate::Read, ids.max(1))?)
}

/// A request's `timeout`, against strict mode's `max_timeout`.
pub fn timeout(col: &impl Limits, seconds: u64) -> Result<()> {
    if let Some(strict) = col.strict_mode() {
        StrictMode::check_limit(Some(seconds as usize), strict.max_timeout, "timeout")?;
    }
    Ok(())
}
