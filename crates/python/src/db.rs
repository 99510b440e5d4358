//! The database layer (`diskvec-db`) from Python: a database of collections of points.
//! The Python package (python/diskvec/db.py) wraps these classes: it checks argument types,
//! turns id arrays into lists and documents the API; this layer converts and calls.
//!
//! Every call into the database runs with the GIL released and under the read side of the
//! handle's lock; `close` and `drop_collection` take the write side, so they wait for calls
//! in flight and no call runs on a closed database or a dropped collection. Lock waits happen
//! with the GIL released, so a thread holding the GIL never waits for one that needs it.

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::{Arc, RwLock, RwLockReadGuard, Weak};

use diskvec_db::{
    parse_metric, Collection, CollectionConfig, Database, DbError, DbOptions, Durability, Filter,
    Hit, MemoryBudget, NamedVectors, NewSpace, Payload, PointId, PointRecord, Record,
    SearchRequest, SnapshotsOf, Vector,
};
use diskvec_index::limits;
use numpy::{IntoPyArray, PyReadonlyArray1, PyReadonlyArray2, PyUntypedArrayMethods};
use pyo3::exceptions::{PyKeyError, PyOSError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use rayon::prelude::*;

use crate::json;
use crate::spaces;
use crate::{contiguous, pool, size, value_err};

/// The database behind a handle; `None` once closed.
struct Shared {
    db: RwLock<Option<Database>>,
}

impl Shared {
    fn read(&self) -> RwLockReadGuard<'_, Option<Database>> {
        self.db.read().unwrap_or_else(|e| e.into_inner())
    }
}

/// The Python exception of a database error: the caller's mistakes are ValueError (KeyError
/// for a name or id that is not there), what the disk did is OSError.
fn db_err(e: DbError) -> PyErr {
    match e {
        DbError::InvalidInput(_)
        | DbError::BadRequest(_)
        | DbError::Validation(_)
        | DbError::BadFilter(_)
        | DbError::CollectionExists(_) => PyValueError::new_err(e.to_string()),
        DbError::UnknownCollection(_) | DbError::PointNotFound(_) | DbError::NotFound(_) => {
            PyKeyError::new_err(e.to_string())
        }
        DbError::Wal(diskvec_db::wal::WalError::RecordTooLarge { .. }) => {
            PyValueError::new_err(e.to_string())
        }
        DbError::Index(e) => crate::to_py(e),
        DbError::Wal(_) | DbError::Corrupt { .. } | DbError::File { .. } => {
            PyOSError::new_err(e.to_string())
        }
        DbError::Unavailable(_) | DbError::Busy(_) => PyOSError::new_err(e.to_string()),
        DbError::RateLimited { .. } => PyRuntimeError::new_err(e.to_string()),
    }
}

/// Runs `f`, turning a panic into RuntimeError: a panic is a bug, and PyO3's PanicException
/// derives from BaseException, which `except Exception` would not catch.
fn guarded<T>(f: impl FnOnce() -> diskvec_db::Result<T>) -> PyResult<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r.map_err(db_err),
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            Err(PyRuntimeError::new_err(format!(
                "internal error in diskvec (a bug, please report it): {what}"
            )))
        }
    }
}

fn closed() -> PyErr {
    PyValueError::new_err("the database is closed")
}

/// A non-negative setting; the database checks its upper range.
fn setting(name: &str, value: i128) -> PyResult<usize> {
    usize::try_from(value).map_err(|_| value_err(format!("{name} must be positive, got {value}")))
}

