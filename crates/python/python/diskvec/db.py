"""The database: collections of points (id, vector, JSON payload) that take writes while they
serve searches, with a write-ahead log, payload filters and payload indexes.

    db = diskvec.open("data/")
    col = db.create_collection("docs", dim=384, metric="cosine")
    col.upsert([1, 2], vectors, payloads=[{"lang": "en"}, {"lang": "fr"}])
    hits = col.search(query, k=10, filter={"must": [{"key": "lang", "match": {"value": "en"}}]})

Point ids are non-negative ints (below 2**64) or UUID strings; they come back as ints or as
canonical lowercase hyphenated UUID strings. Payloads are dicts of JSON values (None, bool,
int, finite float, str, list, dict with str keys; numpy scalars and arrays are taken as their
`tolist()`). Filters are dicts in Qdrant's filter JSON shape.

Errors: bad input (wrong dimension, NaN, a bad id, payload or filter, a size out of range,
a collection that already exists, a closed database) raises ValueError; an unknown collection
or point raises KeyError; what the disk did (missing or damaged files, another process holding
the directory) raises OSError.
"""
from __future__ import annotations

import operator
import os
from collections.abc import Iterable
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import _native

# Not `open`: `from diskvec import *` would shadow the builtin.
__all__ = ["Database", "Collection"]

PointId = Union[int, str]
Filter = Dict[str, Any]

_BIG = 2**63


def _int(name: str, value) -> int:
    """An integer argument; range checks are the database's, with its messages."""
    if isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    try:
        v = operator.index(value)
    except TypeError:
        raise ValueError(f"{name} must be an integer, got {value!r}") from None
    if not -_BIG <= v < _BIG:
        raise ValueError(f"{name} is out of range, got {v}")
    return v


def _opt_int(name: str, value) -> Optional[int]:
    return None if value is None else _int(name, value)


def _ids(ids, name: str = "ids") -> list:
    """A list of ids from a list, tuple or 1-D array. A lone id is refused rather than taken
    as a one-id list, since a UUID string is itself iterable."""
    if isinstance(ids, np.ndarray):
        if ids.ndim != 1:
            raise ValueError(f"{name} must be a 1-D array, got shape {ids.shape}")
        if ids.dtype.kind == "b":
            raise ValueError(f"{name} must be integers or UUID strings, got a bool array")
        if ids.dtype.kind == "f":
            raise ValueError(f"{name} must be integers or UUID strings, got a float array")
        return ids.tolist()
    if isinstance(ids, (str, bytes, int, np.integer)) or not isinstance(ids, Iterable):
        raise ValueError(f"{name} must be a list of ids, got {type(ids).__name__}")
    return list(ids)


def _path(p) -> str:
    # Settings are kept in the collection's manifest: a relative path would mean another
    # place when the database is opened from another directory.
    return os.path.abspath(os.fspath(p))


