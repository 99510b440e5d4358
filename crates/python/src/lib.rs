//! `import diskvec`: the disk index and the database from Python, numpy in and out.
//! The Python package (python/diskvec) wraps this module; keep this layer thin.

mod db;
mod json;
mod spaces;

use std::path::PathBuf;

use diskvec_index::diskann::{self, BuildParams, DiskIndex as Inner, OpenOptions, SearchParams};
use diskvec_index::limits::{self, Limit};
use diskvec_index::{flat, IndexError, NoProgress};
use diskvec_vector::{Metric, Rows};
use numpy::ndarray::Array2;
use numpy::{
    IntoPyArray, PyArray1, PyArray2, PyReadonlyArray1, PyReadonlyArray2, PyUntypedArrayMethods,
};
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// (ids, distances) of a batch, one row per query.
type Batch<'py> = (Bound<'py, PyArray2<i64>>, Bound<'py, PyArray2<f32>>);
/// (ids, distances, node reads) of one query.
type Single<'py> = (Bound<'py, PyArray1<i64>>, Bound<'py, PyArray1<f32>>, u32);

pub(crate) fn to_py(e: IndexError) -> PyErr {
    match e {
        IndexError::InvalidArgument(_)
        | IndexError::OutOfRange(_)
        | IndexError::InvalidVectors(_)
        | IndexError::DimensionMismatch { .. } => PyValueError::new_err(e.to_string()),
        _ => PyOSError::new_err(e.to_string()),
    }
}

pub(crate) fn value_err(msg: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(msg.to_string())
}

pub(crate) fn contiguous<'a>(a: &'a PyReadonlyArray2<f32>) -> PyResult<&'a [f32]> {
    a.as_slice()
        .map_err(|_| value_err("array must be C-contiguous"))
}

/// A size parameter checked against its limit. Taken from Python as a wide integer so
/// that negative and huge values get the same message as any other out-of-range value.
pub(crate) fn size(limit: Limit, value: i128) -> PyResult<usize> {
    usize::try_from(value)
        .map_err(|_| limit.out_of_range(value))
        .and_then(|v| limit.check(v))
        .map_err(to_py)
}

pub(crate) fn pool(threads: Option<i128>) -> PyResult<rayon::ThreadPool> {
    let mut b = rayon::ThreadPoolBuilder::new();
    if let Some(t) = threads {
        b = b.num_threads(size(limits::THREADS, t)?);
    }
    b.build().map_err(value_err)
}

/// Refuses negative ids: -1 marks "no result" in the padded answers.
fn external_ids<'a>(ids: &'a PyReadonlyArray1<i64>) -> PyResult<&'a [i64]> {
    let ids = ids
        .as_slice()
        .map_err(|_| value_err("ids must be contiguous"))?;
    if let Some(pos) = ids.iter().position(|&id| id < 0) {
        return Err(value_err(format!(
            "ids must be non-negative (-1 marks a missing result), got {} at position {pos}",
            ids[pos]
        )));
    }
    Ok(ids)
}

#[pyfunction]
#[pyo3(signature = (vectors, path, ids, metric, max_degree, build_list, alpha, pq_bytes, threads, dtype))]
#[allow(clippy::too_many_arguments)]
fn build_index<'py>(
    py: Python<'py>,
    vectors: PyReadonlyArray2<f32>,
    path: PathBuf,
    ids: PyReadonlyArray1<i64>,
    metric: &str,
    max_degree: i128,
    build_list: i128,
    alpha: f32,
    pq_bytes: Option<i128>,
    threads: Option<i128>,
    dtype: &str,
) -> PyResult<Bound<'py, PyDict>> {
    let metric: Metric = metric.parse().map_err(value_err)?;
    let element: diskvec_vector::ElementType = dtype.parse().map_err(value_err)?;
    let dim = vectors.shape()[1];
    let data = contiguous(&vectors)?;
    let ids = external_ids(&ids)?;
    let params = BuildParams {
        metric,
        max_degree: size(limits::MAX_DEGREE, max_degree)?,
        build_list: size(limits::BUILD_LIST, build_list)?,
        alpha,
        pq_bytes: pq_bytes
            .map(|b| size(limits::pq_bytes(dim), b))
            .transpose()?,
        element,
        ..Default::default()
    };
    let workers = pool(threads)?;
    let report = py
        .detach(|| {
            workers.install(|| diskann::build(data, dim.max(1), ids, &params, &path, &NoProgress))
        })
        .map_err(to_py)?;
    let d = PyDict::new(py);
    d.set_item("count", report.count)?;
    d.set_item("dim", report.dim)?;
    d.set_item("pq_bytes", report.pq_bytes)?;
    d.set_item("build_seconds", report.total_seconds)?;
    d.set_item("graph_seconds", report.graph_seconds)?;
    d.set_item("pq_seconds", report.pq_seconds)?;
    d.set_item("nodes_file_bytes", report.nodes_file_bytes)?;
    d.set_item("dtype", element.name())?;
    Ok(d)
}