fn ids_of(ids: &[Bound<'_, PyAny>]) -> PyResult<Vec<PointId>> {
    ids.iter()
        .enumerate()
        .map(|(i, id)| json::point_id(id).map_err(|e| value_err(format!("ids[{i}]: {e}"))))
        .collect()
}

fn filter_of(filter: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Filter>> {
    let Some(f) = filter.filter(|f| !f.is_none()) else {
        return Ok(None);
    };
    let v =
        json::to_json(f).map_err(|e| value_err(format!("bad filter: {}", e.describe("filter"))))?;
    Filter::from_json(&v)
        .map(Some)
        .map_err(|e| db_err(DbError::BadFilter(e)))
}

/// A payload given as a dict (or None: empty).
fn payload_of(v: &Bound<'_, PyAny>, what: &str) -> PyResult<Payload> {
    if v.is_none() {
        return Ok(Payload::new());
    }
    match json::to_json(v).map_err(|e| value_err(e.describe(what)))? {
        serde_json::Value::Object(map) => Ok(map),
        _ => Err(value_err(format!(
            "{what} must be a dict, got {}",
            v.get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_default()
        ))),
    }
}

/// A point as a dict: id, version, and payload / vectors when asked for. Its vector in the
/// unnamed space is `vector`; vectors in named spaces are under `vectors` (a dense one as
/// an array, a sparse one as a dict of `indices` and `values`).
fn record_dict<'py>(
    py: Python<'py>,
    id: PointId,
    version: u64,
    payload: Option<Payload>,
    vectors: Option<NamedVectors>,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("id", json::id_to_py(py, id)?)?;
    d.set_item("version", version)?;
    if let Some(p) = payload {
        d.set_item("payload", json::map_to_py(py, &p)?)?;
    }
    if let Some(mut vectors) = vectors {
        if let Some(Vector::Dense(v)) = vectors.remove("") {
            d.set_item("vector", v.into_pyarray(py))?;
        }
        if !vectors.is_empty() {
            let named = PyDict::new(py);
            for (name, v) in vectors {
                match v {
                    Vector::Dense(v) => named.set_item(name, v.into_pyarray(py))?,
                    Vector::Sparse(s) => {
                        let sparse = PyDict::new(py);
                        sparse.set_item("indices", s.indices.into_pyarray(py))?;
                        sparse.set_item("values", s.values.into_pyarray(py))?;
                        named.set_item(name, sparse)?;
                    }
                    Vector::Multi(rows) => {
                        let list = PyList::empty(py);
                        for row in rows {
                            list.append(row.into_pyarray(py))?;
                        }
                        named.set_item(name, list)?;
                    }
                }
            }
            d.set_item("vectors", named)?;
        }
    }
    Ok(d)
}

fn records_list<'py>(py: Python<'py>, records: Vec<Record>) -> PyResult<Bound<'py, PyList>> {
    let list = PyList::empty(py);
    for r in records {
        list.append(record_dict(py, r.id, r.version, r.payload, r.vectors)?)?;
    }
    Ok(list)
}

fn hits_list<'py>(py: Python<'py>, hits: Vec<Hit>) -> PyResult<Bound<'py, PyList>> {
    let list = PyList::empty(py);
    for h in hits {
        let d = record_dict(py, h.id, h.version, h.payload, h.vectors)?;
        d.set_item("score", h.score)?;
        d.set_item("distance", h.distance)?;
        list.append(d)?;
    }
    Ok(list)
}

/// Numbers of a point's unnamed dense vector (the one this API writes).
fn dense_len(p: &PointRecord) -> usize {
    p.vector().map_or(0, <[f32]>::len)
}

/// The WAL takes records up to 64 MiB; a bigger upsert is split into parts below this.
const PART_BYTES: usize = 32 << 20;
/// Points one write takes (`diskvec_db`'s MAX_BATCH).
const PART_POINTS: usize = 100_000;

/// Upserts `points`, split into several writes when one would be too big for a log record.
/// Splitting makes the upsert no longer atomic, so everything the database would refuse is
/// checked up front: a refusal still writes nothing.
fn upsert_parts(col: &Collection, points: Vec<PointRecord>) -> diskvec_db::Result<u64> {
    let sizes: Vec<usize> = points
        .iter()
        .map(|p| 32 + 4 * dense_len(p) + serde_json::to_vec(&p.payload).map_or(0, |j| j.len()))
        .collect();
    if points.len() <= PART_POINTS && sizes.iter().sum::<usize>() <= PART_BYTES {
        return col.upsert(points);
    }
    let config = col.config();
    let Some(space) = config.dense_space("").map(|i| &config.dense[i]) else {
        return Err(DbError::InvalidInput(format!(
            "collection {:?} has no unnamed vector space",
            col.name()
        )));
    };
    for (p, &bytes) in points.iter().zip(&sizes) {
        let bad = |m: String| Err(DbError::InvalidInput(format!("point {}: {m}", p.id)));
        let vector = p.vector().unwrap_or_default();
        if vector.len() != space.dim {
            return bad(diskvec_db::dimension_error(
                space.dim,
                vector.len(),
                &format!(" (collection {:?})", col.name()),
            ));
        }
        if vector.iter().any(|x| !x.is_finite()) {
            return bad("vector holds a non-finite value (NaN or infinity)".into());
        }
        if bytes - 32 - 4 * vector.len() > config.max_payload_bytes {
            return bad(format!(
                "payload is over {} bytes",
                config.max_payload_bytes
            ));
        }
    }
    let mut op = 0;
    let mut part = Vec::new();
    let mut part_bytes = 0;
    for (p, bytes) in points.into_iter().zip(sizes) {
        if !part.is_empty() && (part_bytes + bytes > PART_BYTES || part.len() >= PART_POINTS) {
            op = col.upsert(std::mem::take(&mut part))?;
            part_bytes = 0;
        }
        part_bytes += bytes;
        part.push(p);
    }
    if !part.is_empty() {
        op = col.upsert(part)?;
    }
    Ok(op)
}

