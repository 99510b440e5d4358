"""diskvec: a disk-native vector database (DiskANN on NVMe), embedded in Python.

The database (collections of points with payloads, filters and a write-ahead log):

    db = diskvec.open("data/")
    col = db.create_collection("docs", dim=384, metric="cosine")
    col.upsert([1, 2, 3], vectors, payloads=[{"lang": "en"}, {"lang": "fr"}, None])
    hits = col.search(query, k=10, filter={"must": [{"key": "lang", "match": {"value": "en"}}]})

See `help(diskvec.Collection)`. The disk index alone, without the database:

    import numpy as np, diskvec
    diskvec.build_index(vectors, "my-index", metric="cosine")
    index = diskvec.DiskIndex("my-index")
    ids, distances = index.search(query, k=10)
    ids, distances = index.search_batch(queries, k=10, threads=2)

Vectors are float32 numpy arrays (other float dtypes are converted). Distances are
"smaller is closer": 1 - cosine for cosine, squared L2 for l2, -dot for ip.
Every search answers exactly k results per query, closest first; when fewer are found
(k above the number of vectors) the rest are id -1 and distance inf, so ids must be >= 0.
Bad input (including sizes out of range, e.g. k above 10000) raises ValueError; missing,
damaged or unsupported index files raise OSError.
"""
from __future__ import annotations

import os
from typing import Optional, Tuple

import numpy as np

from . import _native
from .db import Collection, Database, open

# `open` is left out: `from diskvec import *` would shadow the builtin. Use `diskvec.open`.
__all__ = ["build_index", "DiskIndex", "HnswIndex", "flat_search", "LAYOUT_VERSION", "Database", "Collection"]

LAYOUT_VERSION = _native.LAYOUT_VERSION


def _matrix(a, name: str) -> np.ndarray:
    a = np.ascontiguousarray(a, dtype=np.float32)
    if a.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array (n, dim), got shape {a.shape}")
    return a


def build_index(vectors, path: str | os.PathLike, *, metric: str = "cosine", ids=None, max_degree: int = 64,
                build_list: int = 100, alpha: float = 1.2, pq_bytes: Optional[int] = None,
                threads: Optional[int] = None, dtype: str = "float32") -> dict:
    """Builds a DISKANN index of `vectors` (n x dim) in the directory `path`.

    `ids` are non-negative int64 external ids (default 0..n-1). `dtype` is how the node
    records on SSD store the vectors: "float32", "float16" (half the bytes; values beyond
    65504 are refused) or "uint8" (whole numbers 0-255 only, not with cosine); the values are
    rounded once, after cosine's normalization. Returns a report of the build.
    """
    vectors = _matrix(vectors, "vectors")
    ids = np.arange(len(vectors), dtype=np.int64) if ids is None else np.ascontiguousarray(ids, dtype=np.int64)
    if ids.ndim != 1:
        raise ValueError("ids must be a 1-D array")
    return _native.build_index(vectors, os.fspath(path), ids, metric, max_degree, build_list, alpha, pq_bytes,
                               threads, dtype)


def flat_search(base, queries, k: int = 10, metric: str = "cosine") -> Tuple[np.ndarray, np.ndarray]:
    """Exact search: row numbers of `base` and distances, shape (len(queries), k); missing
    results (k above len(base)) are -1 / inf."""
    return _native.flat_search(_matrix(base, "base"), _matrix(queries, "queries"), k, metric)


