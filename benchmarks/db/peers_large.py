#!/usr/bin/env python3
"""A peer (qdrant-edge-py or LanceDB) given the large set (e.g. the synthetic 10M x 768 one)
the way import_large.py gives it to diskvec: batches of 1,000 with the same small payload,
then indexed, then searched with the dataset's test queries at k = 100.

  .venvs/qdrant/bin/python peers_large.py --system qdrant-edge --phase load --dataset DIR --store DIR --out OUT.json
  .venvs/qdrant/bin/python peers_large.py --system qdrant-edge --phase index --dataset DIR --store DIR --out OUT.json
  .venvs/qdrant/bin/python peers_large.py --system qdrant-edge --phase search --dataset DIR --store DIR --out OUT.json

Phases run in separate processes so that each can sit in its own memory cgroup and be cut off
at a time limit by the caller (`timeout -s KILL`): the load writes a progress line to
OUT.progress every 30 s (phase, points, seconds, disk bytes), which is what a run stopped part
way leaves; `--phase report` turns it into the rate reached and a projection of the rest.

Systems, each with its vectors on disk in float16 where it offers that (the diskvec load
stores float16 too; float32 would not fit this machine's disk beside the dataset at 10M):
  qdrant-edge: EdgeShard, vectors on disk (mmap) as float16, HNSW m=16, ef_construct=100
               (Qdrant's defaults) with its graph on disk, payload on disk; indexed by
               optimize() (edge runs no optimizer of its own). Knob: hnsw_ef.
  lancedb:     one table; each batch one table.add(); then table.optimize() (compaction) and
               IVF_PQ (its default vector index: default partitions, dim/16 sub-vectors),
               cosine, vectors float16. Knob: nprobes, refine_factor 20.
Synthetic data: say so wherever the numbers go.
"""
import argparse
import json
import multiprocessing
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import dir_bytes, run_threads  # noqa: E402
from import_large import batches, cgroup_dir, payload, read_int  # noqa: E402


class QdrantEdge:
    knobs = [100, 200, 400]

    def __init__(self, store):
        import qdrant_edge as qe
        self.qe, self.store = qe, store

    def config(self):
        return {"datatype": "float16", "vectors_on_disk": True, "hnsw_on_disk": True, "hnsw_m": 16,
                "hnsw_ef_construct": 100, "full_scan_threshold_kb": 10000, "distance": "Cosine", "knob": "hnsw_ef"}

    def create(self, dim):
        qe = self.qe
        cfg = qe.EdgeConfig(
            vectors=qe.EdgeVectorParams(size=dim, distance=qe.Distance.Cosine, on_disk=True,
                                        datatype=qe.VectorStorageDatatype.Float16),
            hnsw_config=qe.HnswIndexConfig(m=16, ef_construct=100, full_scan_threshold=10000, on_disk=True))
        self.shard = self.qe.EdgeShard.create(str(self.store), cfg)

    def write(self, ids, vectors):
        qe = self.qe
        points = [qe.Point(int(i), v.tolist(), payload(i)) for i, v in zip(ids, vectors)]
        self.shard.update(qe.UpdateOperation.upsert_points(points))

    def index(self):
        self.shard.optimize()

    def open(self):
        self.shard = self.qe.EdgeShard.load(str(self.store))

    def count(self):
        return self.shard.info().points_count

    def searcher(self, k, knob):
        qe, shard = self.qe, self.shard
        params = qe.SearchParams(hnsw_ef=knob)

        def search(v):
            req = qe.QueryRequest(limit=k, query=qe.Query.Nearest(v.tolist()), params=params,
                                  with_payload=False, with_vector=False)
            return [p.id for p in shard.query(req)]
        return search

    def close(self):
        self.shard.close()