/// An open database: a directory of named collections.
#[pyclass(module = "diskvec._native", frozen, name = "Database")]
pub struct PyDatabase {
    shared: Arc<Shared>,
    path: PathBuf,
}

impl PyDatabase {
    /// Runs `f` on the open database, GIL released; `exclusive` waits for every call in
    /// flight on this database and its collections.
    fn with<T: Send>(
        &self,
        py: Python<'_>,
        exclusive: bool,
        f: impl FnOnce(&Database) -> diskvec_db::Result<T> + Send,
    ) -> PyResult<T> {
        fn run<T>(
            db: &Option<Database>,
            f: impl FnOnce(&Database) -> diskvec_db::Result<T>,
        ) -> PyResult<T> {
            let db = db.as_ref().ok_or_else(closed)?;
            guarded(|| f(db))
        }
        let shared = &self.shared;
        py.detach(|| {
            if exclusive {
                run(&shared.db.write().unwrap_or_else(|e| e.into_inner()), f)
            } else {
                run(&shared.read(), f)
            }
        })
    }

    fn handle(&self, name: &str, col: &Arc<Collection>) -> PyCollection {
        PyCollection {
            shared: Arc::clone(&self.shared),
            name: name.to_string(),
            ident: Arc::downgrade(col),
        }
    }
}

#[pymethods]
impl PyDatabase {
    #[new]
    #[pyo3(signature = (path, build_memory=None, search_memory=None, pq_codes=None))]
    fn open(
        py: Python<'_>,
        path: PathBuf,
        build_memory: Option<&str>,
        search_memory: Option<&str>,
        pq_codes: Option<&str>,
    ) -> PyResult<Self> {
        let options = DbOptions {
            build_memory: match build_memory {
                Some(text) => text.parse().map_err(|e| value_err(format!("{e}")))?,
                None => MemoryBudget::Auto,
            },
            search_memory: match search_memory {
                Some(text) => {
                    diskvec_db::parse_search_memory(text).map_err(|e| value_err(format!("{e}")))?
                }
                None => MemoryBudget::Auto,
            },
            pq_codes: match pq_codes {
                Some(text) => text.parse().map_err(|e| value_err(format!("{e}")))?,
                None => Default::default(),
            },
            // The embedding program is the operator: its collections' paths are its own.
            storage_paths: diskvec_db::StoragePaths::Any,
        };
        let db = py.detach(|| guarded(|| Database::open_with_options(&path, options)))?;
        Ok(Self {
            shared: Arc::new(Shared {
                db: RwLock::new(Some(db)),
            }),
            path,
        })
    }

    #[getter]
    fn path(&self) -> PathBuf {
        self.path.clone()
    }

    #[getter]
    fn closed(&self) -> bool {
        self.shared.read().is_none()
    }

