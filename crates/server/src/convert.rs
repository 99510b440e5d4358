//! Qdrant's JSON shapes to and from the database's types.

use diskvec_db::{json, DbError, Metric};
use diskvec_db::{
    CollectionConfig, CollectionInfo, DenseSpace, Durability, Filter, Hit, NamedVectors, Payload,
    PointId, PointRecord, Record, SparseModifier, SparseSpace, SparseVector, Vector,
};
use serde::{Serialize, Serializer};
use serde_json::{json, Map, Value};

use crate::envelope::ApiError;

type Result<T> = std::result::Result<T, ApiError>;

pub fn parse_body(body: &[u8]) -> Result<Value> {
    if body.is_empty() {
        return Ok(Value::Object(Map::new()));
    }
    serde_json::from_slice(body).map_err(|e| ApiError::bad_request(format!("malformed JSON: {e}")))
}

/// A db error from reading a request value, in the server's words: a bad shape is a
/// plain 400, a broken schema rule Qdrant's 422.
pub fn plain(e: DbError) -> ApiError {
    match e {
        DbError::BadRequest(m) => ApiError::bad_request(m),
        DbError::Validation(m) => ApiError::validation(m),
        DbError::BadFilter(e) => ApiError::bad_request(format!("bad filter: {e}")),
        other => other.into(),
    }
}

/// An optional non-negative integer field (absent or `null`: `None`).
pub fn opt_uint(v: Option<&Value>, what: &str) -> Result<Option<usize>> {
    json::opt_uint(v, what).map_err(plain)
}

/// An optional positive integer field (absent or `null`: `None`).
pub fn opt_positive(v: Option<&Value>, what: &str) -> Result<Option<usize>> {
    json::opt_positive(v, what).map_err(plain)
}

/// `params.hnsw_ef` (the search list).
pub fn search_ef(v: Option<&Value>) -> Result<Option<usize>> {
    json::search_ef(v).map_err(plain)
}

/// `params.exact`.
pub fn search_exact(params: Option<&Value>) -> Result<bool> {
    json::search_exact(params).map_err(plain)
}

/// A list of strings; anything else is refused with `error`.
pub fn string_list(v: &Value, error: &str) -> Result<Vec<String>> {
    v.as_array()
        .and_then(|a| a.iter().map(|k| k.as_str().map(String::from)).collect())
        .ok_or_else(|| ApiError::bad_request(error))
}

pub fn point_id(v: &Value) -> Result<PointId> {
    json::point_id(v).map_err(plain)
}

pub fn point_ids(v: Option<&Value>, what: &str) -> Result<Vec<PointId>> {
    match v {
        Some(Value::Array(a)) => a.iter().map(point_id).collect(),
        Some(_) => Err(ApiError::bad_request(format!(
            "{what} must be a list of point ids"
        ))),
        None => Err(ApiError::bad_request(format!("{what} is missing"))),
    }
}

pub fn metric(name: &str) -> Result<Metric> {
    match name {
        "Cosine" => Ok(Metric::Cosine),
        "Euclid" => Ok(Metric::L2),
        "Dot" => Ok(Metric::InnerProduct),
        other => Err(ApiError::bad_request(format!(
            "distance {other:?} is not supported: use Cosine, Euclid or Dot"
        ))),
    }
}

pub fn metric_name(m: Metric) -> &'static str {
    match m {
        Metric::Cosine => "Cosine",
        Metric::L2 => "Euclid",
        Metric::InnerProduct => "Dot",
    }
}

/// A list of numbers.
pub fn dense_vector(v: &Value, what: &str) -> Result<Vec<f32>> {
    json::dense_vector(v, what).map_err(plain)
}

/// `{"indices": [...], "values": [...]}`.
pub fn sparse_vector(v: &Value, what: &str) -> Result<SparseVector> {
    json::sparse_vector(v, what).map_err(plain)
}

/// A multivector: a list of rows of numbers.
pub fn multi_rows(rows: &[Value], what: &str) -> Result<Vec<Vec<f32>>> {
    json::multi_rows(rows, what).map_err(plain)
}

/// One vector of a point: a list of numbers (dense) or `{indices, values}` (sparse).
pub fn one_vector(v: &Value, what: &str) -> Result<Vector> {
    match v {
        Value::Array(a) if a.first().is_some_and(Value::is_array) => {
            Ok(Vector::Multi(multi_rows(a, what)?))
        }
        Value::Array(a) if a.is_empty() => Err(ApiError::validation(format!(
            "{what}: dense vector must not be empty"
        ))),
        Value::Array(_) => Ok(Vector::Dense(dense_vector(v, what)?)),
        Value::Object(m) if m.contains_key("indices") => {
            Ok(Vector::Sparse(sparse_vector(v, what)?))
        }
        _ => Err(ApiError::bad_request(format!(
            "{what} must be a list of numbers or a sparse vector {{\"indices\": [...], \
             \"values\": [...]}}"
        ))),
    }
}