class LanceDB:
    knobs = [10, 20, 50, 100]

    def __init__(self, store):
        import lancedb
        import pyarrow as pa
        self.lancedb, self.pa, self.store = lancedb, pa, store

    def config(self):
        return {"datatype": "float16", "index": "IVF_PQ", "num_partitions": "default",
                "num_sub_vectors": "default", "refine_factor": 20, "distance": "cosine", "knob": "nprobes"}

    def create(self, dim):
        pa = self.pa
        self.dim = dim
        self.schema = pa.schema([pa.field("id", pa.int64()), pa.field("vector", pa.list_(pa.float16(), dim)),
                                 pa.field("n", pa.int64()), pa.field("bucket", pa.int64()),
                                 pa.field("tag", pa.string())])
        self.db = self.lancedb.connect(str(self.store))
        self.table = self.db.create_table("c", schema=self.schema)

    def write(self, ids, vectors):
        pa = self.pa
        flat = pa.array(vectors.astype(np.float16).reshape(-1))
        rows = [payload(i) for i in ids]
        self.table.add(pa.table({
            "id": pa.array(ids, pa.int64()), "vector": pa.FixedSizeListArray.from_arrays(flat, self.dim),
            "n": pa.array([r["n"] for r in rows], pa.int64()),
            "bucket": pa.array([r["bucket"] for r in rows], pa.int64()),
            "tag": pa.array([r["tag"] for r in rows], pa.string())}, schema=self.schema))

    def index(self):
        import warnings
        from datetime import timedelta
        from lancedb.index import IvfPq
        with warnings.catch_warnings():  # no other reader or writer here
            warnings.simplefilter("ignore")
            self.table.optimize(cleanup_older_than=timedelta(0))
        self.table.create_index("vector", config=IvfPq(distance_type="cosine"))

    def open(self):
        self.db = self.lancedb.connect(str(self.store))
        self.table = self.db.open_table("c")

    def count(self):
        return self.table.count_rows()

    def searcher(self, k, knob):
        table = self.table

        def search(v):
            q = table.search(v, vector_column_name="vector").distance_type("cosine").limit(k)
            return q.nprobes(knob).refine_factor(20).select(["id"]).to_arrow().column("id").to_pylist()
        return search

    def close(self):
        pass


SYSTEMS = {"qdrant-edge": QdrantEdge, "lancedb": LanceDB}


PHASES = ["create", "ingest", "index", "indexed"]


class Progress:
    """A line every `every` seconds: what a run cut off by its time limit leaves behind. Written
    by a process of its own: a peer's index call may hold Python's lock for its whole run
    (qdrant-edge's optimize() does), and a thread then writes nothing."""

    def __init__(self, path, store, every=30):
        ctx = multiprocessing.get_context("fork")
        self._phase, self._points, self._disk_peak = ctx.Value("i", 0), ctx.Value("q", 0), ctx.Value("q", 0)
        self.path, self.store, self.every, self.t0 = path, store, every, time.time()
        self._stop = ctx.Event()
        self._proc = ctx.Process(target=self._run, daemon=True)

    phase = property(lambda self: PHASES[self._phase.value],
                     lambda self, name: setattr(self._phase, "value", PHASES.index(name)))
    points = property(lambda self: self._points.value,
                      lambda self, n: setattr(self._points, "value", n))
    disk_peak = property(lambda self: self._disk_peak.value)

    def line(self):
        disk = dir_bytes(self.store)
        self._disk_peak.value = max(self._disk_peak.value, disk)
        cg = cgroup_dir()
        with open(self.path, "a") as f:
            f.write(json.dumps({"t": round(time.time() - self.t0, 1), "phase": self.phase,
                                "points": self.points, "disk_bytes": disk,
                                "cgroup_max_usage": read_int(cg / "memory.max_usage_in_bytes") if cg else None})
                    + "\n")

    def _run(self):
        while not self._stop.wait(self.every):
            self.line()

    def start(self):
        self._proc.start()

    def finish(self):
        self._stop.set()
        self._proc.join(10)


def cgroup_figures():
    """The memory cgroup this process runs in: its limit and the most it used (page cache counts)."""
    cg = cgroup_dir()
    return {"cgroup_limit": read_int(cg / "memory.limit_in_bytes") if cg else None,
            "cgroup_max_usage": read_int(cg / "memory.max_usage_in_bytes") if cg else None}


def indexed_figures(system, progress, store):
    """After an index build: the last progress line, the points the system counts, its memory
    and disk; closes the system and stops the progress lines."""
    progress.phase = "indexed"
    progress.line()
    points = system.count()
    system.close()
    progress.finish()
    return {"points_counted": points, **cgroup_figures(),
            "disk_peak_bytes": progress.disk_peak, "disk_at_rest_bytes": dir_bytes(store)}