    #[pyo3(signature = (name, dim, metric, paths, wal_path, durability, interval_ms, seal_threshold,
                        vacuum_threshold, max_degree, build_list, pq_bytes, search_list, max_payload_bytes,
                        on_disk, idle_merge_ms, navigation, build_memory, search_memory,
                        dense_spaces, sparse_spaces, on_disk_payload, datatype, graph_builder))]
    #[allow(clippy::too_many_arguments)]
    fn create_collection(
        &self,
        py: Python<'_>,
        name: String,
        dim: Option<i128>,
        metric: &str,
        paths: Vec<PathBuf>,
        wal_path: Option<PathBuf>,
        durability: &str,
        interval_ms: Option<i128>,
        seal_threshold: Option<i128>,
        vacuum_threshold: Option<f64>,
        max_degree: Option<i128>,
        build_list: Option<i128>,
        pq_bytes: Option<i128>,
        search_list: Option<i128>,
        max_payload_bytes: Option<i128>,
        on_disk: bool,
        idle_merge_ms: Option<i128>,
        navigation: bool,
        build_memory: Option<&str>,
        search_memory: Option<&str>,
        dense_spaces: Option<Vec<spaces::SpaceArgs>>,
        sparse_spaces: Option<Vec<(String, String, bool)>>,
        on_disk_payload: bool,
        datatype: &str,
        graph_builder: &str,
    ) -> PyResult<PyCollection> {
        let mut c = match (dim, dense_spaces, sparse_spaces) {
            (Some(dim), None, None) => {
                let metric = parse_metric(metric).map_err(db_err)?;
                let mut c = CollectionConfig::new(setting("dim", dim)?, metric);
                c.dense[0].datatype = datatype.parse().map_err(value_err)?;
                c
            }
            (None, dense, sparse) if dense.is_some() || sparse.is_some() => {
                let (multi, dense): (Vec<_>, Vec<_>) =
                    dense.unwrap_or_default().into_iter().partition(|s| s.3);
                let strip = |list: Vec<spaces::SpaceArgs>| {
                    list.into_iter()
                        .map(|(n, d, m, _, t)| (n, d, m, t))
                        .collect()
                };
                let mut c = CollectionConfig::with_spaces(
                    spaces::dense_spaces(strip(dense))?,
                    spaces::sparse_spaces(sparse.unwrap_or_default())?,
                );
                c.multi = spaces::dense_spaces(strip(multi))?;
                c
            }
            (None, _, _) => return Err(value_err("give dim, or vectors and/or sparse_vectors")),
            (Some(_), _, _) => {
                return Err(value_err(
                    "give dim (one unnamed vector) or vectors (named ones), not both",
                ))
            }
        };
        c.paths = paths;
        c.wal_path = wal_path;
        c.durability = match (durability, interval_ms) {
            ("sync", None) => Durability::Sync,
            ("sync", Some(_)) => {
                return Err(value_err(
                    "interval_ms applies to durability=\"interval\" only",
                ))
            }
            ("interval", ms) => Durability::Interval {
                interval_ms: setting("interval_ms", ms.unwrap_or(200))? as u64,
            },
            (other, _) => {
                return Err(value_err(format!(
                    "durability must be \"sync\" or \"interval\", got {other:?}"
                )))
            }
        };
        if let Some(v) = seal_threshold {
            c.seal_threshold = setting("seal_threshold", v)?;
        }
        if let Some(v) = vacuum_threshold {
            c.vacuum_threshold = v;
        }
        if let Some(v) = max_degree {
            c.max_degree = size(limits::MAX_DEGREE, v)?;
        }
        if let Some(v) = build_list {
            c.build_list = size(limits::BUILD_LIST, v)?;
        }
        if let Some(v) = pq_bytes {
            c.pq_bytes = Some(size(limits::pq_bytes(c.dense_numbers()), v)?);
        }
        if let Some(v) = search_list {
            c.search_list = size(limits::SEARCH_LIST, v)?;
        }
        if let Some(v) = max_payload_bytes {
            c.max_payload_bytes = setting("max_payload_bytes", v)?;
        }
        c.on_disk = on_disk;
        c.navigation = navigation;
        c.on_disk_payload = on_disk_payload;
        if let Some(v) = idle_merge_ms {
            c.idle_merge_ms = u64::try_from(v)
                .map_err(|_| value_err(format!("idle_merge_ms must be 0 or more, got {v}")))?;
        }
        if let Some(text) = build_memory {
            c.build_memory = Some(text.parse().map_err(|e| value_err(format!("{e}")))?);
        }
        if let Some(text) = search_memory {
            c.search_memory =
                Some(diskvec_db::parse_search_memory(text).map_err(|e| value_err(format!("{e}")))?);
        }
        c.graph_builder = diskvec_db::parse_graph_builder(graph_builder).map_err(value_err)?;
        let col = self.with(py, false, |db| db.create_collection(&name, c))?;
        Ok(self.handle(&name, &col))
    }

    fn collection(&self, py: Python<'_>, name: String) -> PyResult<PyCollection> {
        let col = self.with(py, false, |db| db.collection(&name))?;
        Ok(self.handle(&name, &col))
    }

    fn collection_names(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        self.with(py, false, |db| Ok(db.collection_names()))
    }

    fn drop_collection(&self, py: Python<'_>, name: String) -> PyResult<()> {
        self.with(py, true, |db| db.drop_collection(&name))
    }

    /// Snapshots collection `name`; returns (file name, path, size, SHA-256).
    fn create_snapshot(
        &self,
        py: Python<'_>,
        name: String,
    ) -> PyResult<(String, String, u64, String)> {
        self.with(py, false, |db| {
            let info = db.create_snapshot(&name)?;
            let path = db.snapshot_file(SnapshotsOf::Collection(&name), &info.name)?;
            Ok((
                info.name,
                path.display().to_string(),
                info.size,
                info.checksum.unwrap_or_default(),
            ))
        })
    }

    /// The snapshots of collection `name`: (file name, size, SHA-256), oldest first.
    fn list_snapshots(&self, py: Python<'_>, name: String) -> PyResult<Vec<(String, u64, String)>> {
        self.with(py, false, |db| {
            Ok(db
                .list_snapshots(SnapshotsOf::Collection(&name))?
                .into_iter()
                .map(|s| (s.name, s.size, s.checksum.unwrap_or_default()))
                .collect())
        })
    }

    fn delete_snapshot(&self, py: Python<'_>, name: String, snapshot: String) -> PyResult<()> {
        self.with(py, false, |db| {
            db.delete_snapshot(SnapshotsOf::Collection(&name), &snapshot)
        })
    }

    /// Restores the snapshot file at `path` as collection `name` (replacing one of that
    /// name), after checking its SHA-256 when `checksum` is given.
    #[pyo3(signature = (name, path, checksum=None))]
    fn restore_snapshot(
        &self,
        py: Python<'_>,
        name: String,
        path: std::path::PathBuf,
        checksum: Option<String>,
    ) -> PyResult<()> {
        self.with(py, true, |db| {
            db.restore_collection(&name, &path, checksum.as_deref())
                .map(|_| ())
        })
    }

    /// Closes every collection and releases the directory; later calls raise ValueError.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let shared = &self.shared;
        py.detach(|| {
            let db = shared.db.write().unwrap_or_else(|e| e.into_inner()).take();
            match db {
                // Dropped even when closing fails, so the directory's lock is released.
                Some(db) => guarded(move || db.close()),
                None => Ok(()),
            }
        })
    }
}

