#!/usr/bin/env python3
"""Mixed workload: search latency and QPS while upserts arrive at a fixed rate, before and
during a seal (the growing segment turning into a DiskANN segment in the background).

Protocol (one process, diskvec's Python API):
1. base: the first BASE points of the dataset, upserted and optimized into a sealed segment;
2. idle: SEARCHERS threads search for IDLE_S seconds, nothing else runs;
3. mixed: a writer upserts the next points at RATE points/s (batches of BATCH, durable
   acknowledgement), the searchers keep searching; the growing segment passes the seal
   threshold and a seal runs beside both. Every search is tagged with the collection's state
   when it started: "writes" (growing segment filling) or "sealing" (status yellow);
4. after: the seal is done, writes continue until the points run out or MAX_S passes.
Queries are the dataset's test queries; recall@10 is against exact search over the points
acknowledged before the query started (numpy, after the run).

    python benchmarks/db/mixed.py --dataset ../shared/datasets/wordnet-minilm384-50k --out OUT.json
"""
import argparse
import json
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

import diskvec


def load(dataset):
    d = Path(dataset)
    train = np.array(pq.read_table(d / "train.parquet").column("emb").to_pylist(), dtype=np.float32)
    test = np.array(pq.read_table(d / "test.parquet").column("emb").to_pylist(), dtype=np.float32)
    return train, test


def pct(values, p):
    return float(np.percentile(values, p)) if len(values) else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--db", default="/tmp/diskvec-mixed")
    ap.add_argument("--out", required=True)
    ap.add_argument("--base", type=int, default=20000)
    ap.add_argument("--rate", type=float, default=500.0)
    ap.add_argument("--batch", type=int, default=50)
    ap.add_argument("--seal-threshold", type=int, default=10000)
    ap.add_argument("--searchers", type=int, default=2)
    ap.add_argument("--search-list", type=int, default=50)
    ap.add_argument("--idle-s", type=float, default=15.0)
    ap.add_argument("--max-s", type=float, default=90.0)
    a = ap.parse_args()

    train, test = load(a.dataset)
    import shutil
    shutil.rmtree(a.db, ignore_errors=True)
    db = diskvec.open(a.db)
    col = db.create_collection("c", dim=train.shape[1], metric="cosine", seal_threshold=a.seal_threshold)
    t0 = time.perf_counter()
    for lo in range(0, a.base, 1000):
        col.upsert(list(range(lo, min(lo + 1000, a.base))), train[lo:min(lo + 1000, a.base)])
    col.optimize(wait=True)
    print(f"base: {a.base} points sealed in {time.perf_counter() - t0:.1f} s", flush=True)

    acked = [a.base]  # points acknowledged so far (ids 0..acked[0])
    phase = ["idle"]
    stop = threading.Event()
    searches = []  # (phase, start, latency_s, query index, acked at start, ids)
    lock = threading.Lock()

    def searcher(seed):
        rng = np.random.default_rng(seed)
        while not stop.is_set():
            qi = int(rng.integers(len(test)))
            before = acked[0]
            ph = phase[0]
            s = time.perf_counter()
            hits = col.search(test[qi], k=10, search_list=a.search_list)
            lat = time.perf_counter() - s
            with lock:
                searches.append((ph, s, lat, qi, before, [h["id"] for h in hits]))

    writes = []  # (start, latency_s, points)

    def writer():
        nxt = a.base
        interval = a.batch / a.rate
        due = time.perf_counter()
        while not stop.is_set() and nxt < len(train):
            now = time.perf_counter()
            if now < due:
                time.sleep(due - now)
            hi = min(nxt + a.batch, len(train))
            s = time.perf_counter()
            col.upsert(list(range(nxt, hi)), train[nxt:hi])
            writes.append((s, time.perf_counter() - s, hi - nxt))
            nxt = hi
            acked[0] = nxt
            due += interval

    threads = [threading.Thread(target=searcher, args=(i,)) for i in range(a.searchers)]
    for t in threads:
        t.start()
    time.sleep(a.idle_s)
    phase[0] = "writes"
    w = threading.Thread(target=writer)
    w.start()
    started = time.perf_counter()
    seals_before = col.info()["seals_done"]
    timeline = []
    while time.perf_counter() - started < a.max_s and w.is_alive():
        info = col.info()
        if info["seals_done"] > seals_before and info["status"] == "green":
            phase[0] = "after"
        elif info["status"] == "yellow":
            phase[0] = "sealing"
        elif phase[0] == "sealing":
            phase[0] = "after"
        timeline.append((time.perf_counter() - started, info["status"], info["points"]))
        time.sleep(0.1)
    stop.set()
    w.join()
    for t in threads:
        t.join()
    info = col.info()
    db.close()

    # Recall@10 against exact search over the points acknowledged before each query.
    norm = train / np.linalg.norm(train, axis=1, keepdims=True)
    qn = test / np.linalg.norm(test, axis=1, keepdims=True)
    sample = searches[:: max(1, len(searches) // 3000)]
    rec = {}
    for ph, _, _, qi, before, ids in sample:
        sims = norm[:before] @ qn[qi]
        truth = set(np.argpartition(-sims, 10)[:10].tolist())
        rec.setdefault(ph, []).append(len(truth & set(ids)) / 10)

    rows = {}
    for ph in ("idle", "writes", "sealing", "after"):
        lat = [x[2] for x in searches if x[0] == ph]
        if not lat:
            continue
        span = max(x[1] + x[2] for x in searches if x[0] == ph) - min(x[1] for x in searches if x[0] == ph)
        rows[ph] = {"searches": len(lat), "qps": len(lat) / span, "p50_ms": 1e3 * pct(lat, 50),
                    "p99_ms": 1e3 * pct(lat, 99), "recall@10": float(np.mean(rec.get(ph, [np.nan])))}
    wl = [x[1] for x in writes]
    wspan = (writes[-1][0] + writes[-1][1] - writes[0][0]) if writes else 0
    out = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S"), "dataset": Path(a.dataset).name,
        "settings": vars(a), "phases": rows,
        "upserts": {"batches": len(writes), "points": sum(x[2] for x in writes),
                    "points_per_s": sum(x[2] for x in writes) / wspan if wspan else None,
                    "p50_ms": 1e3 * pct(wl, 50), "p99_ms": 1e3 * pct(wl, 99)},
        "seals_done": info["seals_done"], "final_points": info["points"],
        "timeline": timeline[:: max(1, len(timeline) // 100)],
    }
    Path(a.out).write_text(json.dumps(out, indent=1))
    for ph, r in rows.items():
        print(f"{ph:8s} {r['searches']:6d} searches {r['qps']:7.0f} QPS  p50 {r['p50_ms']:6.2f} ms  "
              f"p99 {r['p99_ms']:6.2f} ms  recall@10 {r['recall@10']:.3f}")
    u = out["upserts"]
    print(f"upserts: {u['points']} points at {u['points_per_s']:.0f}/s, batch p50 {u['p50_ms']:.1f} ms "
          f"p99 {u['p99_ms']:.1f} ms; seals {info['seals_done']}")


if __name__ == "__main__":
    main()
