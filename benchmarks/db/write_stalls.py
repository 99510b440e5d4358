"""Write stalls from outside: one client writes 200-point batches over HTTP (`wait=true`) as fast
as they are acknowledged into `diskvec serve`, with seals every `--indexing-threshold-kb` of
vectors, and reports each write's latency (p50, p99, slowest) and how long writers were held
back. With `--kill-every LO-HI` the server is SIGKILLed every LO-HI seconds and restarted on
the same database; the client retries a batch until it is acknowledged, and at the end every
acknowledged point must be there.

    python benchmarks/db/write_stalls.py --bin target/release/diskvec --points 190000 \
        [--kill-every 0.5-4] --out OUT.json

Standard library only. The server listens on 127.0.0.1 on a free port; every loop is bounded
by `--max-seconds`.
"""
import argparse
import http.client
import json
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request


def start(binary, db):
    proc = subprocess.Popen([binary, "serve", "--db", db, "--port", "0"], stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while time.time() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        if m:
            # Keep draining stderr so the server never blocks on a full pipe.
            threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
            return proc, int(m.group(1))
    proc.kill()
    raise RuntimeError("server did not start")


def request(port, method, path, body=None, timeout=120):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method,
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def percentile(sorted_values, q):
    if not sorted_values:
        return 0.0
    return sorted_values[min(len(sorted_values) - 1, int(round((len(sorted_values) - 1) * q)))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--points", type=int, default=190_000)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--batch", type=int, default=200)
    ap.add_argument("--indexing-threshold-kb", type=int, default=2000)
    ap.add_argument("--kill-every", default=None, help="LO-HI seconds between SIGKILLs of the server")
    ap.add_argument("--max-seconds", type=float, default=1200)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    rng = random.Random(7)
    db = tempfile.mkdtemp(prefix="write-stalls-")
    state = {"proc": None, "port": None}
    state["proc"], state["port"] = start(args.bin, db)
    request(state["port"], "PUT", "/collections/c", {
        "vectors": {"size": args.dim, "distance": "Euclid"},
        "optimizers_config": {"indexing_threshold": args.indexing_threshold_kb},
    })
    lock = threading.Lock()
    stop = threading.Event()
    kills = []

    def killer(lo, hi):
        while not stop.wait(rng.uniform(lo, hi)):
            with lock:
                state["proc"].send_signal(signal.SIGKILL)
                state["proc"].wait()
                kills.append(time.time())
                state["proc"], state["port"] = start(args.bin, db)

    if args.kill_every:
        lo, hi = (float(x) for x in args.kill_every.split("-"))
        threading.Thread(target=killer, args=(lo, hi), daemon=True).start()

    latencies, retries, refused = [], 0, 0
    acked = 0
    started = time.time()
    while acked < args.points and time.time() - started < args.max_seconds:
        ids = list(range(acked, min(args.points, acked + args.batch)))
        body = {"points": [{"id": i, "vector": [rng.random() for _ in range(args.dim)]} for i in ids]}
        t = time.perf_counter()
        while time.time() - started < args.max_seconds:
            with lock:
                port = state["port"]
            try:
                request(port, "PUT", "/collections/c/points?wait=true", body)
                break
            except urllib.error.HTTPError as e:
                refused += 1  # 503: held back past the request's timeout; retry
                if e.code not in (503, 408):
                    raise
            except (urllib.error.URLError, http.client.HTTPException, ConnectionError, TimeoutError):
                retries += 1  # the server was killed under the request
                time.sleep(0.05)
        else:
            break
        latencies.append(time.perf_counter() - t)
        acked = ids[-1] + 1
    wall = time.time() - started
    stop.set()
    with lock:
        port = state["port"]
    count = request(port, "POST", "/collections/c/points/count", {"exact": True})["result"]["count"]
    info = request(port, "GET", "/collections/c")["result"]
    with lock:
        state["proc"].terminate()
        state["proc"].wait(timeout=60)
    shutil.rmtree(db, ignore_errors=True)
    latencies.sort()
    out = {
        "points_acknowledged": acked, "points_found": count, "lost": max(0, acked - count),
        "seconds": round(wall, 1), "points_per_s": round(acked / wall, 1),
        "kills": len(kills), "retries_after_kill": retries, "refused_503": refused,
        "write_ms": {"p50": round(percentile(latencies, 0.5) * 1e3, 2),
                     "p99": round(percentile(latencies, 0.99) * 1e3, 2),
                     "max": round(latencies[-1] * 1e3, 1) if latencies else 0.0},
        "writes_over_1s": sum(1 for x in latencies if x > 1.0),
        "segments": info.get("segments_count"), "status": info.get("status"),
        "args": vars(args),
    }
    print(json.dumps(out))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)
    return 0 if out["lost"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