/// A collection of a database.
#[pyclass(module = "diskvec._native", frozen, name = "Collection")]
pub struct PyCollection {
    shared: Arc<Shared>,
    name: String,
    /// Which collection of that name: one dropped and created again is another. A weak
    /// reference, so that a handle keeps nothing open once the database is closed.
    ident: Weak<Collection>,
}

impl PyCollection {
    /// Runs `f` on the collection, GIL released.
    fn with<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&Collection) -> diskvec_db::Result<T> + Send,
    ) -> PyResult<T> {
        self.with_db(py, |_, col| f(col))
    }

    /// Runs `f` on the collection and its database (for what names other collections),
    /// GIL released.
    fn with_db<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&Database, &Collection) -> diskvec_db::Result<T> + Send,
    ) -> PyResult<T> {
        let (shared, name, ident) = (&self.shared, &self.name, &self.ident);
        py.detach(|| {
            let guard = shared.read();
            let db = guard.as_ref().ok_or_else(closed)?;
            match db.collection(name) {
                Ok(col) if std::ptr::eq(Arc::as_ptr(&col), ident.as_ptr()) => {
                    guarded(|| f(db, &col))
                }
                _ => Err(PyKeyError::new_err(format!(
                    "collection {name:?} was dropped"
                ))),
            }
        })
    }
}

#[pymethods]
impl PyCollection {
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    #[pyo3(signature = (ids, vectors, payloads))]
    fn upsert(
        &self,
        py: Python<'_>,
        ids: Vec<Bound<'_, PyAny>>,
        vectors: PyReadonlyArray2<f32>,
        payloads: Option<Vec<Bound<'_, PyAny>>>,
    ) -> PyResult<u64> {
        let ids = ids_of(&ids)?;
        let (rows, dim) = (vectors.shape()[0], vectors.shape()[1]);
        if rows != ids.len() {
            return Err(value_err(format!("{} ids but {rows} vectors", ids.len())));
        }
        let payloads = match payloads {
            None => vec![Payload::new(); ids.len()],
            Some(p) if p.len() != ids.len() => {
                return Err(value_err(format!(
                    "{} ids but {} payloads",
                    ids.len(),
                    p.len()
                )))
            }
            Some(p) => p
                .iter()
                .zip(&ids)
                .map(|(p, id)| payload_of(p, &format!("point {id}: payload")))
                .collect::<PyResult<_>>()?,
        };
        let data = if rows == 0 {
            &[][..]
        } else {
            contiguous(&vectors)?
        };
        self.with(py, |col| {
            // Within one write the database keeps the first of a repeated id; a list of
            // changes applied in order should end with the last.
            let mut last: HashMap<PointId, usize> = HashMap::with_capacity(ids.len());
            for (i, id) in ids.iter().enumerate() {
                last.insert(*id, i);
            }
            let points = ids
                .iter()
                .zip(payloads)
                .enumerate()
                .filter(|(i, (id, _))| last[*id] == *i)
                .map(|(i, (id, payload))| {
                    PointRecord::new(*id, data[i * dim..(i + 1) * dim].to_vec(), payload)
                })
                .collect();
            upsert_parts(col, points)
        })
    }

    /// `upsert` with each point's vectors as a dict of space name to vector.
    #[pyo3(signature = (ids, vectors, payloads))]
    fn upsert_named(
        &self,
        py: Python<'_>,
        ids: Vec<Bound<'_, PyAny>>,
        vectors: Vec<Bound<'_, PyAny>>,
        payloads: Option<Vec<Bound<'_, PyAny>>>,
    ) -> PyResult<u64> {
        let ids = ids_of(&ids)?;
        if vectors.len() != ids.len() {
            return Err(value_err(format!(
                "{} ids but {} vector dicts",
                ids.len(),
                vectors.len()
            )));
        }
        let payloads = match payloads {
            None => vec![Payload::new(); ids.len()],
            Some(p) if p.len() != ids.len() => {
                return Err(value_err(format!(
                    "{} ids but {} payloads",
                    ids.len(),
                    p.len()
                )))
            }
            Some(p) => p
                .iter()
                .zip(&ids)
                .map(|(p, id)| payload_of(p, &format!("point {id}: payload")))
                .collect::<PyResult<_>>()?,
        };
        let mut points = Vec::with_capacity(ids.len());
        for ((id, v), payload) in ids.iter().zip(&vectors).zip(payloads) {
            let vectors = spaces::named_of(v, &format!("point {id}: vectors"))?;
            points.push(PointRecord {
                id: *id,
                vectors,
                payload,
            });
        }
        self.with(py, |col| col.upsert(points))
    }

