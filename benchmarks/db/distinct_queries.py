#!/usr/bin/env python3
"""QPS of a loaded diskvec database on queries that never repeat (issue 22).

The caps grid (caps1m.sh) asks the 1,000 test queries again and again, so a cache that learns
by access (diskvec's node cache, qdrant's page cache) ends up holding their working set. This
asks distinct queries instead: rows of the train set plus Gaussian noise (0.3 of the data's
standard deviation), each once, one client, with the database at its defaults. It reports,
per phase, QPS, node reads per graph search and the node cache's hit rate (from
`info()["search_memory"]`, counted over the phase): a warm-up at k=10 (L=50), then k=10
(L=50) and k=100 (L=150).

    python distinct_queries.py DB_DIR TRAIN_NPY OUT_JSON [--seconds 20] [--queries 150000]

Run it inside a memory cgroup to cap it as the grid does (`common.py cgrun`). The queries are
held in DRAM (150,000 x 768 floats: 460 MB), which the automatic search memory then counts out.
"""
import argparse
import json
import time

import numpy as np

import diskvec


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("db")
    ap.add_argument("train")
    ap.add_argument("out")
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--warm-seconds", type=float, default=30)
    ap.add_argument("--queries", type=int, default=150_000)
    ap.add_argument("--collection", default="c")
    args = ap.parse_args()

    train = np.load(args.train, mmap_mode="r")
    rng = np.random.default_rng(7)
    rows = np.sort(rng.choice(train.shape[0], args.queries, replace=False))
    queries = np.asarray(train[rows], dtype=np.float32)
    queries += rng.standard_normal(queries.shape).astype(np.float32) * np.float32(0.3 * np.std(queries))
    queries = queries[rng.permutation(len(queries))]
    del train

    db = diskvec.open(args.db)
    col = db.collection(args.collection)

    def counters():
        m = col.info()["search_memory"]
        searches = m["graph_searches"]
        reads = m["reads_per_search"] * searches
        rate = m["cache_hit_rate"]
        hits = rate / (1 - rate) * reads if rate < 1 else 0.0
        return searches, reads, hits, m["cached_nodes"], m["node_cache_bytes"]

    out, at = {}, 0
    for name, k, search_list, seconds in (("warm-up k=10 L=50", 10, 50, args.warm_seconds),
                                          ("k=10 L=50", 10, 50, args.seconds),
                                          ("k=100 L=150", 100, 150, args.seconds)):
        s0, r0, h0, _, _ = counters()
        start, n = time.time(), 0
        while time.time() - start < seconds and at < len(queries):
            col.search(queries[at], k=k, search_list=search_list)
            at += 1
            n += 1
        wall = time.time() - start
        s1, r1, h1, held, held_bytes = counters()
        reads, hits = r1 - r0, h1 - h0
        out[name] = {"qps": n / wall, "queries": n, "reads_per_search": reads / max(1, s1 - s0),
                     "hit_rate": hits / max(1.0, hits + reads), "cached_nodes": held,
                     "node_cache_bytes": held_bytes}
        print(name, json.dumps(out[name]), flush=True)
        if at >= len(queries):
            print("ran out of queries", flush=True)
            break
    db.close()
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
