#!/usr/bin/env python3
"""Search while writing on a loaded large collection (VectorDBBench's streaming case): search
latency, QPS and recall idle, then while a writer inserts points at a fixed rate.

Protocol (one process, diskvec's Python API, run inside a memory cgroup by the caller):
1. open DB (a collection "c" loaded by import_large.py) and wait until it is green;
2. idle: CLIENTS threads search the dataset's test queries (k, search list L) for IDLE_S
   (after WARMUP_S of uncounted searches that fill the node cache, if given);
3. for each RATE: a writer inserts new points at RATE points/s for DURATION_S (batches every
   0.1 s, durable acknowledgement), the searchers keep searching; every write's latency is
   kept (the goal: none over 1 s);
4. between rates, and at the end: the time until green again (the seals and merges of what
   was written); then, if given, IDLE_AFTER_S of searches without writes on the collection
   the writes left.
The new points (ids from 10^9 up) are random unit vectors by default: far from every query
of the clustered synthetic set, so the dataset's exact top-k stays the ground truth (results
that are new points are counted, and were 0 in our runs), but the worst case for the growing
segment's HNSW (an insertion at 768-d costs about 4x one of clustered data). With
`--new-from DIR --new-offset N` they are rows N, N+1, ... of DIR's train.parquet instead
(e.g. the rows of the 10M set after the 2M loaded from its head): the data's own
distribution, as VectorDBBench streams its dataset. Those may enter a query's true top-k, so
beside recall against neighbors.parquet the summary gives `recall_of_old`: the share of the
results that are not new points found in the truth (a new point that displaces a true
neighbour is then not counted against the search).

    python benchmarks/db/stream_large.py --db DB --dataset synth10m-f16 --rates 500,5000 --out OUT.json
"""
import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

import diskvec

sys.path.insert(0, str(Path(__file__).resolve().parent))
from import_large import batches  # noqa: E402

NEW_IDS_FROM = 1_000_000_000


def load_queries(dataset, k):
    d = Path(dataset)
    test = pq.read_table(d / "test.parquet")
    queries = np.stack([np.asarray(v, dtype=np.float32) for v in test.column("emb").to_pylist()])
    truth = pq.read_table(d / "neighbors.parquet").column("neighbors_id").to_pylist()
    return queries, [set(t[:k]) for t in truth]


def pct(values, p):
    return round(float(np.percentile(values, p)) * 1000, 2) if len(values) else None


def wait_green(col, limit_s):
    start = time.time()
    while time.time() - start < limit_s:
        if col.info()["status"] == "green":
            return round(time.time() - start, 1)
        time.sleep(2)
    return None


def thread_cpu():
    """{thread id: ("name without its number@nice", CPU seconds so far)} of this process."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for stat in Path("/proc/self/task").glob("*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue  # the thread ended
        name, rest = text[text.index("(") + 1:text.rindex(")")], text[text.rindex(")") + 2:].split()
        # rest[0] is field 3 (state): utime, stime are fields 14, 15 and nice is 19.
        out[stat.parent.name] = (f"{name.rstrip('0123456789').rstrip('-')}@{rest[16]}",
                                 (int(rest[11]) + int(rest[12])) / tick)
    return out


def cores_by_kind(before, after, seconds):
    """Cores each kind of thread used between two `thread_cpu` samples: per thread, then
    summed by its name and nice now (a thread whose nice changed counts where it is now)."""
    cores = {}
    for tid, (key, cpu) in after.items():
        cores[key] = cores.get(key, 0.0) + (cpu - before.get(tid, (key, 0.0))[1]) / seconds
    return {k: round(v, 2) for k, v in sorted(cores.items()) if v >= 0.01}


def cgroup_memory():
    """rss, active_file and inactive_file (MB) of this process's memory cgroup (v1), if any."""
    try:
        path = next(line.split(":", 2)[2].strip() for line in open("/proc/self/cgroup")
                    if ":memory:" in line)
        stat = dict(line.split() for line in open(f"/sys/fs/cgroup/memory{path}/memory.stat"))
    except (OSError, StopIteration, ValueError):
        return {}
    return {k: round(int(stat[k]) / 1e6) for k in ("rss", "active_file", "inactive_file") if k in stat}


