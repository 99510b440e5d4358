#!/usr/bin/env python3
"""What the HTTP server costs: the same searches on the same collection, embedded (Python,
in process) and through `diskvec serve` (Qdrant's REST API, keep-alive connections).

    python benchmarks/server/overhead.py --bin target/release/diskvec \
        --dataset ../shared/datasets/wordnet-minilm384-50k --work /work/bench/overhead \
        [--concurrency 1,2,8] [--seconds 20] [--k 10,100] [--search-list 100,200] [--in-memory]

Loads the dataset once with `diskvec import --optimize` (every point in sealed DiskANN
segments), then for each (k, L, concurrency) runs closed-loop clients for `--seconds`:
embedded (threads calling Collection.search; the search releases the GIL) and HTTP (threads,
one keep-alive connection each, request bodies encoded before the clock starts). Reports QPS,
p50/p99 latency, recall@k against the dataset's ground truth, and CPU per query: the whole
process embedded, the server process over HTTP (the client's CPU is reported apart). Needs
numpy, pyarrow and the diskvec wheel (scripts/test.sh's .venv-test has them).
"""
import argparse
import http.client
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def cpu_seconds(pid="self"):
    """utime + stime of a process, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def load_queries(dataset, k):
    t = pq.read_table(Path(dataset) / "test.parquet")
    queries = np.stack([np.asarray(v, dtype=np.float32) for v in t.column("emb").to_pylist()])
    n = pq.read_table(Path(dataset) / "neighbors.parquet")
    truth = [list(v)[:k] for v in n.column("neighbors_id").to_pylist()]
    return queries, truth


def closed_loop(workers, seconds, call):
    """`workers` threads each calling call(worker, i) until the clock runs out; returns
    (latencies in s, answers by query index, wall seconds)."""
    latencies, answers, errors = [], {}, []
    lock = threading.Lock()
    stop = time.perf_counter() + seconds

    def run(w):
        mine, got, i = [], {}, w
        try:
            while time.perf_counter() < stop:
                t0 = time.perf_counter()
                got[i] = call(w, i)
                mine.append(time.perf_counter() - t0)
                i += workers
        except Exception as e:  # reported, not hidden: the run fails below
            errors.append(repr(e))
        with lock:
            latencies.extend(mine)
            answers.update(got)

    threads = [threading.Thread(target=run, args=(w,)) for w in range(workers)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + 120)
    wall = time.perf_counter() - t0
    if errors:
        raise RuntimeError(f"{len(errors)} client errors, first: {errors[0]}")
    return latencies, answers, wall


def summary(latencies, answers, wall, truth, k, cpu):
    nq = len(truth)
    found = sum(len(set(ids) & set(truth[i % nq][:k])) for i, ids in answers.items())
    lat = np.array(latencies) * 1000
    return {"queries": len(lat), "qps": len(lat) / wall, "p50_ms": float(np.percentile(lat, 50)),
            "p99_ms": float(np.percentile(lat, 99)), f"recall@{k}": found / (k * len(answers)),
            "cpu_us_per_query": cpu * 1e6 / max(1, len(lat))}


def start_server(binary, db):
    proc = subprocess.Popen([binary, "serve", "--db", str(db), "--port", "0"], stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        if m:
            threading.Thread(target=proc.stderr.read, daemon=True).start()  # keep the pipe drained
            return proc, int(m.group(1))
    proc.kill()
    raise RuntimeError("the server did not start")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--concurrency", default="1,2,8")
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--k", default="10,100")
    ap.add_argument("--search-list", default="100,200", help="one L per k, in the same order")
    ap.add_argument("--in-memory", action="store_true",
                    help="load with `import --in-memory` (every node in DRAM, no SSD reads)")
    ap.add_argument("--out", help="JSON results file")
    args = ap.parse_args()
    import diskvec

    work = Path(args.work)
    db_dir = work / "db"
    if not (db_dir / "collections" / "c").exists():
        work.mkdir(parents=True, exist_ok=True)
        log("loading (diskvec import --optimize)")
        subprocess.run([args.bin, "import", "--db", str(db_dir), "--collection", "c", "--dataset", args.dataset,
                        "--metric", "cosine", "--optimize"] + (["--in-memory"] if args.in_memory else []),
                       check=True, timeout=3600)
    ks = [int(x) for x in args.k.split(",")]
    lists = [int(x) for x in args.search_list.split(",")]
    levels = [int(x) for x in args.concurrency.split(",")]
    rows = []
    for k, L in zip(ks, lists):
        queries, truth = load_queries(args.dataset, k)
        nq = len(queries)

        db = diskvec.open(str(db_dir))
        col = db.collection("c")
        col.search(queries[0], k=k, search_list=L, with_payload=False)  # starts the search threads
        for c in levels:
            before = cpu_seconds()
            lat, ans, wall = closed_loop(c, args.seconds, lambda w, i: [
                h["id"] for h in col.search(queries[i % nq], k=k, search_list=L, with_payload=False)])
            row = {"mode": "embedded", "k": k, "L": L, "concurrency": c,
                   **summary(lat, ans, wall, truth, k, cpu_seconds() - before)}
            log(json.dumps(row))
            rows.append(row)
        db.close()

        proc, port = start_server(args.bin, db_dir)
        try:
            bodies = [json.dumps({"vector": q.tolist(), "limit": k, "params": {"hnsw_ef": L}}).encode()
                      for q in queries]
            for c in levels:
                conns = [http.client.HTTPConnection("127.0.0.1", port, timeout=60) for _ in range(c)]

                def call(w, i, conns=conns):
                    conns[w].request("POST", "/collections/c/points/search", bodies[i % nq],
                                     {"content-type": "application/json"})
                    r = conns[w].getresponse()
                    body = r.read()
                    if r.status != 200:
                        raise RuntimeError(f"HTTP {r.status}: {body[:200]!r}")
                    return [h["id"] for h in json.loads(body)["result"]]

                call(0, 0)
                server_before, client_before = cpu_seconds(proc.pid), cpu_seconds()
                lat, ans, wall = closed_loop(c, args.seconds, call)
                row = {"mode": "http", "k": k, "L": L, "concurrency": c,
                       **summary(lat, ans, wall, truth, k, cpu_seconds(proc.pid) - server_before),
                       "client_cpu_us_per_query": (cpu_seconds() - client_before) * 1e6 / max(1, len(lat))}
                log(json.dumps(row))
                rows.append(row)
                for conn in conns:
                    conn.close()
        finally:
            proc.terminate()
            proc.wait(timeout=60)

    print("| k | L | clients | embedded QPS | HTTP QPS | HTTP/embedded | embedded p99 ms | HTTP p99 ms "
          "| recall emb/HTTP | CPU us/query emb / server / client |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for e in (r for r in rows if r["mode"] == "embedded"):
        h = next(r for r in rows if r["mode"] == "http" and (r["k"], r["L"], r["concurrency"]) ==
                 (e["k"], e["L"], e["concurrency"]))
        rk = f"recall@{e['k']}"
        print(f"| {e['k']} | {e['L']} | {e['concurrency']} | {e['qps']:.0f} | {h['qps']:.0f} | "
              f"{h['qps'] / e['qps']:.2f} | {e['p99_ms']:.2f} | {h['p99_ms']:.2f} | {e[rk]:.4f}/{h[rk]:.4f} | "
              f"{e['cpu_us_per_query']:.0f} / {h['cpu_us_per_query']:.0f} / {h['client_cpu_us_per_query']:.0f} |")
    if args.out:
        Path(args.out).write_text(json.dumps({"dataset": args.dataset, "seconds": args.seconds, "rows": rows},
                                             indent=1))


if __name__ == "__main__":
    main()