    fn update_vectors(
        &self,
        py: Python<'_>,
        ids: Vec<Bound<'_, PyAny>>,
        vectors: Vec<Bound<'_, PyAny>>,
    ) -> PyResult<u64> {
        let ids = ids_of(&ids)?;
        if vectors.len() != ids.len() {
            return Err(value_err(format!(
                "{} ids but {} vector dicts",
                ids.len(),
                vectors.len()
            )));
        }
        let points = ids
            .iter()
            .zip(&vectors)
            .map(|(id, v)| Ok((*id, spaces::named_of(v, &format!("point {id}: vectors"))?)))
            .collect::<PyResult<Vec<_>>>()?;
        self.with(py, |col| col.update_vectors(points))
    }

    fn delete_vectors(
        &self,
        py: Python<'_>,
        ids: Vec<Bound<'_, PyAny>>,
        names: Vec<String>,
    ) -> PyResult<u64> {
        let ids = ids_of(&ids)?;
        self.with(py, |col| col.delete_vectors(&ids, &names))
    }

    fn delete(&self, py: Python<'_>, ids: Vec<Bound<'_, PyAny>>) -> PyResult<u64> {
        let ids = ids_of(&ids)?;
        self.with(py, |col| {
            let mut op = 0;
            for part in ids.chunks(PART_POINTS) {
                op = col.delete(part.to_vec())?;
            }
            if ids.is_empty() {
                op = col.delete(Vec::new())?;
            }
            Ok(op)
        })
    }

    /// Returns (op, points deleted).
    fn delete_where(&self, py: Python<'_>, filter: Bound<'_, PyAny>) -> PyResult<(u64, usize)> {
        let filter = filter_of(Some(&filter))?.unwrap_or_default();
        self.with(py, |col| col.delete_where(&filter))
    }

    fn set_payload(
        &self,
        py: Python<'_>,
        ids: Vec<Bound<'_, PyAny>>,
        payload: Bound<'_, PyAny>,
    ) -> PyResult<u64> {
        let ids = ids_of(&ids)?;
        let payload = payload_of(&payload, "payload")?;
        self.with(py, |col| col.set_payload(&ids, &payload))
    }

    fn overwrite_payload(
        &self,
        py: Python<'_>,
        ids: Vec<Bound<'_, PyAny>>,
        payload: Bound<'_, PyAny>,
    ) -> PyResult<u64> {
        let ids = ids_of(&ids)?;
        let payload = payload_of(&payload, "payload")?;
        self.with(py, |col| col.overwrite_payload(&ids, &payload))
    }

    fn delete_payload(
        &self,
        py: Python<'_>,
        ids: Vec<Bound<'_, PyAny>>,
        keys: Vec<String>,
    ) -> PyResult<u64> {
        let ids = ids_of(&ids)?;
        self.with(py, |col| col.delete_payload_keys(&ids, &keys))
    }

    fn clear_payload(&self, py: Python<'_>, ids: Vec<Bound<'_, PyAny>>) -> PyResult<u64> {
        let ids = ids_of(&ids)?;
        self.with(py, |col| col.clear_payload(&ids))
    }

    #[pyo3(signature = (field, kind, options=None))]
    fn create_payload_index(
        &self,
        py: Python<'_>,
        field: String,
        kind: String,
        options: Option<Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let options = match options.filter(|o| !o.is_none()) {
            None => None,
            Some(o) => {
                let mut v = json::to_json(&o)
                    .map_err(|e| value_err(format!("bad options: {}", e.describe("options"))))?;
                match v.as_object_mut() {
                    Some(m) => m.insert("type".into(), kind.clone().into()),
                    None => return Err(value_err("options must be a dict")),
                };
                Some(v)
            }
        };
        self.with(py, |col| {
            col.create_payload_index_with(&field, &kind, options)
        })
    }

    fn delete_payload_index(&self, py: Python<'_>, field: String) -> PyResult<()> {
        self.with(py, |col| col.delete_payload_index(&field))
    }

    fn payload_indexes(&self, py: Python<'_>) -> PyResult<Vec<(String, String)>> {
        self.with(py, |col| Ok(col.payload_indexes()))
    }