def monitor(col, every_s, stop):
    """One JSON line on stderr every `every_s` seconds: segments by kind ([count, points,
    points not linked into a growing or frozen segment's graph]), the builds running
    and the last one, the log's last op, the build memory (why a writer waits), node reads
    per graph search since the last line, the same for each sealed segment ([points, graph
    searches, node reads per graph search, share of its nodes held in DRAM], largest first: which segments cost the reads),
    and the cores each kind of thread used (by name and nice: are the searches getting the
    CPU?); `memory`: the node share and node cache bytes the search memory planned, and the
    memory cgroup's rss, active and inactive page cache (MB)."""
    last_cpu, last_reads, last_searches, last_t = thread_cpu(), 0.0, 0, time.time()
    last_by_segment = {}
    while not stop.wait(every_s):
        info = col.info()
        kinds, by_segment, counts = {}, [], {}
        for seg in info["segments"]:
            kinds.setdefault(seg["kind"], [0, 0, 0])
            kinds[seg["kind"]][0] += 1
            kinds[seg["kind"]][1] += seg["points"]
            kinds[seg["kind"]][2] += seg["unindexed"]  # rows every search scans
            if seg["kind"] == "sealed":
                counts[seg["id"]] = (seg["graph_searches"], seg["node_reads"])
                was = last_by_segment.get(seg["id"], (0, 0))
                done_here, read_here = counts[seg["id"]][0] - was[0], counts[seg["id"]][1] - was[1]
                by_segment.append([seg["points"], done_here, round(read_here / done_here, 2) if done_here > 0 else None,
                                   round(seg["cached_nodes"] / seg["points"], 3) if seg["points"] else None])
        by_segment.sort(key=lambda x: -x[0])
        last_by_segment = counts
        brief = lambda t: t and {k: t.get(k) for k in ("kind", "points", "phase", "done", "total", "seconds", "memory_budget", "shards")}
        memory = info["search_memory"]
        searches, reads = memory["graph_searches"], memory["reads_per_search"] * memory["graph_searches"]
        now, cpu = time.time(), thread_cpu()
        cores = cores_by_kind(last_cpu, cpu, now - last_t)
        # Sealed segments replaced by a merge take their counts with them: deltas below zero are unknown.
        done = searches - last_searches
        print(json.dumps({"t": round(now, 1), "status": info["status"], "error": info["error"],
                          "last_op": info["last_op"], "segments": kinds,
                          "graph_searches": done, "reads_per_search": round((reads - last_reads) / done, 2) if done > 0 else None,
                          "cores": cores, "by_segment": by_segment,
                          "memory": {"node_share": round(memory["node_share"], 4),
                                     "node_cache_mb": round(memory["node_cache_bytes"] / 1e6), **cgroup_memory()},
                          "tasks": [brief(t) for t in info["tasks"]], "last_task": brief(info["last_task"])}),
              file=sys.stderr, flush=True)
        last_cpu, last_reads, last_searches, last_t = cpu, reads, searches, now


class Searchers:
    """CLIENTS threads searching round robin over the queries until stopped; each search's
    latency and recall go to the phase that was current when it started."""

    def __init__(self, col, queries, truth, args):
        self.col, self.queries, self.truth, self.args = col, queries, truth, args
        self.phase = None
        self.results = {}
        self.lock = threading.Lock()
        self.stop = False

    def run(self, seed):
        rng = np.random.default_rng(seed)
        while not self.stop:
            phase = self.phase
            q = int(rng.integers(len(self.queries)))
            t = time.perf_counter()
            hits = self.col.search(self.queries[q], k=self.args.k, search_list=self.args.search_list)
            took = time.perf_counter() - t
            ids = [h["id"] for h in hits]
            found = len(self.truth[q].intersection(ids))
            new = sum(1 for i in ids if i >= NEW_IDS_FROM)
            with self.lock:
                r = self.results.setdefault(phase, {"lat": [], "recall": [], "recall_of_old": [], "new_hits": 0,
                                                    "t0": time.time()})
                r["lat"].append(took)
                r["recall"].append(found / self.args.k)
                r["recall_of_old"].append(found / max(self.args.k - new, 1))
                r["new_hits"] += new
                r["t1"] = time.time()

    def summary(self, phase):
        r = self.results.get(phase)
        if not r:
            return None
        n = len(r["lat"])
        return {"searches": n, "qps": round(n / max(r["t1"] - r["t0"], 1e-9), 1),
                "p50_ms": pct(r["lat"], 50), "p99_ms": pct(r["lat"], 99),
                "recall": round(float(np.mean(r["recall"])), 4),
                "recall_of_old": round(float(np.mean(r["recall_of_old"])), 4), "new_points_in_results": r["new_hits"]}


class RandomPoints:
    """Random unit vectors."""

    def __init__(self, dim, seed):
        self.dim, self.rng = dim, np.random.default_rng(seed)

    def take(self, n):
        v = self.rng.standard_normal((n, self.dim)).astype(np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)


class DatasetPoints:
    """Rows of a dataset's train.parquet from `offset` on, in order (streamed, never held).
    At the end of the file it starts again at `offset` (the rows then written twice, under
    new ids, are counted in `reused`)."""

    def __init__(self, dataset, offset):
        self.dataset, self.offset = dataset, offset
        self.rows = batches(dataset, None, offset)
        self.left = np.empty((0, 0), dtype=np.float32)
        self.reused, self.wrapped = 0, False

    def next_rows(self):
        for _ in range(2):
            try:
                return next(self.rows)[1]
            except StopIteration:
                self.rows = batches(self.dataset, None, self.offset)
                self.wrapped = True
        raise SystemExit(f"{self.dataset}: no train rows from row {self.offset} on")

    def take(self, n):
        parts, have = [], 0
        while have < n:
            if len(self.left) == 0:
                self.left = self.next_rows()
            part, self.left = self.left[:n - have], self.left[n - have:]
            if self.wrapped:
                self.reused += len(part)
            parts.append(part)
            have += len(part)
        return np.concatenate(parts)


