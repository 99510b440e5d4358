"""How long a new replica takes to be ready when it is copied from a snapshot of a live replica
(its archive packed, fetched over HTTP, unpacked) and when the two nodes share their storage
(--shared-storage: the new replica links the live one's sealed segments where they lie). Two
clusters of 3 etcd members, 3 NATS servers and 2 diskvec nodes on loopback (the test suite's
helpers); the collection is sealed and optimized before the replica is asked for.
Usage: DISKVEC_BIN=target/release/diskvec .venv-test/bin/python linking.py OUT.json [POINTS]"""
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

DIM, BATCH = 128, 1000


def files_of(d):
    return [f for f in d.rglob("*") if f.is_file()]


def one_cluster(work, shared, points):
    tc.SHARED_STORAGE = {0, 1} if shared else set()
    etcd, nats = tc.Etcd(work), tc.Nats(work)
    etcd.start_all()
    nats.start_all()
    nodes = tc.Cluster(work, etcd, nats, n=2)
    try:
        nodes.start_all()
        tc.wait_members(nodes, range(2), 15)
        client = nodes.client(0, timeout=300)
        client.create_collection("c", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE),
                                 shard_number=1, replication_factor=1)
        rng = np.random.default_rng(7)
        started = time.monotonic()
        for lo in range(0, points, BATCH):
            v = rng.standard_normal((BATCH, DIM)).astype(np.float32)
            client.upsert("c", wait=True, points=models.Batch(ids=list(range(lo, lo + BATCH)), vectors=v.tolist()))
        ingest = time.monotonic() - started
        peer = {k: nodes.get(k, "/cluster")["peer_id"] for k in range(2)}
        src = 0 if nodes.get(0, "/collections/c/cluster")["local_shards"] else 1
        dst = 1 - src

        def optimized():
            info = nodes.get(src, "/collections/c@0")
            assert info["status"] == "green" and info["optimizer_status"] == "ok", info
        tc.eventually(optimized, 900, interval=0.5)
        src_files = files_of(work / f"node{src}" / "collections" / "c@0" / "segments")
        asked = time.monotonic()
        tc.http_json(f"{nodes.node_url(src)}/collections/c/cluster", {"replicate_shard": {
            "shard_id": 0, "from_peer_id": peer[src], "to_peer_id": peer[dst]}})

        def active():
            local = nodes.get(dst, "/collections/c/cluster")["local_shards"]
            assert local and local[0]["state"] == "Active", local
            return local[0]["points_count"]
        count = tc.eventually(active, 900, interval=0.05)
        ready = time.monotonic() - asked
        dst_files = files_of(work / f"node{dst}" / "collections" / "c@0" / "segments")
        src_inodes = {f.stat().st_ino for f in src_files}
        log = nodes.logs[dst].read_text(errors="replace")
        return {"shared_storage": shared, "points": points, "ingest_s": round(ingest, 2),
                "new_replica_ready_s": round(ready, 3), "points_on_new_replica": count,
                "segment_bytes": sum(f.stat().st_size for f in dst_files),
                "segment_bytes_shared": sum(f.stat().st_size for f in dst_files if f.stat().st_ino in src_inodes),
                "linked": "where they lie" in log, "restored_from_archive": "restored from" in log}
    finally:
        nodes.stop_all()
        nats.stop_all()
        etcd.stop_all()


def main():
    out = Path(sys.argv[1])
    points = int(sys.argv[2]) if len(sys.argv) > 2 else 200_000
    rows = []
    for shared in (False, True):
        with tempfile.TemporaryDirectory(dir="/work") as work:
            rows.append(one_cluster(Path(work), shared, points))
            print(rows[-1], flush=True)
    out.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
