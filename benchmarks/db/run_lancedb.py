#!/usr/bin/env python3
"""lancedb (embedded, on disk: Lance files) through the protocol in common.py.

Variants:
  hnsw_sq (default): IVF_HNSW_SQ with num_partitions=1 (its docs: "For HNSW, we recommend a small
           number of partitions. Setting this to 1 works well for most tables"), m=20,
           ef_construction=300 (its defaults), cosine. Knob: ef.
  ivf_pq:  IVF_PQ, lancedb's default vector index, default partitions and sub-vectors (dim/16),
           cosine, refine_factor=20 (re-rank with the full vectors). Knob: nprobes.
Scalar indexes: BITMAP on pos and lexname (low cardinality), BTREE on chars. Each batch is one
table.add() (one Lance commit). Fully indexed = compaction (table.optimize(): the 500 small
fragments merged) + the scalar indexes + the vector index.
"""
import sys
import warnings
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import Driver, main  # noqa: E402

import lancedb  # noqa: E402
import pyarrow as pa  # noqa: E402


class LanceDB(Driver):
    name = "lancedb"
    default_variant = "hnsw_sq"
    durability = ("table.add() returns after the Lance commit: data file and manifest written through the "
                  "local object store (write to a temporary name, rename); no fsync per commit (strace: see "
                  "durability JSON), so an acknowledged batch survives a process crash but not a power loss")

    def __init__(self, args):
        super().__init__(args)
        if self.variant == "hnsw_sq":
            self.knobs = [32, 64, 128, 256]
            self.filter_knobs = [64, 128]
            self.mem_knob = 128
        else:
            self.knobs = [1, 2, 3, 6]  # of the default 6 partitions (target 8192 rows each) at 50k
            self.filter_knobs = [2, 6]
            self.mem_knob = 2

    def knobs_for(self, k):
        # HNSW refuses ef < k
        if self.variant == "hnsw_sq":
            return [128, 256, 512] if k == 100 else self.knobs
        return self.knobs

    def config(self):
        if self.variant == "hnsw_sq":
            c = {"index": "IVF_HNSW_SQ", "num_partitions": 1, "m": 20, "ef_construction": 300, "knob": "ef"}
        else:
            c = {"index": "IVF_PQ", "num_partitions": "default", "num_sub_vectors": "default (dim/16)",
                 "refine_factor": 20, "knob": "nprobes"}
        c.update({"distance": "cosine", "scalar_indexes": {"pos": "BITMAP", "lexname": "BITMAP", "chars": "BTREE"}})
        return c

    def versions(self):
        from importlib.metadata import version
        return {"lancedb": version("lancedb"), "pylance": version("pylance"), "pyarrow": version("pyarrow")}

    def create(self, dim):
        self.dim = dim
        self.db = lancedb.connect(str(self.path))
        self.schema = pa.schema([
            pa.field("id", pa.int64()), pa.field("vector", pa.list_(pa.float32(), dim)),
            pa.field("pos", pa.string()), pa.field("lexname", pa.string()), pa.field("synset", pa.int64()),
            pa.field("chars", pa.int32()), pa.field("text", pa.string())])
        self.table = self.db.create_table("c", schema=self.schema)

    def write_prep(self, lo, hi):
        c = self.cols
        flat = pa.array(self.train[lo:hi].reshape(-1))
        return pa.table({
            "id": pa.array(range(lo, hi), pa.int64()),
            "vector": pa.FixedSizeListArray.from_arrays(flat, self.dim),
            "pos": pa.array(c["pos"][lo:hi], pa.string()), "lexname": pa.array(c["lexname"][lo:hi], pa.string()),
            "synset": pa.array(c["synset"][lo:hi], pa.int64()), "chars": pa.array(c["chars"][lo:hi], pa.int32()),
            "text": pa.array(c["text"][lo:hi], pa.string())}, schema=self.schema)

    def write(self, t):
        self.table.add(t)

    def wait_indexed(self):
        import time
        from lancedb.index import BTree, Bitmap, HnswSq, IvfPq
        steps = {}
        t = time.perf_counter()
        with warnings.catch_warnings():  # no other reader or writer here
            warnings.simplefilter("ignore")
            self.table.optimize(cleanup_older_than=timedelta(0))
        steps["compact_s"] = round(time.perf_counter() - t, 2)
        t = time.perf_counter()
        self.table.create_index("pos", config=Bitmap())
        self.table.create_index("lexname", config=Bitmap())
        self.table.create_index("chars", config=BTree())
        steps["scalar_indexes_s"] = round(time.perf_counter() - t, 2)
        t = time.perf_counter()
        if self.variant == "hnsw_sq":
            cfg = HnswSq(distance_type="cosine", num_partitions=1)
        else:
            cfg = IvfPq(distance_type="cosine")
        self.table.create_index("vector", config=cfg)
        steps["vector_index_s"] = round(time.perf_counter() - t, 2)
        self.steps = steps

    def open(self):
        self.db = lancedb.connect(str(self.path))
        self.table = self.db.open_table("c")

    def info(self):
        out = {"rows": self.table.count_rows(), "version": self.table.version}
        try:
            out["indices"] = [{"name": i.name, "type": str(i.index_type), "columns": list(i.columns),
                                "indexed_rows": getattr(i, "num_indexed_rows", None),
                                "size_bytes": getattr(i, "size_bytes", None)} for i in self.table.list_indices()]
        except Exception as e:  # noqa: BLE001
            out["indices_error"] = repr(e)
        try:
            st = self.table.stats()
            out["fragments"] = st["fragment_stats"]["num_fragments"] if isinstance(st, dict) else str(st)
        except Exception as e:  # noqa: BLE001
            out["stats_error"] = repr(e)
        if getattr(self, "steps", None):
            out["index_steps"] = self.steps
        return out

    def close(self):
        self.table = None
        self.db = None

    def searcher(self, k, knob, filt=None):
        import common
        table = self.table
        where = None if filt is None else common.sql(filt)
        hnsw = self.variant == "hnsw_sq"

        def search(v):
            q = table.search(v, vector_column_name="vector").distance_type("cosine").limit(k).select(["id", "_distance"])
            if hnsw:
                q = q.ef(knob)
            else:
                q = q.nprobes(knob).refine_factor(20)
            if where is not None:
                q = q.where(where, prefilter=True)
            return q.to_arrow().column("id").to_pylist()
        return search


if __name__ == "__main__":
    main(LanceDB)