/// A point's vectors from Qdrant's forms: a list of numbers (the unnamed space), or an
/// object of space name to vector (named dense and sparse spaces; `""` is the unnamed one).
pub fn point_vectors(v: &Value, what: &str) -> Result<NamedVectors> {
    match v {
        // A named vector's path as Qdrant's validation writes it (`?` for the name).
        Value::Object(m) if !m.contains_key("indices") => m
            .iter()
            .map(|(name, v)| Ok((name.clone(), one_vector(v, &format!("{what}.?"))?)))
            .collect(),
        Value::Object(_) => Err(ApiError::bad_request(format!(
            "{what}: a sparse vector needs the name of its space ({{\"name\": {{\"indices\": \
             ...}}}})"
        ))),
        _ => Ok(NamedVectors::from([(String::new(), one_vector(v, what)?)])),
    }
}

/// A sparse vector as Qdrant writes it; its values as the f32 they are (through a JSON tree
/// they would print as the f64 nearest, 0.10000000149011612 for 0.1).
struct SparseOut<'a>(&'a SparseVector);

impl Serialize for SparseOut<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(Some(2))?;
        map.serialize_entry("indices", &self.0.indices)?;
        map.serialize_entry("values", &self.0.values)?;
        map.end()
    }
}

/// A point's vectors as Qdrant writes them: one list (of numbers, or of rows) when the point
/// has only a vector in the unnamed space, else an object of space name to vector.
pub struct VectorsOut(pub NamedVectors);

impl Serialize for VectorsOut {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        if self.0.len() == 1 {
            match self.0.get("") {
                Some(Vector::Dense(v)) => return v.serialize(s),
                Some(Vector::Multi(rows)) => return rows.serialize(s),
                _ => {}
            }
        }
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (name, v) in &self.0 {
            match v {
                Vector::Dense(d) => map.serialize_entry(name, d)?,
                Vector::Sparse(sp) => map.serialize_entry(name, &SparseOut(sp))?,
                Vector::Multi(rows) => map.serialize_entry(name, rows)?,
            }
        }
        map.end()
    }
}

pub fn payload(v: Option<&Value>) -> Result<Payload> {
    match v {
        None | Some(Value::Null) => Ok(Payload::new()),
        Some(Value::Object(m)) => Ok(m.clone()),
        Some(_) => Err(ApiError::bad_request("payload must be a JSON object")),
    }
}

pub fn filter(v: Option<&Value>) -> Result<Option<Filter>> {
    json::filter(v).map_err(plain)
}

/// Points of an upsert, in the list form (`points: [{id, vector, payload}]`) or the batch
/// form (`batch: {ids, vectors, payloads}`). The body is taken apart, not copied: each
/// payload object moves into its point.
pub fn upsert_points(mut body: Value) -> Result<Vec<PointRecord>> {
    if let Some(points) = body.get_mut("points") {
        let Value::Array(list) = points.take() else {
            return Err(ApiError::bad_request("points must be a list"));
        };
        return list
            .into_iter()
            .enumerate()
            .map(|(i, mut p)| {
                let id = point_id(p.get("id").ok_or_else(|| {
                    ApiError::bad_request(format!("points[{i}]: id is missing"))
                })?)?;
                let v = p.get("vector").ok_or_else(|| {
                    ApiError::bad_request(format!("points[{i}]: vector is missing"))
                })?;
                let vectors = point_vectors(v, &format!("points[{i}].vector"))?;
                Ok(PointRecord {
                    id,
                    vectors,
                    payload: owned_payload(p.get_mut("payload").map(Value::take))?,
                })
            })
            .collect();
    }
    let batch = body
        .get_mut("batch")
        .ok_or_else(|| ApiError::bad_request("expected `points` or `batch`"))?;
    let ids = point_ids(batch.get("ids"), "batch.ids")?;
    let vectors = batch_vectors(batch.get("vectors"), ids.len())?;
    let payloads = match batch.get_mut("payloads").map(Value::take) {
        None | Some(Value::Null) => vec![Value::Null; ids.len()],
        Some(Value::Array(a)) if a.len() == ids.len() => a,
        Some(_) => {
            return Err(ApiError::bad_request(
                "batch.payloads must be a list with one payload per id",
            ))
        }
    };
    ids.into_iter()
        .zip(vectors)
        .zip(payloads)
        .map(|((id, vectors), p)| {
            Ok(PointRecord {
                id,
                vectors,
                payload: owned_payload(Some(p))?,
            })
        })
        .collect()
}

