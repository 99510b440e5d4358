#!/usr/bin/env python3
"""What one search costs the client and the server when VectorDBBench's qdrantlocal client
asks it: qdrant-client's `query_points` (k=100, payloads, pydantic models) in one process,
one call at a time, against a running `diskvec serve`; CPU seconds of this process and of the
server (from /proc) per call. On a machine where the benchmark's clients share the cores with
the server, 1 / (client + server CPU per query) x cores bounds the QPS it can measure.

    python benchmarks/server/client_cost.py --url http://127.0.0.1:PORT --pid SERVER_PID \\
        --dataset ../shared/datasets/wordnet-minilm384-50k --collection QdrantLocalCollection \\
        [--calls 2000] [--k 100] [--hnsw-ef 200]

Runs in an environment with qdrant-client, numpy and pyarrow (VectorDBBench's venv has them).
"""
import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from qdrant_client import QdrantClient
from qdrant_client.http.models import SearchParams


def cpu_seconds(pid="self"):
    """utime + stime of a process, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True)
    ap.add_argument("--pid", type=int, required=True, help="the server's process id")
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--collection", default="QdrantLocalCollection")
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--k", type=int, default=100)
    ap.add_argument("--hnsw-ef", type=int, default=200)
    args = ap.parse_args()
    test = pq.read_table(os.path.join(args.dataset, "test.parquet"))
    queries = [list(map(float, q)) for q in np.stack(test.column("emb").to_numpy(zero_copy_only=False))]
    client = QdrantClient(url=args.url)
    params = SearchParams(exact=False, hnsw_ef=args.hnsw_ef)

    def call(i):
        return client.query_points(collection_name=args.collection, query=queries[i % len(queries)],
                                   limit=args.k, search_params=params).points

    for i in range(20):
        call(i)
    server0, client0, wall0 = cpu_seconds(args.pid), time.process_time(), time.perf_counter()
    for i in range(args.calls):
        hits = call(i)
        assert len(hits) == args.k, len(hits)
    wall = time.perf_counter() - wall0
    client = time.process_time() - client0
    server = cpu_seconds(args.pid) - server0
    row = {"calls": args.calls, "k": args.k, "hnsw_ef": args.hnsw_ef,
           "client_cpu_us_per_query": client * 1e6 / args.calls,
           "server_cpu_us_per_query": server * 1e6 / args.calls,
           "wall_us_per_query": wall * 1e6 / args.calls,
           "qps_bound_2_cores": 2 / ((client + server) / args.calls)}
    print(json.dumps(row))


if __name__ == "__main__":
    main()
