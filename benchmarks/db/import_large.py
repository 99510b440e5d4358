#!/usr/bin/env python3
"""A large set (e.g. the synthetic 10M x 768 float16 one) loaded into diskvec's database through
the Python API or through HTTP (qdrant-client `upload_points`), batches of 1,000, each point
with a small payload, until the collection is green; what a load costs, measured.

  python import_large.py --api python --dataset DIR --db DIR --out OUT.json [--limit N]
  python import_large.py --api http --bin target/release/diskvec --dataset DIR --db DIR --out OUT.json

Run it inside a memory cgroup (page cache counts) to hold the load to a budget: this script
only reads the cgroup it finds itself in (v1 `memory.max_usage_in_bytes`). With `--api http`
the server runs as a child in the same cgroup and the client's memory counts too.

Recorded: acknowledged points/s, write-call latency p50/p99/max per batch (each call returns
once its log record is on stable storage: durability "sync"), time to green after the last
write, load duration (both together), the cgroup's peak, disk bytes of the database at their
peak (sampled every 5 s) and at rest, the segments at the end. Progress goes to stderr, a
sample line a minute to OUT.samples (with the collection's own view), each batch's latency
to OUT.latencies. Synthetic data: say so wherever the numbers go.
"""
import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import dir_bytes, proc_status_kib  # noqa: E402

BATCH = 1000


def cgroup_dir():
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and "memory" in parts[1].split(","):
            d = Path("/sys/fs/cgroup/memory") / parts[2].lstrip("/")
            if (d / "memory.usage_in_bytes").exists():
                return d
    return None