/// Exact search: for each query, the row numbers and distances of its `k` nearest rows.
#[pyfunction]
fn flat_search<'py>(
    py: Python<'py>,
    base: PyReadonlyArray2<f32>,
    queries: PyReadonlyArray2<f32>,
    k: i128,
    metric: &str,
) -> PyResult<Batch<'py>> {
    let k = size(limits::K, k)?;
    let metric: Metric = metric.parse().map_err(value_err)?;
    let (bd, qd) = (base.shape()[1].max(1), queries.shape()[1].max(1));
    let mut b = contiguous(&base)?.to_vec();
    let mut q = contiguous(&queries)?.to_vec();
    if bd != qd {
        return Err(to_py(IndexError::DimensionMismatch {
            expected: bd,
            got: qd,
        }));
    }
    if b.len() % bd != 0 || b.is_empty() || q.is_empty() {
        return Err(value_err("base and queries must be non-empty 2-D arrays"));
    }
    b.chunks_exact_mut(bd).for_each(|v| metric.prepare(v));
    q.chunks_exact_mut(qd).for_each(|v| metric.prepare(v));
    let found = py
        .detach(|| flat::search(Rows::new(&b, bd), Rows::new(&q, qd), metric, k, &NoProgress))
        .map_err(to_py)?;
    let rows: Vec<Vec<(i64, f32)>> = found
        .into_iter()
        .map(|r| r.into_iter().map(|(i, d)| (i as i64, d)).collect())
        .collect();
    Ok(padded(py, &rows, k))
}

/// Results as (ids, distances) arrays of `k` columns; short rows are padded with -1 / inf.
fn padded<'py>(py: Python<'py>, rows: &[Vec<(i64, f32)>], k: usize) -> Batch<'py> {
    let mut ids = Array2::<i64>::from_elem((rows.len(), k), -1);
    let mut dists = Array2::<f32>::from_elem((rows.len(), k), f32::INFINITY);
    for (r, row) in rows.iter().enumerate() {
        for (c, &(id, d)) in row.iter().take(k).enumerate() {
            ids[[r, c]] = id;
            dists[[r, c]] = d;
        }
    }
    (ids.into_pyarray(py), dists.into_pyarray(py))
}

/// An opened disk index.
#[pyclass(module = "diskvec._native", frozen)]
struct DiskIndex {
    inner: Inner,
}

/// The search parameters Python passes, each checked against its bound: (k, search list,
/// beam width, queries per thread) as Python integers, then the re-rank settings.
fn search_params(
    (k, search_list, beam_width, queries_per_thread): (i128, i128, i128, i128),
    rerank_sigmas: f32,
    exact_distances: bool,
) -> PyResult<SearchParams> {
    Ok(SearchParams {
        k: size(limits::K, k)?,
        search_list: size(limits::SEARCH_LIST, search_list)?,
        beam_width: size(limits::BEAM_WIDTH, beam_width)?,
        queries_per_thread: size(limits::QUERIES_PER_THREAD, queries_per_thread)?,
        rerank_sigmas,
        exact_distances,
        ..Default::default()
    })
}

#[pymethods]
impl DiskIndex {
    #[new]
    #[pyo3(signature = (path, cache_nodes=None, engine="auto", direct=true, navigation=false))]
    fn open(
        path: PathBuf,
        cache_nodes: Option<i128>,
        engine: &str,
        direct: bool,
        navigation: bool,
    ) -> PyResult<Self> {
        let engine = engine.parse().map_err(value_err)?;
        let cache_nodes = cache_nodes
            .map(|c| size(limits::CACHE_NODES, c))
            .transpose()?;
        let inner = Inner::open(
            &path,
            &OpenOptions {
                engine,
                direct,
                cache_nodes,
                navigation,
                ..Default::default()
            },
        )
        .map_err(to_py)?;
        Ok(Self { inner })
    }

    #[getter]
    fn count(&self) -> usize {
        self.inner.len()
    }

    #[getter]
    fn dim(&self) -> usize {
        self.inner.dim()
    }