/// A batch's vectors, one set per id: a list of vectors (the unnamed space), or an object
/// of space name to a list of vectors.
fn batch_vectors(v: Option<&Value>, ids: usize) -> Result<Vec<NamedVectors>> {
    let count = |n: usize, what: &str| {
        if n == ids {
            Ok(())
        } else {
            Err(ApiError::bad_request(format!(
                "batch has {ids} ids and {n} {what}"
            )))
        }
    };
    match v {
        Some(Value::Array(list)) => {
            count(list.len(), "vectors")?;
            list.iter()
                .enumerate()
                .map(|(i, v)| {
                    let what = format!("batch.vectors[{i}]");
                    Ok(NamedVectors::from([(String::new(), one_vector(v, &what)?)]))
                })
                .collect()
        }
        Some(Value::Object(by_name)) => {
            let mut out = vec![NamedVectors::new(); ids];
            for (name, list) in by_name {
                let list = list.as_array().ok_or_else(|| {
                    ApiError::bad_request(format!("batch.vectors.{name} must be a list"))
                })?;
                count(list.len(), &format!("vectors of {name:?}"))?;
                for (i, v) in list.iter().enumerate() {
                    let what = format!("batch.vectors.{name}[{i}]");
                    out[i].insert(name.clone(), one_vector(v, &what)?);
                }
            }
            Ok(out)
        }
        _ => Err(ApiError::bad_request(
            "batch.vectors must be a list of vectors or an object of named lists",
        )),
    }
}

/// A payload taken out of a request body (moved, not copied).
fn owned_payload(v: Option<Value>) -> Result<Payload> {
    match v {
        None | Some(Value::Null) => Ok(Payload::new()),
        Some(Value::Object(m)) => Ok(m),
        Some(_) => Err(ApiError::bad_request("payload must be a JSON object")),
    }
}

/// `with_payload`: true/false, a list of keys to include, or `{"include": [...]}` /
/// `{"exclude": [...]}`. Returns whether to fetch payloads and how to trim them.
#[derive(Clone)]
pub enum PayloadSelector {
    None,
    All,
    Include(Vec<String>),
    Exclude(Vec<String>),
}

pub fn payload_selector(v: Option<&Value>, default: bool) -> Result<PayloadSelector> {
    let keys = |v: &Value| string_list(v, "with_payload keys must be strings");
    Ok(match v {
        None | Some(Value::Null) => {
            if default {
                PayloadSelector::All
            } else {
                PayloadSelector::None
            }
        }
        Some(Value::Bool(true)) => PayloadSelector::All,
        Some(Value::Bool(false)) => PayloadSelector::None,
        Some(a @ Value::Array(_)) => PayloadSelector::Include(keys(a)?),
        Some(Value::Object(m)) if m.contains_key("include") => {
            PayloadSelector::Include(keys(&m["include"])?)
        }
        Some(Value::Object(m)) if m.contains_key("exclude") => {
            PayloadSelector::Exclude(keys(&m["exclude"])?)
        }
        Some(_) => {
            return Err(ApiError::bad_request(
                "with_payload: expected a bool or keys",
            ))
        }
    })
}

impl PayloadSelector {
    pub fn wanted(&self) -> bool {
        !matches!(self, PayloadSelector::None)
    }

    pub fn apply(&self, p: Option<Payload>) -> Option<Payload> {
        match (self, p) {
            (PayloadSelector::None, _) | (_, None) => None,
            (PayloadSelector::All, Some(p)) => Some(p),
            (PayloadSelector::Include(keys), Some(p)) => {
                Some(crate::payload_paths::include(p, keys))
            }
            (PayloadSelector::Exclude(keys), Some(p)) => {
                Some(crate::payload_paths::exclude(p, keys))
            }
        }
    }
}

/// `with_vector`: true/false, or a list of space names to include.
#[derive(Clone)]
pub enum VectorSelector {
    None,
    All,
    Names(Vec<String>),
}

impl VectorSelector {
    /// Refuses a name that is no vector space of `config` (Qdrant's words).
    pub fn check(&self, config: &CollectionConfig) -> Result<()> {
        let VectorSelector::Names(names) = self else {
            return Ok(());
        };
        for name in names {
            let known = config.dense_space(name).is_some()
                || config.sparse_space(name).is_some()
                || config.multi_space(name).is_some();
            if !known {
                return Err(ApiError::bad_request(format!(
                    "Wrong input: Not existing vector name error: {name}"
                )));
            }
        }
        Ok(())
    }
}