def write_at(col, rate, seconds, first_id, points):
    """Inserts `points.take()` at `rate` points/s in batches every 0.1 s (fewer when a batch
    is late: the schedule is kept, never caught up by bursts). Returns write latencies and
    points written."""
    per_batch = max(1, int(round(rate / 10)))
    lat = []
    next_id = first_id
    start = time.time()
    tick = start
    while time.time() - start < seconds:
        v = points.take(per_batch)
        ids = list(range(next_id, next_id + per_batch))
        t = time.perf_counter()
        col.upsert(ids, v, [{"n": i, "bucket": i % 100, "tag": "stream"} for i in ids])
        lat.append(time.perf_counter() - t)
        next_id += per_batch
        tick += 0.1
        delay = tick - time.time()
        if delay > 0:
            time.sleep(delay)
        elif delay < -1:
            tick = time.time()
    elapsed = time.time() - start
    written = next_id - first_id
    return {"rate_asked": rate, "points": written, "rate_reached": round(written / elapsed, 1),
            "batches": len(lat), "batch_points": per_batch, "p50_ms": pct(lat, 50), "p99_ms": pct(lat, 99),
            "max_ms": pct(lat, 100), "over_1s": sum(1 for x in lat if x > 1.0)}, next_id


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--db", required=True)
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--k", type=int, default=100)
    ap.add_argument("--search-list", type=int, default=200)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--idle-s", type=float, default=120)
    ap.add_argument("--warmup-s", type=float, default=0,
                    help="search this long before the idle phase, uncounted (fills the node cache)")
    ap.add_argument("--idle-after-s", type=float, default=0,
                    help="search this long again without writes once the last rate is green")
    ap.add_argument("--duration-s", type=float, default=600)
    ap.add_argument("--rates", default="500,5000", help='points/s, comma-separated ("": search only)')
    ap.add_argument("--green-timeout", type=float, default=3600)
    ap.add_argument("--new-from", help="dataset whose train rows are written (default: random unit vectors)")
    ap.add_argument("--new-offset", type=int, default=0, help="first row of --new-from written")
    ap.add_argument("--monitor-s", type=float, default=0,
                    help="every this many seconds, one line of the collection's state on stderr (0: off)")
    args = ap.parse_args()

    queries, truth = load_queries(args.dataset, args.k)
    t = time.time()
    db = diskvec.open(args.db)
    col = db.collection("c")
    out = {"args": vars(args), "open_seconds": round(time.time() - t, 1), "points_at_start": col.info()["points"]}
    out["green_at_start_after_s"] = wait_green(col, args.green_timeout)
    s = Searchers(col, queries, truth, args)
    stop_monitor = threading.Event()
    if args.monitor_s > 0:
        threading.Thread(target=monitor, args=(col, args.monitor_s, stop_monitor), daemon=True).start()
    threads = [threading.Thread(target=s.run, args=(i,), daemon=True) for i in range(args.clients)]
    # The first searches of a freshly opened collection fill its node cache from the
    # device: a warm-up phase keeps them out of the idle figures.
    s.phase = "warm-up" if args.warmup_s > 0 else "idle"
    for th in threads:
        th.start()
    if args.warmup_s > 0:
        time.sleep(args.warmup_s)
        out["warm-up"] = s.summary("warm-up")
        s.phase = "idle"
    time.sleep(args.idle_s)
    out["idle"] = s.summary("idle")
    out["idle"]["search_memory"] = col.info()["search_memory"]
    print(json.dumps({"idle": out["idle"]}), flush=True)
    # Ids follow the rows written: a later run from a further --new-offset adds new points
    # instead of overwriting the last run's.
    next_id = NEW_IDS_FROM + args.new_offset
    points = DatasetPoints(args.new_from, args.new_offset) if args.new_from else RandomPoints(queries.shape[1], 100)
    for i, rate in enumerate(float(r) for r in args.rates.split(",") if r):
        phase = f"writing {rate:g}/s"
        s.phase = phase
        writes, next_id = write_at(col, rate, args.duration_s, next_id, points)
        s.phase = f"after {rate:g}/s"
        result = {"searches": s.summary(phase), "writes": writes}
        if isinstance(points, DatasetPoints):
            result["rows_written_again"] = points.reused
        # Before the wait for green, which can take long: what a run stopped then leaves.
        print(json.dumps({phase: result}), flush=True)
        result["green_after_s"] = wait_green(col, args.green_timeout)
        result["searches_until_green"] = s.summary(s.phase)
        if result["searches"]:
            result["searches"]["search_memory"] = col.info()["search_memory"]
        info = col.info()
        result["segments_after"] = [(x["kind"], x["points"]) for x in info["segments"]]
        out[phase] = result
        print(json.dumps({phase: result}), flush=True)
    if args.idle_after_s > 0:
        # Idle again on the collection the writes left (more points, more segments).
        s.phase = "idle after"
        time.sleep(args.idle_after_s)
        out["idle after"] = s.summary("idle after")
        print(json.dumps({"idle after": out["idle after"]}), flush=True)
    s.stop = True
    stop_monitor.set()
    for th in threads:
        th.join()
    db.close()
    Path(args.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