    #[getter]
    fn metric(&self) -> &'static str {
        self.inner.header().metric.name()
    }

    #[getter]
    fn dram_bytes(&self) -> usize {
        self.inner.dram_bytes()
    }

    #[getter]
    fn cached_nodes(&self) -> usize {
        self.inner.cached_nodes()
    }

    #[getter]
    fn engine(&self) -> PyResult<String> {
        Ok(self.inner.engine_kind().map_err(to_py)?.to_string())
    }

    #[getter]
    fn direct_io(&self) -> bool {
        self.inner.direct_io()
    }

    #[getter]
    fn navigates_in_dram(&self) -> bool {
        self.inner.navigates_in_dram()
    }

    /// Searches one query; returns (ids [k], distances [k], reads), padded like batches.
    #[pyo3(signature = (query, k, search_list, beam_width, rerank_sigmas, exact_distances))]
    #[allow(clippy::too_many_arguments)]
    fn search<'py>(
        &self,
        py: Python<'py>,
        query: PyReadonlyArray1<f32>,
        k: i128,
        search_list: i128,
        beam_width: i128,
        rerank_sigmas: f32,
        exact_distances: bool,
    ) -> PyResult<Single<'py>> {
        let q = query
            .as_slice()
            .map_err(|_| value_err("query must be contiguous"))?;
        let params = search_params(
            (k, search_list, beam_width, 1),
            rerank_sigmas,
            exact_distances,
        )?;
        let r = py.detach(|| self.inner.search(q, &params)).map_err(to_py)?;
        let (mut ids, mut distances) = (r.ids, r.distances);
        ids.resize(params.k, -1);
        distances.resize(params.k, f32::INFINITY);
        Ok((ids.into_pyarray(py), distances.into_pyarray(py), r.reads))
    }

    /// Searches every row; returns (ids [n, k], distances [n, k], mean reads per query).
    #[pyo3(signature = (queries, k, search_list, beam_width, threads, queries_per_thread,
        rerank_sigmas, exact_distances))]
    #[allow(clippy::too_many_arguments)]
    fn search_batch<'py>(
        &self,
        py: Python<'py>,
        queries: PyReadonlyArray2<f32>,
        k: i128,
        search_list: i128,
        beam_width: i128,
        threads: i128,
        queries_per_thread: i128,
        rerank_sigmas: f32,
        exact_distances: bool,
    ) -> PyResult<(Batch<'py>, f64)> {
        let params = search_params(
            (k, search_list, beam_width, queries_per_thread),
            rerank_sigmas,
            exact_distances,
        )?;
        let threads = size(limits::THREADS, threads)?;
        let k = params.k;
        let dim = queries.shape()[1];
        let data = contiguous(&queries)?;
        if dim == 0 || data.is_empty() {
            return Err(value_err("queries must be a non-empty 2-D array"));
        }
        let (results, _) = py
            .detach(|| {
                self.inner
                    .search_batch(Rows::new(data, dim), &params, threads)
            })
            .map_err(to_py)?;
        let reads = results.iter().map(|r| r.reads as f64).sum::<f64>() / results.len() as f64;
        let rows: Vec<Vec<(i64, f32)>> = results
            .into_iter()
            .map(|r| r.ids.into_iter().zip(r.distances).collect())
            .collect();
        Ok((padded(py, &rows, k), reads))
    }
}

/// An in-memory HNSW index (the baseline).
#[pyclass(module = "diskvec._native", frozen)]
struct HnswIndex {
    inner: diskvec_index::hnsw::HnswIndex,
}

#[pymethods]
impl HnswIndex {
    #[new]
    #[pyo3(signature = (vectors, ids, metric, m, ef_construction, threads))]
    fn build(
        py: Python<'_>,
        vectors: PyReadonlyArray2<f32>,
        ids: PyReadonlyArray1<i64>,
        metric: &str,
        m: i128,
        ef_construction: i128,
        threads: Option<i128>,
    ) -> PyResult<Self> {
        let metric: Metric = metric.parse().map_err(value_err)?;
        let dim = vectors.shape()[1];
        let data = contiguous(&vectors)?;
        let ids = external_ids(&ids)?;
        let params = diskvec_index::hnsw::HnswParams {
            m: size(limits::HNSW_M, m)?,
            ef_construction: size(limits::EF_CONSTRUCTION, ef_construction)?,
            seed: 1,
        };
        let workers = pool(threads)?;
        let inner = py
            .detach(|| {
                workers.install(|| {
                    diskvec_index::hnsw::HnswIndex::build(
                        data,
                        dim.max(1),
                        ids,
                        metric,
                        params,
                        &NoProgress,
                    )
                })
            })
            .map_err(to_py)?;
        Ok(Self { inner })
    }

    #[getter]
    fn count(&self) -> usize {
        self.inner.len()
    }

    #[getter]
    fn dim(&self) -> usize {
        self.inner.dim()
    }

    #[getter]
    fn dram_bytes(&self) -> usize {
        self.inner.dram_bytes()
    }

    /// Searches every row; returns (ids [n, k], distances [n, k]), padded with -1 / inf.
    fn search_batch<'py>(
        &self,
        py: Python<'py>,
        queries: PyReadonlyArray2<f32>,
        k: i128,
        ef: i128,
        threads: i128,
    ) -> PyResult<Batch<'py>> {
        let k = size(limits::K, k)?;
        let ef = size(limits::EF, ef)?;
        let threads = size(limits::THREADS, threads)?;
        let dim = queries.shape()[1];
        let data = contiguous(&queries)?;
        if dim == 0 || data.is_empty() {
            return Err(value_err("queries must be a non-empty 2-D array"));
        }
        let (results, _) = py
            .detach(|| {
                self.inner
                    .search_batch(Rows::new(data, dim), k, ef, threads)
            })
            .map_err(to_py)?;
        let rows: Vec<Vec<(i64, f32)>> = results
            .into_iter()
            .map(|r| r.ids.into_iter().zip(r.distances).collect())
            .collect();
        Ok(padded(py, &rows, k))
    }
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(build_index, m)?)?;
    m.add_function(wrap_pyfunction!(flat_search, m)?)?;
    m.add_class::<DiskIndex>()?;
    m.add_class::<HnswIndex>()?;
    db::register(m)?;
    m.add("LAYOUT_VERSION", diskann::LAYOUT_VERSION)?;
    Ok(())
}