pub fn with_vector(v: Option<&Value>) -> Result<VectorSelector> {
    match v {
        None | Some(Value::Null) | Some(Value::Bool(false)) => Ok(VectorSelector::None),
        Some(Value::Bool(true)) => Ok(VectorSelector::All),
        Some(a @ Value::Array(_)) => Ok(VectorSelector::Names(string_list(
            a,
            "with_vector: expected true, false or a list of vector names",
        )?)),
        Some(_) => Err(ApiError::bad_request(
            "with_vector: expected true, false or a list of vector names",
        )),
    }
}

impl VectorSelector {
    pub fn wanted(&self) -> bool {
        !matches!(self, VectorSelector::None)
    }

    pub fn apply(&self, v: Option<NamedVectors>) -> Option<VectorsOut> {
        match (self, v) {
            (VectorSelector::None, _) | (_, None) => None,
            (VectorSelector::All, Some(v)) => Some(VectorsOut(v)),
            (VectorSelector::Names(names), Some(v)) => Some(VectorsOut(
                v.into_iter().filter(|(k, _)| names.contains(k)).collect(),
            )),
        }
    }
}

/// A point id as Qdrant writes it: a number, or a UUID string.
pub struct IdOut(pub PointId);

impl Serialize for IdOut {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match self.0 {
            PointId::Num(n) => s.serialize_u64(n),
            PointId::Uuid(_) => s.collect_str(&self.0),
        }
    }
}

/// Qdrant's `ScoredPoint`, written straight from the database's answer (no JSON tree in
/// between: a k=100 answer would build and drop hundreds of maps per query).
#[derive(Serialize)]
pub struct ScoredPoint {
    id: IdOut,
    version: u64,
    score: f32,
    payload: Option<Payload>,
    vector: Option<VectorsOut>,
}

/// Qdrant's `Record`: a point as retrieve and scroll return it.
#[derive(Serialize)]
pub struct PointOut {
    id: IdOut,
    payload: Option<Payload>,
    vector: Option<VectorsOut>,
}

pub fn hit(h: Hit, sel: &PayloadSelector, vectors: &VectorSelector) -> ScoredPoint {
    ScoredPoint {
        id: IdOut(h.id),
        version: h.version,
        score: h.score,
        payload: sel.apply(h.payload),
        vector: vectors.apply(h.vectors),
    }
}

pub fn record(r: Record, sel: &PayloadSelector, vectors: &VectorSelector) -> PointOut {
    PointOut {
        id: IdOut(r.id),
        payload: sel.apply(r.payload),
        vector: vectors.apply(r.vectors),
    }
}

