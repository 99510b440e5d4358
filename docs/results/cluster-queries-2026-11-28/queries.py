"""What the step above the shards costs: the median and p99 latency of query kinds on a
collection of 3 shards against the same points in a collection of 1 shard, both on a cluster
of 3 diskvec nodes (3 etcd members, 3 NATS servers) on loopback, asked through node 0, one
request at a time. Usage:
DISKVEC_BIN=target/release/diskvec .venv-test/bin/python queries.py OUT.json [POINTS] [ROUNDS] [KIND,...]"""
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

DIM = 128


def main():
    out = Path(sys.argv[1])
    points = int(sys.argv[2]) if len(sys.argv) > 2 else 50_000
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 200
    with tempfile.TemporaryDirectory(dir="/work") as work:
        work = Path(work)
        etcd, nats = tc.Etcd(work), tc.Nats(work)
        etcd.start_all()
        nats.start_all()
        nodes = tc.Cluster(work, etcd, nats)
        try:
            nodes.start_all()
            tc.wait_members(nodes, range(3), 15)
            client = nodes.client(0, timeout=120)
            rng = np.random.default_rng(11)
            vectors = rng.standard_normal((points, DIM)).astype(np.float32)
            for name, shards in (("one", 1), ("three", 3)):
                client.create_collection(name, vectors_config=models.VectorParams(
                    size=DIM, distance=models.Distance.COSINE), shard_number=shards, replication_factor=1)
                tc.wait_active(nodes, name, shards, 1)
                for lo in range(0, points, 1000):
                    client.upsert(name, wait=True, points=models.Batch(
                        ids=list(range(lo, lo + 1000)), vectors=vectors[lo:lo + 1000].tolist(),
                        payloads=[{"g": i % 50} for i in range(lo, lo + 1000)]))
            queries = rng.standard_normal((rounds, DIM)).astype(np.float32)
            ids = rng.integers(0, points, size=(rounds, 2))
            kinds = {
                "vector": lambda c, n, i: c.query_points(n, query=queries[i].tolist(), limit=10),
                "recommend by 2 ids": lambda c, n, i: c.query_points(n, query=models.RecommendQuery(
                    recommend=models.RecommendInput(positive=[int(ids[i][0]), int(ids[i][1])])), limit=10),
                "rrf of 2 prefetches": lambda c, n, i: c.query_points(n, prefetch=[
                    models.Prefetch(query=queries[i].tolist(), limit=20),
                    models.Prefetch(query=queries[(i + 1) % rounds].tolist(), limit=20)],
                    query=models.FusionQuery(fusion=models.Fusion.RRF), limit=10),
                "groups (10 x 3)": lambda c, n, i: c.query_points_groups(
                    n, group_by="g", query=queries[i].tolist(), limit=10, group_size=3),
                "facet": lambda c, n, i: c.facet(n, key="g", limit=10),
                "groups of an rrf (10 x 3)": lambda c, n, i: c.query_points_groups(n, group_by="g", prefetch=[
                    models.Prefetch(query=queries[i].tolist(), limit=100),
                    models.Prefetch(query=queries[(i + 1) % rounds].tolist(), limit=100)],
                    query=models.FusionQuery(fusion=models.Fusion.RRF), limit=10, group_size=3),
                "mmr over 2 prefetches": lambda c, n, i: c.query_points(n, prefetch=[
                    models.Prefetch(query=queries[i].tolist(), limit=50),
                    models.Prefetch(query=queries[(i + 1) % rounds].tolist(), limit=50)],
                    query=models.NearestQuery(nearest=queries[i].tolist(),
                                              mmr=models.Mmr(diversity=0.5, candidates_limit=50)), limit=10),
            }
            only = sys.argv[4].split(",") if len(sys.argv) > 4 else None
            kinds = {k: v for k, v in kinds.items() if only is None or k in only}
            rows = []
            for kind, ask in kinds.items():
                for name in ("one", "three"):
                    for i in range(5):  # warm-up
                        ask(client, name, i)
                    took = []
                    for i in range(rounds):
                        t = time.perf_counter()
                        ask(client, name, i)
                        took.append((time.perf_counter() - t) * 1000)
                    rows.append({"kind": kind, "collection": name, "points": points, "rounds": rounds,
                                 "p50_ms": round(float(np.percentile(took, 50)), 2),
                                 "p99_ms": round(float(np.percentile(took, 99)), 2)})
                    print(rows[-1], flush=True)
            out.write_text(json.dumps(rows, indent=1) + "\n")
        finally:
            nodes.stop_all()
            nats.stop_all()
            etcd.stop_all()


if __name__ == "__main__":
    main()