class DiskIndex:
    """An index opened for search. Node reads use O_DIRECT and io_uring where available.

    `navigation=True` also loads the index's navigation file (every neighbour list and a
    4-bit code per vector, about a quarter of the raw vectors' size) and walks the graph in
    DRAM, reading the SSD only for the candidates the codes cannot decide; an index built
    before that file existed opens without it (see `navigates_in_dram`).

    `cache_nodes` is how many node records DRAM holds at most: entry nodes first for a graph
    search, then the records the searches read again (all of the file when it covers every
    node; default: the file's first 1%, numbered breadth-first from the medoid, plus the
    entry nodes for a graph search; a walk in DRAM needs no entry record)."""

    def __init__(self, path: str | os.PathLike, *, cache_nodes: Optional[int] = None, engine: str = "auto",
                 direct: bool = True, navigation: bool = False):
        self._inner = _native.DiskIndex(os.fspath(path), cache_nodes, engine, direct, navigation)
        self.last_reads = 0.0

    count = property(lambda self: self._inner.count, doc="number of vectors")
    dim = property(lambda self: self._inner.dim, doc="vector dimension")
    metric = property(lambda self: self._inner.metric)
    dram_bytes = property(lambda self: self._inner.dram_bytes, doc="bytes this index holds in DRAM")
    cached_nodes = property(lambda self: self._inner.cached_nodes)
    engine = property(lambda self: self._inner.engine, doc="'io_uring' or 'pread'")
    direct_io = property(lambda self: self._inner.direct_io)
    navigates_in_dram = property(lambda self: self._inner.navigates_in_dram,
                                 doc="whether searches walk the graph in DRAM (opened with navigation)")

    def __len__(self) -> int:
        return self.count

    def search(self, query, k: int = 10, *, search_list: int = 100, beam_width: int = 4,
               rerank_sigmas: float = 1.5, exact_distances: bool = True):
        """Nearest `k` of one query: (ids, distances) of length k, closest first; missing
        results (k above the count) are -1 / inf. With navigation, `rerank_sigmas` is how many
        standard deviations of a 4-bit estimate's error decide a candidate unread (inf reads
        every candidate), and `exact_distances=False` returns the estimates of candidates
        surely in the answer instead of reading them (same ids, fewer reads)."""
        q = np.ascontiguousarray(query, dtype=np.float32)
        if q.ndim != 1:
            raise ValueError(f"query must be a 1-D array, got shape {q.shape}")
        ids, dists, reads = self._inner.search(q, k, search_list, beam_width, float(rerank_sigmas),
                                               bool(exact_distances))
        self.last_reads = float(reads)
        return ids, dists

    def search_batch(self, queries, k: int = 10, *, search_list: int = 100, beam_width: int = 4, threads: int = 2,
                     queries_per_thread: int = 16, rerank_sigmas: float = 1.5, exact_distances: bool = True):
        """Nearest `k` of every row: (ids, distances) of shape (n, k); missing results are -1 / inf.
        `rerank_sigmas` and `exact_distances` as in `search`."""
        (ids, dists), reads = self._inner.search_batch(_matrix(queries, "queries"), k, search_list, beam_width,
                                                     threads, queries_per_thread, float(rerank_sigmas),
                                                     bool(exact_distances))
        self.last_reads = reads
        return ids, dists

    def __repr__(self) -> str:
        return f"DiskIndex(count={self.count}, dim={self.dim}, metric={self.metric!r})"


class HnswIndex:
    """An in-memory HNSW index: the baseline of the performance briefs (M=30, efConstruction=360, ef=100)."""

    def __init__(self, vectors, *, metric: str = "cosine", ids=None, m: int = 30, ef_construction: int = 360,
                 threads: Optional[int] = None):
        vectors = _matrix(vectors, "vectors")
        ids = np.arange(len(vectors), dtype=np.int64) if ids is None else np.ascontiguousarray(ids, dtype=np.int64)
        self._inner = _native.HnswIndex(vectors, ids, metric, m, ef_construction, threads)

    count = property(lambda self: self._inner.count)
    dim = property(lambda self: self._inner.dim)
    dram_bytes = property(lambda self: self._inner.dram_bytes)

    def __len__(self) -> int:
        return self.count

    def search(self, query, k: int = 10, *, ef: int = 100):
        """Nearest `k` of one query: (ids, distances) of length k, closest first; missing
        results (k above the count) are -1 / inf."""
        q = np.ascontiguousarray(query, dtype=np.float32)
        if q.ndim != 1:
            raise ValueError(f"query must be a 1-D array, got shape {q.shape}")
        ids, dists = self._inner.search_batch(q.reshape(1, -1), k, ef, 1)
        return ids[0], dists[0]

    def search_batch(self, queries, k: int = 10, *, ef: int = 100, threads: int = 2):
        """Nearest `k` of every row: (ids, distances) of shape (n, k); missing results are -1 / inf."""
        return self._inner.search_batch(_matrix(queries, "queries"), k, ef, threads)