/// A collection's configuration from a create request: Qdrant's fields, plus ours under
/// `diskvec` (storage paths, WAL path, durability, DiskANN build and search settings).
pub fn collection_config(body: &Value) -> Result<CollectionConfig> {
    let (dense, multi) = dense_spaces(body)?;
    let mut c = CollectionConfig::with_spaces(dense, sparse_spaces(body)?);
    c.multi = multi;
    // `quantization` is the older name Qdrant still takes.
    let q = body.get("quantization_config").or(body.get("quantization"));
    c.quantization = crate::quantization::parse(q, "quantization_config")?.flatten();
    // Qdrant keeps vectors in RAM unless `on_disk: true`; diskvec keeps them on disk unless
    // told `on_disk: false` (in a vector space or `hnsw_config`), which caches every node in
    // DRAM.
    let mut on_disk_fields = vec![(
        "hnsw_config.on_disk".to_string(),
        body.get("hnsw_config").and_then(|h| h.get("on_disk")),
    )];
    for (name, space) in space_bodies(body.get("vectors")) {
        on_disk_fields.push((format!("{name}on_disk"), space.get("on_disk")));
    }
    for (place, field) in on_disk_fields {
        match field {
            None | Some(Value::Null) => {}
            Some(Value::Bool(false)) => c.on_disk = false,
            Some(Value::Bool(true)) => {}
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "{place} must be true or false, got {other}"
                )))
            }
        }
    }
    if let Some(on_ssd) =
        crate::settings::on_disk_payload(body.get("on_disk_payload"), "on_disk_payload")?
    {
        c.on_disk_payload = on_ssd;
    }
    // Qdrant's schema bounds, checked as its validation does (422, its words).
    for field in [
        "shard_number",
        "replication_factor",
        "write_consistency_factor",
    ] {
        match body.get(field) {
            None | Some(Value::Null) => {}
            Some(v) if v.as_u64() == Some(0) => {
                return Err(ApiError::validation(format!(
                    "{field}: value 0 invalid, must be 1 or larger"
                )))
            }
            Some(v) if v.as_u64().is_some() => {}
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "{field} must be a positive integer, got {other}"
                )))
            }
        }
    }
    if let Some(ef) = body
        .get("hnsw_config")
        .and_then(|h| h.get("ef_construct"))
        .and_then(Value::as_u64)
        .filter(|&ef| ef < 4)
    {
        return Err(ApiError::validation(format!(
            "hnsw_config.ef_construct: value {ef} invalid, must be 4 or larger"
        )));
    }
    if let Some(h) = body.get("hnsw_config") {
        if let Some(m) = opt_uint(h.get("m"), "hnsw_config.m")? {
            c.hnsw_m = m;
        }
        if let Some(ef) = opt_uint(h.get("ef_construct"), "hnsw_config.ef_construct")? {
            c.hnsw_ef_construction = ef;
        }
    }
    if let Some(kb) = indexing_threshold_kb(body)? {
        // Qdrant counts this threshold in KB of vectors; a segment seals past it. Segments
        // below MIN_SEAL_POINTS are scanned anyway, so smaller ones would only add builds.
        if kb > 0 {
            c.seal_threshold = points_in_kb(&c, kb).max(MIN_SEAL_POINTS);
        }
    }
    crate::settings::max_segment_size(&mut c, body)?;
    if let Some(d) = body.get("diskvec") {
        if let Some(paths) = d.get("paths") {
            c.paths = string_list(paths, "diskvec.paths must be a list of directories")?
                .into_iter()
                .map(Into::into)
                .collect();
        }
        if let Some(w) = d.get("wal_path").and_then(Value::as_str) {
            c.wal_path = Some(w.into());
        }
        match d.get("durability").and_then(Value::as_str) {
            None | Some("sync") => {}
            Some("interval") => {
                let ms = opt_uint(d.get("interval_ms"), "diskvec.interval_ms")?.unwrap_or(200);
                c.durability = Durability::Interval {
                    interval_ms: ms as u64,
                };
            }
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "diskvec.durability must be \"sync\" or \"interval\", got {other:?}"
                )))
            }
        }
        for (key, slot) in [
            ("seal_threshold", &mut c.seal_threshold),
            ("max_degree", &mut c.max_degree),
            ("build_list", &mut c.build_list),
            ("search_list", &mut c.search_list),
        ] {
            if let Some(v) = opt_uint(d.get(key), &format!("diskvec.{key}"))? {
                *slot = v;
            }
        }
        c.pq_bytes = opt_uint(d.get("pq_bytes"), "diskvec.pq_bytes")?.or(c.pq_bytes);
        if let Some(ms) = opt_uint(d.get("idle_merge_ms"), "diskvec.idle_merge_ms")? {
            c.idle_merge_ms = ms as u64;
        }
        match d.get("navigation") {
            None | Some(Value::Null) => {}
            Some(Value::Bool(b)) => c.navigation = *b,
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "diskvec.navigation must be true or false, got {other}"
                )))
            }
        }
        c.build_memory = match d.get("build_memory") {
            None | Some(Value::Null) => None,
            Some(Value::String(text)) => Some(
                text.parse()
                    .map_err(|e| ApiError::bad_request(format!("diskvec.build_memory: {e}")))?,
            ),
            Some(Value::Number(n)) if n.as_u64().is_some_and(|b| b > 0) => {
                Some(diskvec_db::MemoryBudget::Bytes(n.as_u64().unwrap_or(1)))
            }
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "diskvec.build_memory must be bytes (a positive integer, or text like \
                     \"768MiB\") or a share of the raw vectors (\"25%\"), got {other}"
                )))
            }
        };
        c.graph_builder = match d.get("graph_builder") {
            None | Some(Value::Null) => None,
            Some(Value::String(t)) => diskvec_db::parse_graph_builder(t)
                .map_err(|e| ApiError::bad_request(format!("diskvec.graph_builder: {e}")))?,
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "diskvec.graph_builder must be \"auto\", \"vamana\" or \"pipnn\", got {other}"
                )))
            }
        };
        c.search_memory = match d.get("search_memory") {
            None | Some(Value::Null) => None,
            Some(Value::String(text)) => Some(
                diskvec_db::parse_search_memory(text)
                    .map_err(|e| ApiError::bad_request(format!("diskvec.{e}")))?,
            ),
            Some(Value::Number(n)) if n.as_u64().is_some() => {
                Some(diskvec_db::MemoryBudget::Bytes(n.as_u64().unwrap_or(0)))
            }
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "diskvec.search_memory must be bytes (an integer, or text like \
                     \"512MiB\") or a share of the raw vectors (\"25%\"), got {other}"
                )))
            }
        };
    }
    crate::settings::strict_and_metadata(&mut c, body)?;
    c.check().map_err(ApiError::from)?;
    Ok(c)
}