def read_int(path, default=0):
    try:
        return int(Path(path).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return default


class Sampler(threading.Thread):
    """Every 5 s: the database's disk bytes and the cgroup's usage; their peaks kept."""

    def __init__(self, db_dir, samples_path, every=60):
        super().__init__(daemon=True)
        self.every = every
        self.probe = None  # () -> dict of the database's own view, added to each sample line
        self.db_dir, self.cg = db_dir, cgroup_dir()
        self.samples = open(samples_path, "w")
        self.disk_peak = 0
        self.stop = threading.Event()
        self.progress = "starting"

    def run(self):
        last_line = 0.0
        while not self.stop.wait(5):
            disk = dir_bytes(self.db_dir)
            self.disk_peak = max(self.disk_peak, disk)
            usage = read_int(self.cg / "memory.usage_in_bytes") if self.cg else 0
            if time.time() - last_line >= self.every:
                last_line = time.time()
                line = {"t": round(time.time()), "disk": disk, "cgroup_usage": usage,
                        "cgroup_peak": read_int(self.cg / "memory.max_usage_in_bytes") if self.cg else 0,
                        "rss": rss(), "progress": self.progress}
                if self.probe is not None:
                    try:
                        line["db"] = self.probe()
                    except Exception as e:  # the probe is a view, never a reason to stop
                        line["db"] = repr(e)
                self.samples.write(json.dumps(line) + "\n")
                self.samples.flush()


def rss():
    return (proc_status_kib("VmRSS:") or 0) * 1024


def batches(dataset, limit, start=0):
    """(ids, float32 vectors) in batches of BATCH from row `start` on, streamed from
    train.parquet, decoded up to four batches ahead by a thread of their own (the decoding
    releases the GIL)."""
    import queue
    ahead = queue.Queue(maxsize=4)

    def decode():
        # pre_buffer off: with it, pyarrow kept every range it had read (1.4 KB a row, until
        # the process was OOM-killed at 1.2M rows in 4 GiB).
        f = pq.ParquetFile(Path(dataset) / "train.parquet", pre_buffer=False)
        per_group = f.metadata.row_group(0).num_rows
        first_group, skip = divmod(start, per_group)
        done = start
        try:
            for rb in f.iter_batches(batch_size=BATCH, columns=["id", "emb"],
                                     row_groups=range(first_group, f.num_row_groups)):
                if skip:
                    cut, skip = min(skip, rb.num_rows), skip - min(skip, rb.num_rows)
                    rb = rb.slice(cut)
                    if rb.num_rows == 0:
                        continue
                ids = rb.column(0).to_numpy()
                emb = rb.column(1).flatten().to_numpy(zero_copy_only=False)
                vectors = emb.reshape(len(ids), -1).astype(np.float32)
                if limit is not None and done + len(ids) > limit:
                    keep = limit - done
                    ids, vectors = ids[:keep], vectors[:keep]
                ahead.put((ids, vectors))
                done += len(ids)
                if limit is not None and done >= limit:
                    break
        finally:
            ahead.put(None)

    threading.Thread(target=decode, daemon=True).start()
    while (item := ahead.get()) is not None:
        yield item


def check_acknowledged(dataset, acked, count, fetch):
    """Every acknowledged point there (after kills): the collection's exact `count` against
    `acked`, 500 sampled ids fetched (`fetch(ids)` -> {id: vector}), 50 of their vectors
    against the dataset's rows (normalized for cosine; float16 as stored)."""
    sample = np.sort(np.random.default_rng(7).choice(acked, 500, replace=False))
    got = fetch([int(i) for i in sample])
    missing = [int(i) for i in sample if int(i) not in got]
    f = pq.ParquetFile(f"{dataset}/train.parquet", pre_buffer=False)
    per_group = f.metadata.row_group(0).num_rows
    worst = 0.0
    for i in (int(i) for i in sample[:50] if int(i) in got):
        g, r = divmod(i, per_group)
        emb = f.read_row_group(g, columns=["emb"]).column(0)[r].values.to_numpy(
            zero_copy_only=False).astype(np.float32)
        worst = max(worst, float(np.abs(np.asarray(got[i]) - emb / np.linalg.norm(emb)).max()))
    return {"ok": count >= acked and not missing and worst < 1e-3, "count": count, "acknowledged": acked,
            "sample_missing": missing, "max_abs_diff_of_50_vectors": worst}


def payload(i):
    i = int(i)
    return {"n": i, "bucket": i % 100, "tag": f"t{i % 7}"}


class PythonApi:
    def __init__(self, args, dim):
        import diskvec
        self.db = diskvec.open(args.db)
        self.col = self.db.create_collection("c", dim=dim, metric="cosine", datatype=args.datatype,
                                             on_disk_payload=True)

    def write(self, ids, vectors):
        self.col.upsert(ids, vectors, [payload(i) for i in ids])

    def info(self):
        i = self.col.info()
        return i["status"], i["points"], [(s["kind"], s["points"]) for s in i["segments"]]

    def probe(self):
        i = self.col.info()
        keep = {k: i.get(k) for k in ("status", "tasks", "wal_bytes", "search_memory")}
        keep["segments"] = [(s["kind"], s["points"], s.get("dram_bytes")) for s in i["segments"]]
        return keep

    def close(self):
        self.db.close()


class HttpApi:
    def __init__(self, args, dim):
        from qdrant_client import QdrantClient, models
        self.models, self.args = models, args
        self.server_log = open(args.out + ".server.log", "a")
        self.kills = []  # (points acknowledged, seconds until the server answered again)
        self.killed = threading.Event()  # set once a kill this driver sent has landed
        self.kill_pending = None  # the acknowledged count at which it was sent
        self.start_server()
        self.client = QdrantClient(url=f"http://127.0.0.1:{args.port}", timeout=600, prefer_grpc=False)
        self.wait_ready()
        if args.resume_at:
            return
        self.client.create_collection("c", vectors_config=models.VectorParams(
            size=dim, distance=models.Distance.COSINE, datatype=models.Datatype(args.datatype),
            on_disk=True), on_disk_payload=True)

    def start_server(self):
        self.server = subprocess.Popen([self.args.bin, "serve", "--db", self.args.db, "--port", str(self.args.port)],
                                       stdout=subprocess.DEVNULL, stderr=self.server_log)

    def wait_ready(self):
        for _ in range(6000):
            try:
                self.client.get_collections()
                return
            except Exception:
                if self.server.poll() is not None and self.server.returncode != -9:
                    raise SystemExit(f"the server exited with {self.server.returncode}")
                time.sleep(0.1)
        raise SystemExit("the server did not answer within 600 s")

    def kill_soon(self, acked):
        """SIGKILL the server after a random delay of up to 400 ms, while writes (and whatever
        seal or merge is running) go on; the write that fails is sent again after the restart."""
        delay = np.random.default_rng(acked).uniform(0, 0.4)

        def kill():
            time.sleep(delay)
            self.server.kill()
            self.killed.set()
        self.killed.clear()
        threading.Thread(target=kill, daemon=True).start()
        self.kill_pending = acked

    def write(self, ids, vectors):
        m = self.models
        batch = m.Batch(ids=[int(i) for i in ids], vectors=vectors.tolist(), payloads=[payload(i) for i in ids])
        while True:
            try:
                self.client.upsert("c", wait=True, points=batch)
                return
            except Exception:
                # The connection closes a moment before the killed process can be reaped:
                # wait for it when a kill was sent, or give up when none was.
                if not self.killed.is_set() and self.server.poll() is None:
                    raise
                self.killed.clear()
                t = time.time()
                self.server.wait()
                self.start_server()
                self.wait_ready()
                self.kills.append({"acknowledged_before": self.kill_pending,
                                   "answering_again_seconds": round(time.time() - t, 1)})
                print(f"{time.strftime('%T')} server killed, answering again after "
                      f"{self.kills[-1]['answering_again_seconds']} s", file=sys.stderr, flush=True)

    def check(self, dataset, acked):
        def fetch(ids):
            return {p.id: p.vector for p in self.client.retrieve("c", ids, with_vectors=True)}
        return check_acknowledged(dataset, acked, self.client.count("c", exact=True).count, fetch)

    def info(self):
        i = self.client.http.collections_api.get_collection("c").result
        segs = i.segments_count
        return str(i.status.value), i.points_count, segs

    def close(self):
        self.server.terminate()
        self.server.wait(120)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--api", choices=["python", "http"], required=True)
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--db", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--limit", type=int)
    ap.add_argument("--datatype", default="float16")
    ap.add_argument("--bin", default="target/release/diskvec")
    ap.add_argument("--port", type=int, default=6433)
    ap.add_argument("--green-timeout", type=float, default=7200)
    ap.add_argument("--sample-every", type=float, default=60, help="seconds between sample lines")
    ap.add_argument("--resume-at", type=int, default=0, help="the collection already holds the "
                    "dataset's first N rows (a load stopped there): send the rest")
    ap.add_argument("--kill-at", default="", help="HTTP only: comma-separated acknowledged counts at "
                    "which the server is SIGKILLed mid-write and started again; every acknowledged "
                    "point is checked at the end")
    args = ap.parse_args()
    meta = json.loads((Path(args.dataset) / "synthetic.json").read_text()) \
        if (Path(args.dataset) / "synthetic.json").exists() else {}
    n = min(args.limit or meta.get("n", 0), meta.get("n", 1 << 62))
    os.makedirs(args.db, exist_ok=True)
    sampler = Sampler(args.db, args.out + ".samples", args.sample_every)
    sampler.start()
    first = next(batches(args.dataset, 1, 0))
    api = (PythonApi if args.api == "python" else HttpApi)(args, first[1].shape[1])
    sampler.probe = getattr(api, "probe", None)
    lat = []
    done = 0
    start = time.time()
    last_report = start
    # One line a batch (seconds since the start, points acknowledged, milliseconds), flushed
    # every 30 s: what a run that is killed leaves of its write latencies.
    lat_file = open(args.out + ".latencies", "w")
    kill_at = sorted(int(k) for k in args.kill_at.split(",") if k)
    if kill_at and args.api != "http":
        raise SystemExit("--kill-at needs --api http (the Python API lives in this process)")
    done = args.resume_at
    for ids, vectors in batches(args.dataset, args.limit, args.resume_at):
        if kill_at and done >= kill_at[0]:
            kill_at.pop(0)
            api.kill_soon(done)
        t = time.perf_counter()
        api.write(ids, vectors)
        lat.append(time.perf_counter() - t)
        done += len(ids)
        lat_file.write(f"{time.time() - start:.1f} {done} {lat[-1] * 1000:.1f}\n")
        sampler.progress = f"ingest {done}"
        if time.time() - last_report >= 30:
            last_report = time.time()
            lat_file.flush()
            rate = (done - args.resume_at) / (last_report - start)
            print(f"{time.strftime('%T')} {done:,} acknowledged, {rate:,.0f}/s overall, last batch "
                  f"{lat[-1] * 1000:.0f} ms", file=sys.stderr, flush=True)
    ingest = time.time() - start
    lat_file.close()
    status = None
    while time.time() - start < ingest + args.green_timeout:
        status, points, segments = api.info()
        sampler.progress = f"waiting for green: {status}, {segments}"
        if status == "green":
            break
        time.sleep(5)
    load = time.time() - start
    status, points, segments = api.info()
    check = api.check(args.dataset, done) if args.api == "http" else None
    api.close()
    sampler.stop.set()
    sampler.join()
    cg = sampler.cg
    lat_ms = np.array(lat) * 1000
    out = {
        "api": args.api, "dataset": args.dataset, "synthetic": bool(meta), "points": done,
        "batch": BATCH, "datatype": args.datatype, "durability": "sync",
        "resumed_at": args.resume_at, "ingest_seconds": round(ingest, 1),
        "acked_points_per_second": round((done - args.resume_at) / ingest, 1),
        "write_ms": {"p50": round(float(np.percentile(lat_ms, 50)), 1),
                     "p99": round(float(np.percentile(lat_ms, 99)), 1),
                     "max": round(float(lat_ms.max()), 1),
                     "over_1s": int((lat_ms > 1000).sum())},
        "green": status == "green", "status": status, "points_at_end": points, "segments": segments,
        "green_after_ingest_seconds": round(load - ingest, 1), "load_duration_seconds": round(load, 1),
        "cgroup": str(cg) if cg else None,
        "cgroup_limit": read_int(cg / "memory.limit_in_bytes") if cg else None,
        "cgroup_max_usage": read_int(cg / "memory.max_usage_in_bytes") if cg else None,
        "cgroup_failcnt": read_int(cg / "memory.failcnt") if cg else None,
        "disk_peak_bytes": sampler.disk_peak, "disk_at_rest_bytes": dir_bytes(args.db),
        "expected_points": n,
        "kills": getattr(api, "kills", []), "acknowledged_check": check,
    }
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