    fn get<'py>(
        &self,
        py: Python<'py>,
        ids: Vec<Bound<'py, PyAny>>,
        with_payload: bool,
        with_vector: bool,
    ) -> PyResult<Bound<'py, PyList>> {
        let ids = ids_of(&ids)?;
        let records = self.with(py, |col| col.get(&ids, with_payload, with_vector))?;
        records_list(py, records)
    }

    #[pyo3(signature = (query, k, filter, search_list, offset, with_payload, with_vector, score_threshold, using, exact))]
    #[allow(clippy::too_many_arguments)]
    fn search<'py>(
        &self,
        py: Python<'py>,
        query: PyReadonlyArray1<f32>,
        k: i128,
        filter: Option<Bound<'py, PyAny>>,
        search_list: Option<i128>,
        offset: i128,
        with_payload: bool,
        with_vector: bool,
        score_threshold: Option<f32>,
        using: String,
        exact: bool,
    ) -> PyResult<Bound<'py, PyList>> {
        let mut req = request(
            k,
            filter.as_ref(),
            search_list,
            offset,
            with_payload,
            with_vector,
            score_threshold,
        )?;
        req.using = using;
        req.exact = exact;
        let q = query
            .as_slice()
            .map_err(|_| value_err("query must be contiguous"))?;
        let hits = self.with(py, |col| col.search(q, &req))?;
        hits_list(py, hits)
    }

    /// `search` with a sparse query (a dict of `indices` and `values`) in sparse space
    /// `using`.
    #[pyo3(signature = (query, k, filter, offset, with_payload, with_vector, score_threshold, using))]
    #[allow(clippy::too_many_arguments)]
    fn search_sparse<'py>(
        &self,
        py: Python<'py>,
        query: Bound<'py, PyDict>,
        k: i128,
        filter: Option<Bound<'py, PyAny>>,
        offset: i128,
        with_payload: bool,
        with_vector: bool,
        score_threshold: Option<f32>,
        using: String,
    ) -> PyResult<Bound<'py, PyList>> {
        let mut req = request(
            k,
            filter.as_ref(),
            None,
            offset,
            with_payload,
            with_vector,
            score_threshold,
        )?;
        req.using = using;
        let query = spaces::sparse_of(&query, "query")?;
        let hits = self.with(py, |col| col.search_sparse(query, &req))?;
        hits_list(py, hits)
    }

    /// Adds a vector space: dense (`dim` and `metric`, `multivector` for MaxSim rows) or
    /// sparse (`modifier`).
    #[pyo3(signature = (name, dim, metric, multivector, sparse_modifier))]
    fn create_space(
        &self,
        py: Python<'_>,
        name: String,
        dim: Option<i128>,
        metric: String,
        multivector: bool,
        sparse_modifier: Option<String>,
    ) -> PyResult<()> {
        let space = match (dim, sparse_modifier) {
            (Some(dim), None) => {
                let float32 = "float32".to_string();
                let mut dense = spaces::dense_spaces(vec![(name, dim, metric, float32)])?;
                let one = dense.remove(0);
                match multivector {
                    true => NewSpace::Multi(one),
                    false => NewSpace::Dense(one),
                }
            }
            (None, Some(modifier)) => {
                NewSpace::Sparse(spaces::sparse_spaces(vec![(name, modifier, false)])?.remove(0))
            }
            _ => return Err(value_err("a space is dense (give dim) or sparse, not both")),
        };
        self.with(py, |col| col.create_space(space))
    }

    /// Deletes the vector space `name`, with every point's vector in it.
    fn delete_space(&self, py: Python<'_>, name: String) -> PyResult<()> {
        self.with(py, |col| col.delete_space(&name))
    }

    /// Qdrant's universal query (`points/query`'s body as a dict): prefetches, fusion,
    /// recommend, discover, context, order by, sample, by-id queries.
    #[pyo3(signature = (request, with_payload, with_vector))]
    fn query<'py>(
        &self,
        py: Python<'py>,
        request: Bound<'py, PyAny>,
        with_payload: bool,
        with_vector: bool,
    ) -> PyResult<Bound<'py, PyList>> {
        let body = json::to_json(&request)
            .map_err(|e| value_err(format!("bad query: {}", e.describe("query"))))?;
        let hits = self.with_db(py, |db, col| {
            let req = diskvec_db::query::json::request(&body, db)?;
            col.query(&req, with_payload, with_vector)
        })?;
        hits_list(py, hits)
    }

    #[pyo3(signature = (queries, k, filter, search_list, offset, with_payload, with_vector, score_threshold, threads, using, exact))]
    #[allow(clippy::too_many_arguments)]
    fn search_batch<'py>(
        &self,
        py: Python<'py>,
        queries: PyReadonlyArray2<f32>,
        k: i128,
        filter: Option<Bound<'py, PyAny>>,
        search_list: Option<i128>,
        offset: i128,
        with_payload: bool,
        with_vector: bool,
        score_threshold: Option<f32>,
        threads: Option<i128>,
        using: String,
        exact: bool,
    ) -> PyResult<Bound<'py, PyList>> {
        let mut req = request(
            k,
            filter.as_ref(),
            search_list,
            offset,
            with_payload,
            with_vector,
            score_threshold,
        )?;
        req.using = using;
        req.exact = exact;
        let workers = threads.map(|t| pool(Some(t))).transpose()?;
        let (rows, dim) = (queries.shape()[0], queries.shape()[1]);
        let data = if rows == 0 {
            &[][..]
        } else {
            contiguous(&queries)?
        };
        let results = self.with(py, |col| {
            if rows > 0 {
                col.check_query_dimension(&req.using, dim)?;
            }
            // One part per thread: each part's sealed-segment reads are in flight together.
            let run = || -> diskvec_db::Result<Vec<Vec<Hit>>> {
                let per = rows.div_ceil(rayon::current_num_threads()).max(1);
                let parts = data
                    .par_chunks(per * dim.max(1))
                    .map(|part| col.search_batch(part, &req))
                    .collect::<diskvec_db::Result<Vec<_>>>()?;
                Ok(parts.into_iter().flatten().collect())
            };
            match &workers {
                Some(w) => w.install(run),
                None => run(),
            }
        })?;
        let list = PyList::empty(py);
        for hits in results {
            list.append(hits_list(py, hits)?)?;
        }
        Ok(list)
    }

    #[pyo3(signature = (filter, limit, offset, with_payload, with_vector))]
    fn scroll<'py>(
        &self,
        py: Python<'py>,
        filter: Option<Bound<'py, PyAny>>,
        limit: i128,
        offset: Option<Bound<'py, PyAny>>,
        with_payload: bool,
        with_vector: bool,
    ) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyAny>)> {
        let filter = filter_of(filter.as_ref())?;
        let limit = usize::try_from(limit).map_err(|_| {
            value_err(format!(
                "limit must be between 1 and {}, got {limit}",
                limits::K.max
            ))
        })?;
        let offset = offset
            .filter(|o| !o.is_none())
            .map(|o| json::point_id(&o).map_err(|e| value_err(format!("offset: {e}"))))
            .transpose()?;
        let (records, next) = self.with(py, |col| {
            col.scroll(filter.as_ref(), limit, offset, with_payload, with_vector)
        })?;
        let next = match next {
            Some(id) => json::id_to_py(py, id)?,
            None => py.None().into_bound(py),
        };
        Ok((records_list(py, records)?, next))
    }

    #[pyo3(signature = (filter))]
    fn count(&self, py: Python<'_>, filter: Option<Bound<'_, PyAny>>) -> PyResult<usize> {
        let filter = filter_of(filter.as_ref())?;
        self.with(py, |col| col.count(filter.as_ref()))
    }

    fn optimize(&self, py: Python<'_>, wait: bool) -> PyResult<()> {
        self.with(py, |col| col.optimize(wait))
    }

    fn set_indexing(&self, py: Python<'_>, enabled: bool) -> PyResult<()> {
        self.with(py, |col| {
            col.set_indexing(enabled);
            Ok(())
        })
    }

    fn info<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let info = self.with(py, |col| Ok(serde_json::to_value(col.info())))?;
        json::to_py(py, &info.map_err(|e| PyOSError::new_err(e.to_string()))?)
    }

    fn recovery<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let report = self.with(py, |col| Ok(serde_json::to_value(col.recovery())))?;
        json::to_py(py, &report.map_err(|e| PyOSError::new_err(e.to_string()))?)
    }
}

fn request(
    k: i128,
    filter: Option<&Bound<'_, PyAny>>,
    search_list: Option<i128>,
    offset: i128,
    with_payload: bool,
    with_vector: bool,
    score_threshold: Option<f32>,
) -> PyResult<SearchRequest> {
    if score_threshold.is_some_and(|t| t.is_nan()) {
        return Err(value_err("score_threshold must be a number, got NaN"));
    }
    Ok(SearchRequest {
        k: size(limits::K, k)?,
        filter: filter_of(filter)?,
        search_list: search_list
            .map(|l| size(limits::SEARCH_LIST, l))
            .transpose()?,
        offset: usize::try_from(offset)
            .map_err(|_| value_err(format!("offset must be non-negative, got {offset}")))?,
        with_payload,
        with_vector,
        score_threshold,
        using: String::new(),
        idf_corpus: None,
        exact: false,
    })
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyDatabase>()?;
    m.add_class::<PyCollection>()?;
    Ok(())
}