/// The dense spaces' bodies of a `vectors` field with the prefix of their error messages:
/// the one unnamed space (`{"size": ..}`), or each named one.
fn space_bodies(vectors: Option<&Value>) -> Vec<(String, &Value)> {
    match vectors {
        Some(v) if v.get("size").is_some() => vec![("vectors.".to_string(), v)],
        Some(Value::Object(named)) => named
            .iter()
            .map(|(name, v)| (format!("vectors.{name}."), v))
            .collect(),
        _ => Vec::new(),
    }
}

/// The dense spaces of a create request, and apart the multivector ones (those with a
/// `multivector_config`): `vectors` as one unnamed space (`{"size": N, "distance": ...}`)
/// or as an object of named ones (possibly empty, with sparse ones).
fn dense_spaces(body: &Value) -> Result<(Vec<DenseSpace>, Vec<DenseSpace>)> {
    let vectors = body.get("vectors");
    if matches!(vectors, None | Some(Value::Null)) && body.get("sparse_vectors").is_none() {
        return Err(ApiError::bad_request(
            "vectors is missing: {\"size\": N, \"distance\": ...}",
        ));
    }
    let unnamed = vectors.is_some_and(|v| v.get("size").is_some());
    if !unnamed && !matches!(vectors, None | Some(Value::Null) | Some(Value::Object(_))) {
        return Err(ApiError::bad_request(
            "vectors must be {\"size\": N, \"distance\": ...} or an object of named spaces",
        ));
    }
    space_bodies(vectors)
        .into_iter()
        .map(|(prefix, v)| {
            let size = v.get("size").and_then(Value::as_u64).ok_or_else(|| {
                ApiError::bad_request(format!("{prefix}size must be a positive integer"))
            })?;
            if size == 0 || size > diskvec_db::MAX_DIM as u64 {
                // Qdrant's wording, which its clients and REST suite check.
                return Err(ApiError::bad_request(format!(
                    "Validation error in JSON body: [{prefix}size: value {size} invalid, must \
                     be from 1 to {}]",
                    diskvec_db::MAX_DIM
                )));
            }
            let multi = match v.get("multivector_config").filter(|m| !m.is_null()) {
                None => false,
                Some(m) => match m.get("comparator").and_then(Value::as_str) {
                    Some("max_sim") => true,
                    _ => {
                        return Err(ApiError::bad_request(format!(
                            "{prefix}multivector_config.comparator must be \"max_sim\""
                        )))
                    }
                },
            };
            let distance = v
                .get("distance")
                .and_then(Value::as_str)
                .ok_or_else(|| ApiError::bad_request(format!("{prefix}distance is missing")))?;
            let name = if unnamed {
                String::new()
            } else {
                prefix["vectors.".len()..prefix.len() - 1].to_string()
            };
            let mut space = DenseSpace::new(&name, size as usize, metric(distance)?);
            let at = format!("{prefix}quantization_config");
            space.quantization =
                crate::quantization::parse(v.get("quantization_config"), &at)?.flatten();
            space.datatype = match v.get("datatype") {
                None | Some(Value::Null) => diskvec_db::ElementType::Float32,
                // Qdrant's lossy 4-bit storage is not implemented: the space keeps float32,
                // exact vectors (more bytes, never less fidelity than asked), and its info
                // says float32, what it holds.
                Some(Value::String(t)) if t == "turbo4" => diskvec_db::ElementType::Float32,
                Some(Value::String(t)) => t
                    .parse()
                    .map_err(|e: String| ApiError::bad_request(format!("{prefix}datatype: {e}")))?,
                Some(other) => {
                    return Err(ApiError::bad_request(format!(
                        "{prefix}datatype must be \"float32\", \"float16\" or \"uint8\", got \
                         {other}"
                    )))
                }
            };
            if let Some(h) = v.get("hnsw_config").filter(|h| !h.is_null()) {
                space.hnsw.m = opt_uint(h.get("m"), &format!("{prefix}hnsw_config.m"))?;
                space.hnsw.ef_construct = opt_uint(
                    h.get("ef_construct"),
                    &format!("{prefix}hnsw_config.ef_construct"),
                )?;
                space.hnsw.inline_storage = h.get("inline_storage").and_then(Value::as_bool);
            }
            Ok((space, multi))
        })
        .collect::<Result<Vec<_>>>()
        .map(|spaces| {
            let (multi, dense): (Vec<_>, Vec<_>) = spaces.into_iter().partition(|(_, m)| *m);
            (
                dense.into_iter().map(|(s, _)| s).collect(),
                multi.into_iter().map(|(s, _)| s).collect(),
            )
        })
}