def _opt_budget(name: str, value, zero: bool = False) -> Optional[str]:
    """A memory budget as the native layer parses it: text, or a whole number of bytes
    (0 too where `zero`: a search memory of 0 holds nothing)."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be bytes (an int) or text like \"768MiB\" or \"25%\", got {value!r}")
    if value < 0 or (value == 0 and not zero):
        raise ValueError(f"{name} must be at least {0 if zero else 'one'} byte{'s' if zero else ''}, got {value}")
    return str(int(value))


def _named_rows(vectors: dict, n: int) -> List[dict]:
    """Per-space columns ({name: one entry per point}) as one dict per point of the vectors
    it has (None entries left out)."""
    rows: List[dict] = [{} for _ in range(n)]
    for name, column in vectors.items():
        if isinstance(column, np.ndarray) and column.ndim == 2:
            column = np.ascontiguousarray(column, dtype=np.float32)
        elif isinstance(column, (str, bytes, dict)) or not hasattr(column, "__len__"):
            raise ValueError(f"vectors[{name!r}] must hold one entry per point")
        if len(column) != n:
            raise ValueError(f"{n} ids but {len(column)} entries in vectors[{name!r}]")
        for row, v in zip(rows, column):
            if v is None:
                continue
            if isinstance(v, dict):
                row[str(name)] = v
            else:
                row[str(name)] = np.asarray(v, dtype=np.float32).tolist()  # a row, or rows
    return rows


class Database:
    """An open database directory. Use `diskvec.open(path)`.

    Only one Database may have a directory open at a time (also within one process): close it
    (or use it as a context manager) before opening the directory again. Collection handles
    stop working once their database is closed.
    """

    def __init__(self, path: Union[str, os.PathLike], build_memory: Optional[str] = None,
                 search_memory: Optional[str] = None, pq_codes: Optional[str] = None):
        if pq_codes is not None and not isinstance(pq_codes, str):
            raise TypeError(f"pq_codes must be 'auto', 'full' or 'compact', not {pq_codes!r}")
        self._inner = _native.Database(os.fspath(path), _opt_budget("build_memory", build_memory),
                                       _opt_budget("search_memory", search_memory, zero=True),
                                       pq_codes)

    @property
    def path(self) -> str:
        """The database directory."""
        return self._inner.path

    @property
    def closed(self) -> bool:
        """Whether `close()` was called."""
        return self._inner.closed

    def create_collection(self, name: str, *, dim: Optional[int] = None, metric: str = "cosine",
                          vectors: Optional[Dict[str, dict]] = None,
                          sparse_vectors: Optional[Dict[str, dict]] = None,
                          paths: Optional[Sequence[Union[str, os.PathLike]]] = None,
                          wal_path: Union[str, os.PathLike, None] = None, durability: str = "sync",
                          interval_ms: Optional[int] = None, seal_threshold: Optional[int] = None,
                          vacuum_threshold: Optional[float] = None, max_degree: Optional[int] = None,
                          build_list: Optional[int] = None, pq_bytes: Optional[int] = None,
                          search_list: Optional[int] = None,
                          max_payload_bytes: Optional[int] = None, on_disk: bool = True,
                          idle_merge_ms: Optional[int] = None, navigation: bool = True,
                          build_memory: Union[str, int, None] = None,
                          search_memory: Union[str, int, None] = None,
                          on_disk_payload: bool = False, datatype: str = "float32",
                          graph_builder: str = "auto") -> "Collection":
        """Creates the collection `name` and returns it; ValueError if it already exists.

        - name: 1 to 255 letters, digits, '_', '-' or '.', not starting with '.'.
        - dim: vector dimension (1 to 65536); metric: "cosine", "l2" or "ip": one unnamed
          vector per point. Or, instead, named spaces:
          vectors={"text": {"dim": 384, "metric": "cosine"}, "image": {"dim": 512}} (dense;
          metric defaults to `metric`; "multivector": True makes a space of several vectors per
          point, scored by MaxSim) and/or sparse_vectors={"words": {"modifier": "idf"}}
          (modifier "none" by default; "on_disk": True keeps sealed segments' posting lists
          on SSD, only the term dictionary in DRAM). A point may have a vector in any of them.
        - paths: directories (e.g. NVMe namespaces) that sealed segments' nodes are striped
          over; default: inside the database directory. wal_path: where the write-ahead log
          lives; default: inside the database directory. Relative paths are made absolute.
        - durability: "sync" (a write returns once its log record is on stable storage) or
          "interval" (a background flush every `interval_ms`, default 200: a crash may lose the
          last interval's writes).
        - seal_threshold (default 20000): points kept in memory before they are sealed into an
          on-disk DiskANN segment. vacuum_threshold (default 0.2): share of deleted points at
          which a sealed segment is rebuilt.
        - max_degree (64), build_list (100), pq_bytes (None: chosen from dim): DiskANN build
          parameters of sealed segments; search_list (100): default search list of searches.
        - max_payload_bytes (1 MiB): largest payload of one point, as JSON.
        - on_disk (True): False keeps every node of the sealed segments (vector and links) in
          DRAM as well, so searches read nothing from the SSD, whatever `search_memory`; True
          keeps as many as the search memory pays for.
        - idle_merge_ms (2000): after this long without a write, the segments are merged into
          one when the smaller ones hold at least a tenth of the largest; 0 never does.
        - navigation (True): sealed segments keep every neighbour list and a 4-bit code per
          point in DRAM (about a quarter of the raw vectors) and walk their graphs there,
          reading the SSD only to re-rank; False keeps only PQ codes (a sixteenth) and reads
          every node the walk expands: the choice for a tight memory budget.
        - build_memory (None: the database's): memory each seal, vacuum and merge of this
          collection may use, as bytes (an int, or "768MiB", "2GiB") or a share of the build's
          raw vectors ("25%"); within the database's build memory (`open(path,
          build_memory=...)`), which the builds of all collections share. A build that does not
          fit runs in shards; a budget too small for a seal of `seal_threshold` points is
          refused here (ValueError naming the smallest that works).
        - search_memory (None: a share of the database's): DRAM the sealed segments' searches
          may hold beyond their compressed vectors, as bytes (an int, or "512MiB", 0 for
          nothing) or a share of the sealed points' raw vectors ("25%"): navigation data first,
          then node records, the nodes next to the entry point first; at every node held a
          search reads nothing from the SSD. `info()["search_memory"]` shows what it holds,
          reads per search and the cache hit rate.
        - on_disk_payload (False): sealed segments leave their payloads on SSD (12 bytes of
          DRAM a point) and read one when a filter no payload index answers, an order_by or
          an answer needs it; payload indexes stay in DRAM. A change applies to segments
          sealed or opened afterwards.
        - datatype ("float32"): how the vectors are stored, "float16" (half the bytes on SSD)
          or "uint8" (whole numbers 0-255; not with cosine); a named space may set its own
          ("datatype" in its dict). Values are rounded once, where they enter; a float16
          value beyond 65504 or a uint8 value that is not a whole number 0-255 is refused
          (ValueError naming the point), where Qdrant's REST API would clip it.
        - graph_builder ("auto"): the algorithm that builds sealed segments' graphs, "vamana"
          or "pipnn"; "auto" takes PiPNN for builds of 10,000 points or more (several times
          faster at equal recall on the sets measured), Vamana below.
        """
        dense_spaces = None if vectors is None else [
            (str(n), _int(f"vectors[{n!r}]['dim']", (v or {}).get("dim")), str((v or {}).get("metric", metric)),
             bool((v or {}).get("multivector", False)), str((v or {}).get("datatype", datatype)))
            for n, v in vectors.items()]
        sparse_spaces = None if sparse_vectors is None else [
            (str(n), str((v or {}).get("modifier", "none")), bool((v or {}).get("on_disk", False)))
            for n, v in sparse_vectors.items()]
        native = self._inner.create_collection(
            name, _opt_int("dim", dim), metric, [_path(p) for p in (paths or [])],
            None if wal_path is None else _path(wal_path), durability, _opt_int("interval_ms", interval_ms),
            _opt_int("seal_threshold", seal_threshold),
            None if vacuum_threshold is None else float(vacuum_threshold), _opt_int("max_degree", max_degree),
            _opt_int("build_list", build_list), _opt_int("pq_bytes", pq_bytes), _opt_int("search_list", search_list),
            _opt_int("max_payload_bytes", max_payload_bytes), bool(on_disk),
            _opt_int("idle_merge_ms", idle_merge_ms), bool(navigation),
            _opt_budget("build_memory", build_memory),
            _opt_budget("search_memory", search_memory, zero=True), dense_spaces, sparse_spaces,
            bool(on_disk_payload), str(datatype), str(graph_builder))
        return Collection(native)

    def collection(self, name: str) -> "Collection":
        """The collection `name`; KeyError if there is none."""
        return Collection(self._inner.collection(name))

    def collections(self) -> List[str]:
        """Names of the collections, sorted."""
        return self._inner.collection_names()

    def drop_collection(self, name: str) -> None:
        """Deletes the collection `name` and its files; KeyError if there is none. Waits for
        calls in flight on this database; handles to the collection then raise KeyError."""
        self._inner.drop_collection(name)

    def create_snapshot(self, name: str) -> dict:
        """Snapshots collection `name` into the database's `snapshots/` directory: one tar
        file holding the collection as of one operation, restorable on another database with
        `restore_snapshot`. Returns {"name", "path", "size", "checksum" (SHA-256, hex)}."""
        file, path, size, checksum = self._inner.create_snapshot(name)
        return {"name": file, "path": path, "size": size, "checksum": checksum}

    def list_snapshots(self, name: str) -> list:
        """The snapshots of collection `name`, oldest first: [{"name", "size", "checksum"}]."""
        return [{"name": n, "size": s, "checksum": c}
                for n, s, c in self._inner.list_snapshots(name)]

    def delete_snapshot(self, name: str, snapshot: str) -> None:
        """Removes snapshot file `snapshot` of collection `name`; KeyError if there is none."""
        self._inner.delete_snapshot(name, snapshot)

    def restore_snapshot(self, name: str, path: Union[str, os.PathLike],
                         checksum: Optional[str] = None) -> "Collection":
        """Restores the snapshot file at `path` as collection `name`, replacing a collection
        of that name; with `checksum`, the file's SHA-256 must match it (ValueError if not).
        Returns the restored collection."""
        self._inner.restore_snapshot(name, os.fspath(path), checksum)
        return self.collection(name)

    def close(self) -> None:
        """Stops background work, makes every logged write durable and releases the directory.
        Waits for calls in flight; later calls raise ValueError. Closing twice is harmless."""
        self._inner.close()

    def __contains__(self, name: str) -> bool:
        return name in self.collections()

    def __enter__(self) -> "Database":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"collections={self.collections()}"
        return f"Database({self.path!r}, {state})"


def open(path: Union[str, os.PathLike], *,  # noqa: A001 (the issue's name)
         build_memory: Union[str, int, None] = None,
         search_memory: Union[str, int, None] = None,
         pq_codes: Optional[str] = None) -> Database:
    """Opens the database in directory `path`, creating it if needed and recovering every
    collection from its log. OSError if another Database (in this or another process) has it
    open, or its files are damaged. Also a context manager: `with diskvec.open(p) as db:`.

    build_memory: memory the background builds (seals, vacuums, merges) of all collections
    may use together, as bytes (an int, or "4GiB") or "auto" (default: half of the memory
    available when a build starts, within the memory cgroup's limit if any).

    search_memory: DRAM the searches of all collections may hold beyond their compressed
    vectors (navigation data, then node records), as bytes (an int, "4GiB", 0) or "auto"
    (default: three quarters of the memory available, counting what they hold already; they give
    back what the builds reserve beyond the rest). Collections
    without a `search_memory` of their own split it, the same share of each one's nodes;
    it is shared out again whenever segments are sealed, merged or dropped.

    pq_codes: the PQ codes sealed segments steer their searches by: "auto" (default: the full
    codes where opening leaves 128 MiB of the memory available, else the compact ones, a
    quarter of the bytes), "full" or "compact"."""
    return Database(path, build_memory=build_memory, search_memory=search_memory,
                    pq_codes=pq_codes)


class Collection:
    """A collection of points: an id, a vector of the collection's dimension, a JSON payload.

    Writes are visible to searches as soon as they return (and durable per the collection's
    durability setting). Every call releases the GIL, so threads can search while others write.
    Results are dicts {"id", "version", "payload" (when with_payload), "vector" (numpy float32,
    when with_vectors; as stored: unit length in cosine collections)}; search results also
    carry "score" and "distance".
    """

    def __init__(self, native):
        self._inner = native

    @property
    def name(self) -> str:
        return self._inner.name

    def upsert(self, ids, vectors, payloads: Optional[Sequence[Optional[dict]]] = None) -> int:
        """Inserts or replaces points; returns the operation number (the points' version).

        ids: a list or 1-D array of non-negative ints and/or UUID strings. vectors: array-like
        of shape (len(ids), dim), converted to float32 (the unnamed space); or, for named
        spaces, a dict of space name to one entry per point: a 2-D array for a dense space, or
        a list whose items are a vector, a sparse vector {"indices": [...], "values": [...]},
        or None (the point has no vector in that space). payloads: None, or one dict (or None)
        per point. An id given twice keeps its last vector and payload. Nothing is written when
        any point is refused (ValueError naming it). Very large batches (over 32 MiB or 100,000
        points) are written as several operations; the last one's number is returned.
        """
        ids = _ids(ids)
        if payloads is not None:
            if isinstance(payloads, dict):
                raise ValueError("payloads must be a list with one dict per point")
            payloads = list(payloads)
        if isinstance(vectors, dict):
            return self._inner.upsert_named(ids, _named_rows(vectors, len(ids)), payloads)
        v = np.ascontiguousarray(vectors, dtype=np.float32)
        if v.ndim != 2:
            if v.size == 0 and not ids:
                v = v.reshape(0, 0)
            else:
                raise ValueError(f"vectors must be a 2-D array (n, dim), got shape {v.shape}")
        return self._inner.upsert(ids, v, payloads)

    def update_vectors(self, ids, vectors: Dict[str, object]) -> int:
        """Sets the vectors given of existing points (named spaces, as in `upsert`'s dict
        form), keeping their other vectors and their payloads; KeyError (nothing written) if
        an id is not there. Returns the operation number."""
        ids = _ids(ids)
        if not isinstance(vectors, dict):
            raise ValueError("vectors must be a dict of space name to vectors")
        return self._inner.update_vectors(ids, _named_rows(vectors, len(ids)))

    def delete_vectors(self, ids, names: Sequence[str]) -> int:
        """Removes the vectors of `ids` in the spaces `names` (their other vectors and their
        payloads stay); ValueError for a space the collection does not have."""
        if isinstance(names, str):
            names = [names]
        return self._inner.delete_vectors(_ids(ids), [str(n) for n in names])

    def delete(self, ids=None, *, filter: Optional[Filter] = None) -> int:
        """Deletes points, by id or by filter (exactly one of the two).

        `delete(ids)` ignores unknown ids and returns the operation number;
        `delete(filter={...})` deletes every point matching the filter and returns how many.
        """
        if (ids is None) == (filter is None):
            raise ValueError("give either ids or filter to delete")
        if filter is not None:
            return self._inner.delete_where(filter)[1]
        return self._inner.delete(_ids(ids))

    def set_payload(self, ids, payload: dict) -> int:
        """Merges `payload` into the payloads of `ids` (keys it has replace existing ones);
        KeyError (nothing written) if an id is not there. Returns the operation number."""
        return self._inner.set_payload(_ids(ids), payload)

    def overwrite_payload(self, ids, payload: dict) -> int:
        """Replaces the payloads of `ids` with `payload`; KeyError if an id is not there."""
        return self._inner.overwrite_payload(_ids(ids), payload)

    def delete_payload(self, ids, keys: Sequence[str]) -> int:
        """Removes `keys` (top-level) from the payloads of `ids`; KeyError if an id is not there."""
        if isinstance(keys, str):
            keys = [keys]
        return self._inner.delete_payload(_ids(ids), list(keys))

    def clear_payload(self, ids) -> int:
        """Empties the payloads of `ids`; KeyError if an id is not there."""
        return self._inner.clear_payload(_ids(ids))

    def create_payload_index(self, field: str, kind: str = "keyword", options: Optional[dict] = None) -> None:
        """Indexes payload `field` ("keyword", "integer" or "text") so that filters on it read
        the index instead of every payload. Keyword and integer indexes change speed only,
        never results. A "text" index gives `match` `text`, `text_any` and `phrase` their
        token meaning (Qdrant's): `options` as Qdrant's field_schema, e.g. {"tokenizer":
        "word" | "whitespace" | "prefix", "lowercase": True, "min_token_len": 2,
        "max_token_len": 20, "stopwords": "english" or {"custom": [...]}, "phrase_matching":
        True}. Qdrant's other kinds ("float", "bool", "datetime", "uuid", "geo") are recorded
        in the schema; filters on those fields read the payloads for now."""
        self._inner.create_payload_index(field, kind, options)

    def delete_payload_index(self, field: str) -> None:
        """Drops the index of `field` (no error if there is none)."""
        self._inner.delete_payload_index(field)

    def payload_indexes(self) -> Dict[str, str]:
        """Indexed fields and their kinds."""
        return dict(self._inner.payload_indexes())

    def get(self, ids, with_vectors: bool = False, with_payload: bool = True) -> List[dict]:
        """Points by id, in the order asked; unknown ids are left out."""
        return self._inner.get(_ids(ids), bool(with_payload), bool(with_vectors))

    def search(self, query, k: int = 10, filter: Optional[Filter] = None, search_list: Optional[int] = None,
               offset: int = 0, with_payload: bool = True, with_vectors: bool = False,
               score_threshold: Optional[float] = None, using: str = "", exact: bool = False) -> List[dict]:
        """The `k` points closest to `query` (1-D, the collection's dim), closest first.

        - filter: Qdrant filter dict; only matching points are returned.
        - search_list: the graph search's list size (L) in sealed segments; bigger is more
          accurate and slower. Default: the collection's (100).
        - offset: results to skip first (pagination); offset + k is at most 10000.
        - score_threshold: only results scoring at least this (at most, for l2).
        - using: the vector space searched ("": the unnamed one). A sparse query
          {"indices": [...], "values": [...]} searches a sparse space: exact dot products
          (times each term's IDF where the space's modifier is "idf").
        - exact: compare the query with every matching point instead of searching the
          indexes (slower; never misses a point).
        Each hit is {"id", "version", "score", "distance", "payload"?, "vector"?,
        "vectors"?}: score is Qdrant's (cosine similarity, dot product, or Euclidean distance
        for l2); distance is diskvec's, smaller is closer (1 - cosine, -dot, squared
        Euclidean). "vector" is the unnamed space's, "vectors" the named ones'.
        """
        if isinstance(query, dict):
            return self._inner.search_sparse(query, _int("k", k), filter, _int("offset", offset),
                                             bool(with_payload), bool(with_vectors),
                                             None if score_threshold is None else float(score_threshold),
                                             str(using))
        q = np.ascontiguousarray(query, dtype=np.float32)
        if q.ndim != 1:
            raise ValueError(f"query must be a 1-D array, got shape {q.shape}")
        return self._inner.search(q, _int("k", k), filter, _opt_int("search_list", search_list),
                                  _int("offset", offset), bool(with_payload), bool(with_vectors),
                                  None if score_threshold is None else float(score_threshold), str(using),
                                  bool(exact))

    def create_space(self, name: str, *, dim: Optional[int] = None, metric: str = "cosine",
                     multivector: bool = False, sparse: bool = False, modifier: str = "none") -> None:
        """Adds a vector space to the collection: dense (`dim`, `metric`; `multivector`: several
        vectors per point, scored by MaxSim) or, with `sparse=True`, sparse (`modifier`: "none" or
        "idf"). Points have no vector in it until `upsert` or `update_vectors` gives them one."""
        if sparse:
            if dim is not None:
                raise ValueError("a sparse space has no dim")
            self._inner.create_space(str(name), None, str(metric), False, str(modifier))
        else:
            self._inner.create_space(str(name), _int("dim", dim), str(metric), bool(multivector), None)

    def delete_space(self, name: str) -> None:
        """Deletes the vector space `name` with every point's vector in it; the points keep their
        other vectors and payloads. A space made again under the name starts empty."""
        self._inner.delete_space(str(name))

    def query(self, request: dict, with_payload: bool = True, with_vectors: bool = False) -> List[dict]:
        """Qdrant's universal query: `request` is the body of Qdrant's `points/query`, e.g. a
        hybrid search fusing a dense and a sparse prefetch:

            col.query({"prefetch": [{"query": dense, "using": "text", "limit": 50},
                                    {"query": {"indices": [...], "values": [...]},
                                     "using": "words", "limit": 50}],
                       "query": {"fusion": "rrf"}, "limit": 10})

        It takes every form the server does: nested prefetches, fusion (rrf, dbsf), recommend,
        discover, context, order_by, sample, nearest by point id, mmr, filter, offset,
        score_threshold, params (hnsw_ef, exact, idf) and lookup_from another collection.
        Hits are as `search` returns them."""
        if not isinstance(request, dict):
            raise TypeError(f"request must be a dict (Qdrant's query body), got {type(request).__name__}")
        return self._inner.query(request, bool(with_payload), bool(with_vectors))

    def search_batch(self, queries, k: int = 10, filter: Optional[Filter] = None, search_list: Optional[int] = None,
                     offset: int = 0, with_payload: bool = True, with_vectors: bool = False,
                     score_threshold: Optional[float] = None, threads: Optional[int] = None,
                     using: str = "", exact: bool = False) -> List[List[dict]]:
        """`search` for every row of `queries` (n, dim); returns one list of hits per query.
        The rows are split over `threads` threads (default: one per core), and each thread
        queues the SSD searches of its rows on every sealed segment's search threads before
        waiting for any, so many queries' reads are in flight at once: a batch is the fast
        way to run many queries from one caller."""
        q = np.ascontiguousarray(queries, dtype=np.float32)
        if q.ndim != 2:
            raise ValueError(f"queries must be a 2-D array (n, dim), got shape {q.shape}")
        return self._inner.search_batch(q, _int("k", k), filter, _opt_int("search_list", search_list),
                                        _int("offset", offset), bool(with_payload), bool(with_vectors),
                                        None if score_threshold is None else float(score_threshold),
                                        _opt_int("threads", threads), str(using), bool(exact))

    def scroll(self, filter: Optional[Filter] = None, limit: int = 100, offset: Optional[PointId] = None,
               with_payload: bool = True, with_vectors: bool = False) -> Tuple[List[dict], Optional[PointId]]:
        """A page of points (matching `filter`, if given) in id order: ints ascending, then
        UUIDs. Starts at id `offset` (inclusive; None: the first). Returns (records, next_offset):
        pass next_offset as `offset` for the next page; it is None after the last page."""
        if isinstance(offset, np.integer):
            offset = int(offset)
        return self._inner.scroll(filter, _int("limit", limit), offset, bool(with_payload), bool(with_vectors))

    def count(self, filter: Optional[Filter] = None) -> int:
        """Number of points (matching `filter`, if given)."""
        return self._inner.count(filter)

    def optimize(self, wait: bool = True) -> None:
        """Seals every point written so far into on-disk DiskANN segments. With wait=True,
        returns once they are searched on disk (OSError if sealing failed)."""
        self._inner.optimize(bool(wait))

    def set_indexing(self, enabled: bool) -> None:
        """Turns indexing off for a bulk load (writes then go into one growing segment that
        is neither linked nor sealed; searches scan it) or back on (that segment is sealed
        if it is past the seal threshold). A reopened collection indexes."""
        self._inner.set_indexing(bool(enabled))

    def info(self) -> dict:
        """Status and sizes: name, status ("green", "yellow": sealing, "red": a background
        failure, see "error"), points, indexed_points (in sealed segments), segments (each
        with kind, points, dram_bytes, disk_bytes, payloads_on_ssd, graph_searches and
        node_reads since the segment opened (reads from the device, node cache hits not
        counted), cached_nodes (node records held in DRAM: small segments whole) and, when sealed, "navigation": "in DRAM" or why not),
        payload_indexes ({field: kind}), config, last_op, wal_bytes, seals_done, task (the
        seal, vacuum or merge running: kind, points, phase, done, total, seconds,
        memory_budget it was granted, estimated_peak of its plan, shards: 1 in memory,
        seeded: points of a merge that kept their sealed segment's graph lists; the
        seal when a merge runs beside it), tasks (every build running, alike), last_task (the last one that ended, alike) and indexing_paused.
        config["dense"] and config["sparse"] list the vector spaces ({"name", "dim", "metric"}
        and {"name", "modifier"}); a collection of one unnamed vector also has config["dim"]
        and config["metric"]."""
        info = self._inner.info()
        info["payload_indexes"] = dict(info["payload_indexes"])
        config = info["config"]
        durability = config["durability"]
        if isinstance(durability, dict):
            config["durability"], config["interval_ms"] = "interval", durability["interval"]["interval_ms"]
        # A deleted space keeps its slot in the manifest: not one of the collection's.
        for kind in ("dense", "sparse", "multi"):
            config[kind] = [s for s in config.get(kind, []) if not s.pop("removed", False)]
        # config["dense"] lists the dense spaces and config["sparse"] the sparse ones; a
        # collection of one unnamed vector also shows its dim and metric at the top.
        if len(config["dense"]) == 1 and config["dense"][0]["name"] == "" and not config["sparse"]:
            config["dim"], config["metric"] = config["dense"][0]["dim"], config["dense"][0]["metric"]
        return info

    def recovery(self) -> dict:
        """What opening this collection found: sealed_segments, sealed_points, replayed_ops (log
        records replayed), checkpoint_op, last_op, torn_tail (a torn record cut from the log's
        end, or None), removed_segments (left by an interrupted seal), seconds."""
        return self._inner.recovery()

    def __len__(self) -> int:
        return self.count()

    def __repr__(self) -> str:
        return f"Collection({self.name!r})"
