#!/usr/bin/env python3
"""Runs one peer (hnswlib, diskannpy or Milvus) through VectorDBBench's Performance case for
`diskvec bench`, and writes the same raw JSON a diskvec configuration writes (see
crates/bench/src/raw.rs): load times, every latency of every concurrency level, the answers
of the serial pass and of sweep points, memory and disk figures. `diskvec bench` computes
recall, NDCG and percentiles from it, so every configuration is measured the same way.

`diskvec bench` embeds this file and runs it with the configuration's Python (`python=` in the
configuration, else $DISKVEC_PEER_PYTHON, else python3); it is not meant to be run by hand.
"""
import argparse
import json
import os
import shutil
import sys
import threading
import time
from pathlib import Path


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def load(dataset, name, column="emb"):
    import numpy as np
    import pyarrow.parquet as pq

    t = pq.read_table(Path(dataset) / f"{name}.parquet")
    ids = t.column("id").to_numpy().astype(np.int64)
    col = t.column(column).combine_chunks()
    width = len(col[0])
    values = col.flatten().to_numpy(zero_copy_only=False)
    return ids, np.ascontiguousarray(values.astype(np.float32).reshape(-1, width))


def proc_number(path, label):
    """The number after `label` on its line of a /proc file, or None."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(label):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def status_kib(pid, field):
    return proc_number(f"/proc/{pid}/status", field)


def io_read_bytes(pid):
    return proc_number(f"/proc/{pid}/io", "read_bytes:")


def reset_peak(pid):
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


class Rapl:
    """Package energy counters, or None where the machine exposes none."""

    @staticmethod
    def open():
        root = Path("/sys/class/powercap")
        if not root.is_dir():
            return None
        doms = []
        for d in sorted(root.iterdir()):
            if "rapl:" in d.name and d.name.count(":") == 1 and (d / "energy_uj").exists():
                try:
                    rng = int((d / "max_energy_range_uj").read_text())
                except (OSError, ValueError):
                    rng = 2**64
                doms.append((d / "energy_uj", rng))
        if not doms:
            return None
        r = Rapl()
        r.doms = doms
        return r

    def read(self):
        return [int(p.read_text()) for p, _ in self.doms]

    def joules(self, before, after):
        return sum((a - b) if a >= b else (rng - b + a) for (_, rng), b, a in zip(self.doms, before, after)) / 1e6


class Peer:
    """A peer: load() builds until searchable; client(knob) returns a search function for one thread."""

    serving_pids = [os.getpid()]
    notes = []

    def index_dram_bytes(self):
        return None

    def disk_bytes(self):
        return 0


class Hnswlib(Peer):
    def __init__(self, a, opts):
        self.a, self.m = a, int(opts.get("m", 30))
        self.efc = int(opts.get("ef_construction", 360))

    def load(self, ids, data):
        import hnswlib

        space = {"cosine": "cosine", "ip": "ip", "l2": "l2"}[self.a.metric]
        self.index = hnswlib.Index(space=space, dim=data.shape[1])
        self.index.init_index(max_elements=len(data), M=self.m, ef_construction=self.efc, random_seed=1)
        self.index.add_items(data, ids, num_threads=self.a.threads)

    def index_dram_bytes(self):
        n = self.index.get_current_count()
        # hnswlib's level-0 block per node: vector, 2M links + count, label; upper levels are ~1/M of it.
        return n * (self.index.dim * 4 + (2 * self.m + 1) * 4 + 8)

    def client(self, ef):
        self.index.set_ef(ef)
        k = self.a.k

        def search(q):
            labels, _ = self.index.knn_query(q, k=k, num_threads=1)
            return labels[0].tolist(), None

        return search


class Diskannpy(Peer):
    def __init__(self, a, opts):
        self.a = a
        self.r = int(opts.get("r", 64))
        self.l_build = int(opts.get("l_build", 100))
        self.pq_bytes = opts.get("pq_bytes")
        self.beam = int(opts.get("beam_width", 4))
        self.cache = opts.get("cache_nodes")
        self.dir = Path(a.workdir) / "diskannpy-index"

    def load(self, ids, data):
        import diskannpy as dap
        import numpy as np

        self.ids = ids
        if self.a.metric == "cosine":
            # diskannpy's disk index refuses cosine; on unit vectors L2 ranks the same.
            data = data / np.linalg.norm(data, axis=1, keepdims=True)
            self.notes.append("cosine run as L2 on normalized vectors (diskannpy's disk index has no cosine)")
        metric = "l2" if self.a.metric == "cosine" else self.a.metric
        self.metric = metric
        n, dim = data.shape
        pq = int(self.pq_bytes) if self.pq_bytes else max(1, dim // 4)
        # DiskANN sizes PQ codes as floor(search_memory_maximum / n) bytes.
        budget_gb = (pq + 0.5) * n / 2**30
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(parents=True)
        dap.build_disk_index(data=data, distance_metric=metric, index_directory=str(self.dir),
                             complexity=self.l_build, graph_degree=self.r, search_memory_maximum=budget_gb,
                             build_memory_maximum=8.0, num_threads=self.a.threads, index_prefix="ann")
        cache = int(self.cache) if self.cache else n // 100
        self.index = dap.StaticDiskIndex(index_directory=str(self.dir), num_threads=self.a.threads,
                                         num_nodes_to_cache=cache, distance_metric=metric,
                                         vector_dtype=np.float32, dimensions=dim, index_prefix="ann")
        self.n, self.pq = n, pq

    def index_dram_bytes(self):
        return None

    def disk_bytes(self):
        return sum(f.stat().st_size for f in self.dir.iterdir())

    def client(self, search_list):
        k, beam = self.a.k, self.beam

        def search(q):
            res = self.index.search(q, k_neighbors=k, complexity=max(search_list, k), beam_width=beam)
            # diskannpy returns row numbers; map them to the dataset's ids.
            return [int(self.ids[i]) for i in res.identifiers], None

        return search


class Milvus(Peer):
    def __init__(self, a, opts):
        self.a = a
        self.kind = opts.get("index", "hnsw")
        self.m = int(opts.get("m", 30))
        self.efc = int(opts.get("ef_construction", 360))
        self.base = Path(a.workdir) / "milvus-data"
        self.timeout = float(opts.get("build_timeout", a.build_timeout))

    def load(self, ids, data):
        from milvus import default_server
        from pymilvus import Collection, CollectionSchema, DataType, FieldSchema, connections

        shutil.rmtree(self.base, ignore_errors=True)
        default_server.set_base_dir(str(self.base))
        default_server.start()
        self.server = default_server
        connections.connect(host="127.0.0.1", port=default_server.listen_port)
        self.serving_pids = milvus_pids()
        self.notes.append(f"Milvus standalone (pip milvus==2.3.5), {len(self.serving_pids)} server processes measured")
        dim = data.shape[1]
        fields = [FieldSchema("id", DataType.INT64, is_primary=True),
                  FieldSchema("emb", DataType.FLOAT_VECTOR, dim=dim)]
        self.col = Collection("bench", CollectionSchema(fields))
        t = time.time()
        step = max(1, 50_000_000 // (dim * 4 * 10))
        for i in range(0, len(data), step):
            self.col.insert([ids[i:i + step].tolist(), data[i:i + step]])
        self.col.flush()
        self.insert_seconds = time.time() - t
        metric = {"cosine": "IP", "ip": "IP", "l2": "L2"}[self.a.metric]
        if self.a.metric == "cosine":
            self.notes.append("cosine run as IP (the vectors are unit length)")
        self.metric = metric
        if self.kind == "hnsw":
            params = {"index_type": "HNSW", "metric_type": metric, "params": {"M": self.m, "efConstruction": self.efc}}
        else:
            params = {"index_type": "DISKANN", "metric_type": metric, "params": {}}
        # create_index waits for the build; a build that fails inside Milvus is retried there
        # forever, so the wait is bounded (pymilvus 2.3 honours only an int timeout) and the
        # reason is taken from the server's log.
        timeout = self.timeout
        try:
            self.col.create_index("emb", params, timeout=int(timeout))
        except Exception as e:
            time.sleep(3)  # let the server flush its log
            reasons = set()
            for f in (self.base / "logs").glob("*.log"):
                for line in f.read_text(errors="replace").splitlines():
                    if "failed to create index, " in line:
                        reason = line.split("failed to create index, ", 1)[1]
                        reasons.add(reason.split("\\n")[0].split('"')[0][:160])
            self.server.stop()
            raise RuntimeError(f"Milvus did not finish building {self.kind.upper()} within {timeout:.0f} s "
                               f"({e!r}); server log: {'; '.join(sorted(reasons)) or 'no failure logged'}")
        self.col.load()

    def disk_bytes(self):
        return sum(f.stat().st_size for f in self.base.rglob("*") if f.is_file())

    def client(self, knob):
        key = "ef" if self.kind == "hnsw" else "search_list"
        params = {"metric_type": self.metric, "params": {key: max(knob, self.a.k)}}
        k = self.a.k

        def search(q):
            r = self.col.search([q.tolist()], "emb", params, limit=k)
            return [int(h.id) for h in r[0]], None

        return search

    def stop(self):
        self.server.stop()


def milvus_pids():
    """The server processes Milvus runs: every descendant of this driver."""
    parent = {}
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                stat = (p / "stat").read_text()
            except OSError:
                continue
            parent[int(p.name)] = int(stat[stat.rindex(")") + 2:].split()[1])
    ours, changed = {os.getpid()}, True
    while changed:
        changed = False
        for pid, pp in parent.items():
            if pp in ours and pid not in ours:
                ours.add(pid)
                changed = True
    return sorted(ours - {os.getpid()})


def run(peer, queries, knob, concurrency, span, seconds=0.0):
    """One run: `concurrency` threads, each sending one query and waiting (span: 'time', 'pass', 'atleast')."""
    n = len(queries)
    lock = threading.Lock()
    state = {"next": 0}
    lat, errors, answers = [], [0], [None] * n
    rapl = Rapl.open()
    e0 = rapl.read() if rapl else None
    io0 = [io_read_bytes(p) for p in peer.serving_pids]
    start = time.perf_counter()

    def client():
        search = peer.client(knob)
        mine = []
        while True:
            with lock:
                i = state["next"]
                state["next"] += 1
            el = time.perf_counter() - start
            if span == "pass" and i >= n or span == "time" and el >= seconds or \
                    span == "atleast" and i >= n and el >= seconds:
                break
            q = queries[i % n]
            t = time.perf_counter()
            try:
                ids, _ = search(q)
            except Exception as e:  # a failed query is counted, as VectorDBBench does
                with lock:
                    if errors[0] == 0:
                        log(f"a query failed: {e!r}")
                    errors[0] += 1
                continue
            mine.append((time.perf_counter() - t) * 1000)
            if i < n:
                answers[i] = ids
        with lock:
            lat.extend(mine)

    threads = [threading.Thread(target=client) for _ in range(max(1, concurrency))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    io1 = [io_read_bytes(p) for p in peer.serving_pids]
    dev = None
    if all(x is not None for x in io0 + io1):
        dev = sum(b - a for a, b in zip(io0, io1))
    return {"concurrency": concurrency, "knob": knob, "seconds": wall, "queries": len(lat), "errors": errors[0],
            "latencies_ms": lat, "answers": [a if a is not None else [] for a in answers],
            "joules": rapl.joules(e0, rapl.read()) if rapl else None, "device_read_bytes": dev, "index_reads": None}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--kind", required=True, choices=["hnswlib", "diskannpy", "milvus"])
    p.add_argument("--label", required=True)
    p.add_argument("--options", default="{}")
    p.add_argument("--dataset", required=True)
    p.add_argument("--metric", default="cosine")
    p.add_argument("--k", type=int, default=100)
    p.add_argument("--concurrency", default="1,5,10,20,30,40,60,80")
    p.add_argument("--duration", type=float, default=30)
    p.add_argument("--sweep-duration", type=float, default=10)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--workdir", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--build-timeout", type=float, default=7200)
    a = p.parse_args()
    opts = json.loads(a.options)
    Path(a.workdir).mkdir(parents=True, exist_ok=True)
    peer = {"hnswlib": Hnswlib, "diskannpy": Diskannpy, "milvus": Milvus}[a.kind](a, opts)
    in_memory = a.kind == "hnswlib" or a.kind == "milvus" and opts.get("index", "hnsw") == "hnsw"
    knob = int(opts.get("ef" if in_memory else "search_list", 100))
    sweep = [int(x) for x in opts["sweep"].split("/")] if opts.get("sweep") else []

    _, queries = load(a.dataset, "test")
    __import__({"hnswlib": "hnswlib", "diskannpy": "diskannpy", "milvus": "pymilvus"}[a.kind])
    # What the Python client itself occupies (interpreter, numpy, pyarrow, the queries): not
    # the index's memory, so it is taken off the peak of an in-process peer.
    client_rss = (status_kib(os.getpid(), "VmRSS:") or 0) * 1024
    t = time.time()
    ids, train = load(a.dataset, "train")
    insert = time.time() - t
    log(f"{a.label}: loading {len(train)} vectors")
    t = time.time()
    peer.load(ids, train)
    build = time.time() - t
    if hasattr(peer, "insert_seconds"):
        insert += peer.insert_seconds
        build -= peer.insert_seconds
    del train
    import gc
    gc.collect()
    load_peak = sum(status_kib(pid, "VmHWM:") or 0 for pid in peer.serving_pids) * 1024
    clean = all(reset_peak(pid) for pid in peer.serving_pids)
    raw = {"label": a.label, "insert_seconds": insert, "build_seconds": build, "load_peak_rss_bytes": load_peak,
           "serving_peak_is_clean": clean, "index_dram_bytes": peer.index_dram_bytes(), "levels": [],
           "sweep": [], "notes": peer.notes}
    for c in [int(x) for x in a.concurrency.split(",")]:
        log(f"{a.label}: concurrency {c} for {a.duration:.0f} s")
        raw["levels"].append(run(peer, queries, knob, c, "time", a.duration))
    log(f"{a.label}: serial pass")
    raw["serial"] = run(peer, queries, knob, 1, "pass")
    best = max(raw["levels"], key=lambda r: r["queries"] / r["seconds"])["concurrency"] if raw["levels"] else 1
    for v in sweep:
        log(f"{a.label}: sweep {v} at concurrency {best}")
        raw["sweep"].append(run(peer, queries, v, best, "atleast", a.sweep_duration))
    peak = sum(status_kib(pid, "VmHWM:") or 0 for pid in peer.serving_pids) * 1024
    if peer.serving_pids == [os.getpid()]:
        peak -= client_rss
        raw["load_peak_rss_bytes"] -= client_rss
        raw["notes"].append(f"the Python client's own {client_rss / 2**20:.0f} MiB (interpreter, numpy, pyarrow, "
                            "queries) is taken off its RSS figures")
    raw["serving_peak_rss_bytes"] = peak
    raw["disk_bytes"] = peer.disk_bytes()
    if hasattr(peer, "stop"):
        peer.stop()
    Path(a.out).write_text(json.dumps(raw))


if __name__ == "__main__":
    try:
        main()
    except Exception as e:
        # The harness reports this line as the reason the configuration did not run.
        out = next((x.split("=", 1)[1] for x in sys.argv if x.startswith("--out=")), None)
        if out:
            Path(out).write_text(json.dumps({"error": f"{type(e).__name__}: {e}"}))
        raise