/// The sparse spaces of a create request: `sparse_vectors` as an object of name to
/// `{"modifier": "idf" | "none", "index": {...}}`.
fn sparse_spaces(body: &Value) -> Result<Vec<SparseSpace>> {
    let named = match body.get("sparse_vectors") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Object(named)) => named,
        Some(_) => {
            return Err(ApiError::bad_request(
                "sparse_vectors must be an object of named sparse spaces",
            ))
        }
    };
    named
        .iter()
        .map(|(name, v)| {
            let modifier = match v.get("modifier") {
                None | Some(Value::Null) => SparseModifier::None,
                Some(Value::String(m)) if m.eq_ignore_ascii_case("none") => SparseModifier::None,
                Some(Value::String(m)) if m.eq_ignore_ascii_case("idf") => SparseModifier::Idf,
                Some(other) => {
                    return Err(ApiError::bad_request(format!(
                        "sparse_vectors.{name}.modifier must be \"idf\" or \"none\", got {other}"
                    )))
                }
            };
            // Sparse values are kept as 32-bit floats; another storage type is refused
            // rather than recorded and not honoured.
            match v.get("index").and_then(|i| i.get("datatype")) {
                None | Some(Value::Null) => {}
                Some(Value::String(t)) if t == "float32" => {}
                Some(other) => {
                    return Err(ApiError::bad_request(format!(
                        "sparse_vectors.{name}.index.datatype: sparse vectors do not support \
                         datatype {other} here (diskvec stores them as float32)"
                    )))
                }
            }
            let mut space = SparseSpace::new(name, modifier);
            space.on_disk = sparse_on_disk(v, name)?;
            Ok(space)
        })
        .collect()
}

/// A sparse space's `index.on_disk` (`None`: not given).
pub fn sparse_on_disk(space: &Value, name: &str) -> Result<Option<bool>> {
    match space.get("index").and_then(|i| i.get("on_disk")) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(other) => Err(ApiError::bad_request(format!(
            "sparse_vectors.{name}.index.on_disk must be true or false, got {other}"
        ))),
    }
}

/// `vectors` of a collection's info: the unnamed space's parameters, or an object of the
/// named ones'.
fn vectors_info(c: &CollectionConfig) -> Value {
    let params = |s: &DenseSpace| {
        let mut p = json!({"size": s.dim, "distance": metric_name(s.metric)});
        p["on_disk"] = json!(c.on_disk);
        if !s.hnsw.is_default() {
            p["hnsw_config"] = serde_json::to_value(s.hnsw).unwrap_or_default();
        }
        if s.quantization.is_some() {
            p["quantization_config"] = crate::quantization::echo(s.quantization.as_ref());
        }
        if s.datatype != diskvec_db::ElementType::Float32 {
            p["datatype"] = json!(s.datatype.name());
        }
        p
    };
    let multi_params = |s: &DenseSpace| {
        let mut p = params(s);
        p["multivector_config"] = json!({"comparator": "max_sim"});
        p
    };
    let dense: Vec<DenseSpace> = c.live_dense().cloned().collect();
    let multi: Vec<DenseSpace> = c.live_multi().cloned().collect();
    match (dense.as_slice(), multi.as_slice()) {
        ([one], []) if one.name.is_empty() => params(one),
        ([], [one]) if one.name.is_empty() => multi_params(one),
        (dense, multi) => Value::Object(
            dense
                .iter()
                .map(|s| (s.name.clone(), params(s)))
                .chain(multi.iter().map(|s| (s.name.clone(), multi_params(s))))
                .collect(),
        ),
    }
}

fn sparse_vectors_info(c: &CollectionConfig) -> Value {
    Value::Object(
        c.live_sparse()
            .map(|s| {
                let mut params = match s.modifier {
                    SparseModifier::Idf => json!({"modifier": "idf"}),
                    SparseModifier::None => json!({}),
                };
                if let Some(on_disk) = s.on_disk {
                    params["index"] = json!({"on_disk": on_disk});
                }
                (s.name.clone(), params)
            })
            .collect(),
    )
}

