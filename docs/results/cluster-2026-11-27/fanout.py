"""What a cluster costs and gives on one machine: one `diskvec serve` against three nodes of a
cluster (3 shards, 1 or 2 replicas each) over a 3-server NATS JetStream and one etcd, all on
this machine's cores (the same total CPU), on the 50k sentences of ../shared/datasets.

    .venv-test/bin/python docs/results/cluster-2026-11-27/fanout.py DATA_DIR WORK_DIR OUT.json

For each layout: ingest (50,000 points in upserts of 100 with wait=true, one client over
HTTP: points a second, batch latency p50/p99), the wait for indexing (segments seal at 5,000 points everywhere), then the 1,000 test
queries (top 10) with 1 and with 4 client threads (QPS, p50, p99, recall@10 against the
exact neighbours), count requests (the routing's cost alone: p50), and each node's resident
memory after loading (the capacity argument: each node holds a third).
The cluster's processes are started with the end-to-end tests' harness
(crates/server/python_tests/test_cluster.py).
"""
import http.client
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "crates" / "server" / "python_tests"))
import test_cluster as harness  # noqa: E402

data, work, out = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
train = pq.read_table(data / "train.parquet")
vectors = np.array(train.column("emb").to_pylist(), dtype=np.float32)
ids = train.column("id").to_pylist()
test = np.array(pq.read_table(data / "test.parquet").column("emb").to_pylist(), dtype=np.float32)
truth = [set(r[:10]) for r in pq.read_table(data / "neighbors.parquet").column("neighbors_id").to_pylist()]
BATCH = 100
bodies = [json.dumps({"points": [{"id": int(i), "vector": v.tolist()}
                                 for i, v in zip(ids[s:s + BATCH], vectors[s:s + BATCH])]}).encode()
          for s in range(0, len(ids), BATCH)]
queries = [json.dumps({"query": q.tolist(), "limit": 10}).encode() for q in test]


class Http:
    """One keep-alive connection."""

    def __init__(self, port):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)

    def call(self, method, path, body=None):
        self.conn.request(method, path, body=body, headers={"content-type": "application/json"})
        r = self.conn.getresponse()
        payload = r.read()
        if r.status != 200:
            raise RuntimeError(f"{method} {path}: {r.status} {payload[:300]!r}")
        return json.loads(payload)["result"]


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p / 100))]


def rss_mib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) / 1024


def measure(ports, pids, create):
    h = Http(ports[0])
    h.call("PUT", "/collections/docs", json.dumps(create).encode())
    lat = []
    t0 = time.time()
    for b in bodies:
        t = time.time()
        h.call("PUT", "/collections/docs/points?wait=true", b)
        lat.append(time.time() - t)
    ingest_s = time.time() - t0
    t0 = time.time()
    while True:
        info = h.call("GET", "/collections/docs")
        if info["status"] == "green" and info["indexed_vectors_count"] >= len(ids):
            time.sleep(10)  # idle merges of the sealed segments
            break
        if time.time() - t0 > 900:
            raise RuntimeError(f"not indexed in 900 s: {info}")
        time.sleep(1)
    index_s = time.time() - t0
    result = {
        "ingest_points_per_s": round(len(ids) / ingest_s),
        "batch_p50_ms": round(pct(lat, 50) * 1e3, 2),
        "batch_p99_ms": round(pct(lat, 99) * 1e3, 2),
        "index_wait_s": round(index_s, 1),
        "rss_mib_per_node": [round(rss_mib(p), 1) for p in pids],
    }
    for threads in (1, 4):
        lat, hits = [], [0]
        lock = threading.Lock()

        def run(part, port):
            c = Http(port)
            for qi in part:
                t = time.time()
                got = c.call("POST", "/collections/docs/points/query", queries[qi])["points"]
                d = time.time() - t
                found = len(truth[qi] & {p["id"] for p in got})
                with lock:
                    lat.append(d)
                    hits[0] += found
        parts = [list(range(len(queries)))[k::threads] for k in range(threads)]
        ts = [threading.Thread(target=run, args=(parts[k], ports[k % len(ports)])) for k in range(threads)]
        t0 = time.time()
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        wall = time.time() - t0
        result[f"search_x{threads}"] = {
            "qps": round(len(queries) / wall, 1),
            "p50_ms": round(pct(lat, 50) * 1e3, 2),
            "p99_ms": round(pct(lat, 99) * 1e3, 2),
            "recall_at_10": round(hits[0] / (10 * len(queries)), 4),
        }
    lat = []
    for _ in range(500):
        t = time.time()
        h.call("POST", "/collections/docs/points/count", b'{"exact": true}')
        lat.append(time.time() - t)
    result["count_p50_ms"] = round(pct(lat, 50) * 1e3, 3)
    return result


# Segments seal at 5,000 points in every layout, so that a shard of a third of the points is
# in sealed DiskANN segments as the single node's collection is (at the default 20,000 a
# shard would stay in its growing, in-DRAM segment and the comparison would be of indexes).
create = {"vectors": {"size": vectors.shape[1], "distance": "Cosine"}, "diskvec": {"seal_threshold": 5000}}
results = {"machine": os.uname().nodename, "cores": os.cpu_count(), "points": len(ids)}

# One node, no cluster.
single_dir = work / "single"
single_dir.mkdir(parents=True, exist_ok=True)
log = open(work / "single.log", "w")
proc = subprocess.Popen([str(harness.BIN), "serve", "--db", str(single_dir / "db"), "--port", "0"],
                        stdout=subprocess.DEVNULL, stderr=log)
port = None
for _ in range(300):
    text = (work / "single.log").read_text()
    if "listening on http://127.0.0.1:" in text:
        port = int(text.split("listening on http://127.0.0.1:")[1].split()[0])
        break
    time.sleep(0.1)
try:
    results["single node"] = measure([port], [proc.pid], create)
    print(json.dumps(results["single node"]), flush=True)
finally:
    proc.terminate()
    proc.wait(timeout=60)

for replicas in (1, 2):
    cwork = work / f"cluster-r{replicas}"
    cwork.mkdir(parents=True, exist_ok=True)
    etcd, nats = harness.Etcd(cwork), harness.Nats(cwork)
    etcd.start_all()
    nats.start_all()
    cluster = harness.Cluster(cwork, etcd, nats)
    try:
        cluster.start_all()
        harness.wait_members(cluster, list(range(3)), 15)
        layout = dict(create, shard_number=3, replication_factor=replicas, write_consistency_factor=1)
        key = f"3 nodes x 3 shards, {replicas} replica{'s' if replicas > 1 else ''}"
        results[key] = measure(cluster.ports, [p.pid for p in cluster.procs], layout)
        print(json.dumps(results[key]), flush=True)
    finally:
        cluster.stop_all()
        nats.stop_all()
        etcd.stop_all()

out.write_text(json.dumps(results, indent=1))
print(json.dumps(results, indent=1))
