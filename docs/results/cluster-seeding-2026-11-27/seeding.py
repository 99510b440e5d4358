"""How long a new replica takes to be ready, built by replaying its shard's log or restored from
a snapshot of a live replica (then the log after it). Two clusters of 3 etcd members, 3 NATS
servers and 2 diskvec nodes on loopback (the test suite's helpers): one never trims its logs
(--log-retain large: the new replica replays), one trims them (--log-retain 0: it must copy).
Usage: DISKVEC_BIN=target/release/diskvec .venv-test/bin/python seeding.py OUT.json [POINTS]"""
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "crates" / "server" / "python_tests"))
import test_cluster as tc  # noqa: E402
from qdrant_client import models  # noqa: E402

DIM, BATCH = 128, 500


def one_cluster(work, retain, points):
    tc.LOG_RETAIN = retain
    etcd, nats = tc.Etcd(work), tc.Nats(work)
    etcd.start_all()
    nats.start_all()
    nodes = tc.Cluster(work, etcd, nats, n=2)
    try:
        nodes.start_all()
        tc.wait_members(nodes, range(2), 15)
        client = nodes.client(0, timeout=120)
        client.create_collection("c", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE),
                                 shard_number=1, replication_factor=1)
        rng = np.random.default_rng(7)
        started = time.monotonic()
        for lo in range(0, points, BATCH):
            v = rng.standard_normal((BATCH, DIM)).astype(np.float32)
            client.upsert("c", wait=True, points=models.Batch(ids=list(range(lo, lo + BATCH)), vectors=v.tolist()))
        ingest = time.monotonic() - started
        peer = {k: nodes.get(k, "/cluster")["peer_id"] for k in range(2)}
        info = nodes.get(0, "/collections/c/cluster")
        src = 0 if info["local_shards"] else 1
        dst = 1 - src
        time.sleep(6)  # a trim round (every 5 s) where the logs are trimmed
        first, last = next((g["first"], g["last"]) for g in nodes.get(src, "/collections/c/cluster")["logs"])
        asked = time.monotonic()
        tc.http_json(f"{nodes.node_url(src)}/collections/c/cluster", {"replicate_shard": {
            "shard_id": 0, "from_peer_id": peer[src], "to_peer_id": peer[dst]}})

        def active():
            local = nodes.get(dst, "/collections/c/cluster")["local_shards"]
            assert local and local[0]["state"] == "Active", local
            return local[0]["points_count"]
        count = tc.eventually(active, 600, interval=0.05)
        ready = time.monotonic() - asked
        log = nodes.logs[dst].read_text(errors="replace")
        return {"log_retain": retain, "points": points, "log_first": first, "log_last": last,
                "ingest_s": round(ingest, 2), "new_replica_ready_s": round(ready, 2), "points_on_new_replica": count,
                "from_snapshot": "restored from" in log}
    finally:
        nodes.stop_all()
        nats.stop_all()
        etcd.stop_all()


def main():
    out = Path(sys.argv[1])
    points = int(sys.argv[2]) if len(sys.argv) > 2 else 100_000
    rows = []
    for retain in (10_000_000, 0):
        with tempfile.TemporaryDirectory() as work:
            rows.append(one_cluster(Path(work), retain, points))
            print(rows[-1], flush=True)
    out.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