/// Strict mode as Qdrant shows it: `enabled` always there.
fn strict_mode_info(s: &diskvec_db::StrictMode) -> Value {
    let mut v = serde_json::to_value(s).unwrap_or_else(|_| json!({}));
    if let Value::Object(m) = &mut v {
        m.entry("enabled").or_insert(json!(false));
    }
    v
}

/// Points of this collection in `kb` KB of float32 vectors: how Qdrant's optimizer sizes
/// (`indexing_threshold`, `max_segment_size`) become diskvec's point counts.
pub fn points_in_kb(c: &CollectionConfig, kb: usize) -> usize {
    kb.saturating_mul(1024) / (4 * c.dense_numbers().max(1))
}

/// The KB of float32 vectors `points` of this collection take, as Qdrant reports its sizes.
fn kb_of_points(c: &CollectionConfig, points: usize) -> usize {
    points * 4 * c.dense_numbers() / 1024
}

/// Smallest seal threshold `indexing_threshold` maps to, in points.
pub const MIN_SEAL_POINTS: usize = 1_000;

/// `optimizers_config.indexing_threshold` (KB) of a create or update body, if given.
pub fn indexing_threshold_kb(body: &Value) -> Result<Option<usize>> {
    match body.get("optimizers_config") {
        Some(o) => opt_uint(
            o.get("indexing_threshold"),
            "optimizers_config.indexing_threshold",
        ),
        None => Ok(None),
    }
}

/// Points in a graph index, as Qdrant counts its HNSW-indexed vectors: every sealed point,
/// and the growing segments' points the indexer has linked into their HNSW graphs.
fn indexed_vectors(info: &CollectionInfo) -> usize {
    let linked: usize = info
        .segments
        .iter()
        .filter(|s| s.kind != "sealed")
        .map(|s| s.points.saturating_sub(s.deleted + s.unindexed))
        .sum();
    info.indexed_points + linked
}

/// `GET /collections/{name}` in Qdrant's shape, with diskvec's own details under `diskvec`.
/// `indexed[i]` is the number of points that have a value for the i-th payload index's field.
pub fn collection_info(info: &CollectionInfo, indexed: &[usize]) -> Value {
    let c = &info.config;
    let schema: Map<String, Value> = info
        .payload_indexes
        .iter()
        .zip(indexed)
        .map(|((field, kind), points)| {
            let mut entry = json!({"data_type": kind, "points": points});
            if let Some(params) = info.payload_index_params.get(field) {
                entry["params"] = params.clone();
            }
            (field.clone(), entry)
        })
        .collect();
    let mut out = json!({
        "status": info.status.name(),
        "optimizer_status": match &info.error { None => json!("ok"), Some(e) => json!({"error": e}) },
        "points_count": info.points,
        "indexed_vectors_count": indexed_vectors(info),
        "segments_count": info.segments.len(),
        // Writes are applied before they are answered: nothing waits in a queue.
        "update_queue": {"length": 0},
        "config": {
            "params": {
                "vectors": vectors_info(c),
                "sparse_vectors": sparse_vectors_info(c),
                "shard_number": 1,
                "replication_factor": 1,
                "write_consistency_factor": 1,
                "on_disk_payload": c.on_disk_payload,
            },
            "hnsw_config": {
                "m": c.hnsw_m, "ef_construct": c.hnsw_ef_construction,
                "full_scan_threshold": 10000, "on_disk": c.on_disk,
            },
            "optimizer_config": {
                "deleted_threshold": c.vacuum_threshold,
                "vacuum_min_vector_number": 1000,
                "default_segment_number": 0,
                "indexing_threshold": kb_of_points(c, c.seal_threshold),
                // Qdrant's schema has it null or at least 1 (a collection of no dense vectors: 0 KB).
                "max_segment_size": Some(kb_of_points(c, c.max_segment_points)).filter(|&kb| kb > 0),
                "flush_interval_sec": 5,
            },
            "wal_config": {"wal_capacity_mb": 64, "wal_segments_ahead": 0},
            "quantization_config": crate::quantization::echo(c.quantization.as_ref()),
            "strict_mode_config": strict_mode_info(&c.strict_mode),
            "metadata": c.metadata,
        },
        "payload_schema": schema,
        "diskvec": info,
    });
    let warnings = c.warnings();
    if !warnings.is_empty() {
        out["warnings"] = warnings
            .into_iter()
            .map(|m| json!({"message": m}))
            .collect();
    }
    out
}