def load(system, args):
    meta = json.loads((Path(args.dataset) / "synthetic.json").read_text())
    progress = Progress(args.out + ".progress", args.store)
    progress.start()
    start = time.time()
    lat = []
    for ids, vectors in batches(args.dataset, args.limit):
        if progress.phase == "create":
            system.create(vectors.shape[1])
            progress.phase = "ingest"
        t = time.perf_counter()
        system.write(ids, vectors)
        lat.append(time.perf_counter() - t)
        progress.points += len(ids)
    ingest = time.time() - start
    progress.phase = "index"
    progress.line()
    system.index()
    indexed = time.time() - start
    lat_ms = np.array(lat) * 1000
    return {"points": progress.points, "synthetic": bool(meta),
            "ingest_seconds": round(ingest, 1), "index_seconds": round(indexed - ingest, 1),
            "load_duration_seconds": round(indexed, 1),
            "write_ms": {"p50": round(float(np.percentile(lat_ms, 50)), 1),
                         "p99": round(float(np.percentile(lat_ms, 99)), 1), "max": round(float(lat_ms.max()), 1)},
            **indexed_figures(system, progress, args.store)}


def index_again(system, args):
    """The index phase alone, on a store whose load stopped before or during it (qdrant-edge
    refused its first optimize for disk space while the ingest's log still held it)."""
    progress = Progress(args.out + ".progress", args.store)
    progress.phase = "index"
    progress.start()
    start = time.time()
    system.open()
    progress.points = system.count()
    progress.line()
    system.index()
    took = time.time() - start
    return {"index_seconds": round(took, 1), **indexed_figures(system, progress, args.store)}


def search(system, args):
    test = pq.read_table(Path(args.dataset) / "test.parquet")
    queries = np.stack([np.asarray(v, dtype=np.float32) for v in test.column("emb").to_pylist()])
    truth = [set(t[:args.k]) for t in pq.read_table(Path(args.dataset) / "neighbors.parquet")
             .column("neighbors_id").to_pylist()]
    system.open()
    rows = []
    for knob in [int(x) for x in args.knobs.split(",")] if args.knobs else system.knobs:
        run = system.searcher(args.k, knob)
        for clients in [int(c) for c in args.clients.split(",")]:
            lat, recall, stop = [], [], time.time() + args.seconds
            lock = threading.Lock()

            def client(seed):
                rng = np.random.default_rng(seed)
                while time.time() < stop:
                    q = int(rng.integers(len(queries)))
                    t = time.perf_counter()
                    ids = run(queries[q])
                    took = time.perf_counter() - t
                    with lock:
                        lat.append(took)
                        recall.append(len(truth[q].intersection(ids)) / args.k)
            t0 = time.time()
            run_threads(client, clients)
            row = {"knob": knob, "clients": clients, "k": args.k, "searches": len(lat),
                   "qps": round(len(lat) / (time.time() - t0), 1),
                   "p50_ms": round(float(np.percentile(lat, 50)) * 1000, 2),
                   "p99_ms": round(float(np.percentile(lat, 99)) * 1000, 2),
                   "recall": round(float(np.mean(recall)), 4)}
            print(json.dumps(row), flush=True)
            rows.append(row)
    system.close()
    return {"rows": rows, **cgroup_figures()}


def report(args):
    """What a load cut off part way reached, from its progress lines."""
    lines = [json.loads(x) for x in Path(args.out + ".progress").read_text().splitlines() if x]
    meta = json.loads((Path(args.dataset) / "synthetic.json").read_text())
    n = args.limit or meta["n"]
    last = lines[-1]
    ingest = [x for x in lines if x["phase"] == "ingest"]
    out = {"stopped_at_seconds": last["t"], "phase": last["phase"], "points": last["points"], "of": n,
           "disk_peak_bytes": max(x["disk_bytes"] for x in lines),
           "cgroup_max_usage": max((x["cgroup_max_usage"] or 0) for x in lines)}
    if last["phase"] == "ingest" and len(ingest) >= 2:
        rate = (ingest[-1]["points"] - ingest[0]["points"]) / (ingest[-1]["t"] - ingest[0]["t"])
        out["ingest_points_per_second"] = round(rate, 1)
        out["ingest_rest_projected_seconds"] = round((n - last["points"]) / rate, 1) if rate else None
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--system", choices=sorted(SYSTEMS), required=True)
    ap.add_argument("--phase", choices=["load", "index", "search", "report"], required=True)
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--store", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--limit", type=int)
    ap.add_argument("--k", type=int, default=100)
    ap.add_argument("--knobs", default="", help="comma-separated (default: the system's)")
    ap.add_argument("--clients", default="1,4")
    ap.add_argument("--seconds", type=float, default=30, help="per knob and client count")
    args = ap.parse_args()
    if args.phase == "report":
        out = report(args)
    else:
        system = SYSTEMS[args.system](Path(args.store))
        phases = {"load": load, "index": index_again, "search": search}
        out = phases[args.phase](system, args)
        out["config"] = system.config()
    out.update({"system": args.system, "phase": args.phase, "dataset": args.dataset})
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
