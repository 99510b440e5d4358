#!/usr/bin/env python3
"""Load test of `diskvec serve` (issue 10): closed-loop clients over Qdrant's REST API, then a
SIGKILL under load and a check that every acknowledged upsert survived the restart.

Phases:
1. start `BINARY serve --db FRESH_DIR --port 0` on 127.0.0.1 (the free port is read from its log);
2. create a Cosine collection and preload the first --preload rows of train.parquet (batches of
   --batch, upsert wait=true), then wait (bounded) for the collection to turn green (seals done);
3. load: --clients closed-loop asyncio clients on keep-alive connections for --duration s; each
   request is a search (test.parquet queries, limit 10, optional hnsw_ef) or, with probability
   --upsert-frac, an upsert of 1..--upsert-max new points (wait=true, unique ids, a payload).
   The rest of train.parquet is upserted first, then new ids with perturbed vectors. Each request
   records start, latency, kind, HTTP status, server time and error text; the server's RSS and
   CPU are sampled every second;
4. kill (unless --no-kill): at --kill-at s (default: the end of --duration), with the clients at
   full speed, the server gets SIGKILL; the clients stop; the server is restarted on the same DB
   dir; once /readyz answers, every acknowledged id (the preload and each upsert answered 200 /
   status ok) is retrieved with its vector and compared (both normalized, float32 tolerance).
   Upserts in flight at the kill (no answer) may be present or absent: both are counted, and a
   present one must carry the vector that was sent.
   --self-check deletes one acknowledged id and overwrites another's vector before the check,
   to show the checker catches loss and corruption (the run then fails, as it should).

Writes OUT/results.json, OUT/load.png, OUT/requests.npz (every request), OUT/server*.log and
prints a markdown summary. Exit code 1 if any request failed, or an acknowledged write is
missing or different after the restart (or the server did not come back).

    /work/bench/load/venv/bin/python benchmarks/server/load.py /work/bench/bin/diskvec-3df6048 \
        --duration 600 --out /work/bench/load/results/full
"""
import argparse
import asyncio
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import aiohttp
import numpy as np
import pyarrow.parquet as pq

DEFAULT_DATASET = "/work/shared/datasets/wordnet-minilm384-50k"
COLLECTION = "load"
NEW_ID_BASE = 10_000_000  # ids of perturbed points, once the dataset's rows run out
CLK_TCK = os.sysconf("SC_CLK_TCK")
SEARCH, UPSERT = 0, 1


# ----------------------------------------------------------------------------- server process

class Server:
    """`diskvec serve` as a child process; its stderr is copied to a log file by a thread (so
    the pipe never fills and blocks the server)."""

    def __init__(self, binary, db, log_path, api_key=None):
        self.binary, self.db, self.log_path, self.api_key = binary, db, log_path, api_key
        self.proc = None
        self.port = None

    def start(self, timeout=120.0):
        cmd = [str(self.binary), "serve", "--db", str(self.db), "--host", "127.0.0.1", "--port", "0"]
        if self.api_key:
            cmd += ["--api-key", self.api_key]
        t0 = time.monotonic()
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
        found = threading.Event()
        log = open(self.log_path, "a", buffering=1)

        def pump():
            for line in self.proc.stderr:
                log.write(line)
                if self.port is None:
                    m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
                    if m:
                        self.port = int(m.group(1))
                        found.set()
            log.close()
            found.set()

        self.port = None
        threading.Thread(target=pump, daemon=True).start()
        found.wait(timeout)
        if self.port is None:
            self.proc.kill()
            self.proc.wait()
            tail = Path(self.log_path).read_text()[-2000:]
            raise RuntimeError(f"server did not start within {timeout} s:\n{tail}")
        return time.monotonic() - t0

    @property
    def pid(self):
        return self.proc.pid

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        return self.proc.wait(timeout=60)

    def stop(self, timeout=120.0):
        """SIGTERM (graceful: the server finishes requests and closes the DB); its exit code."""
        if self.proc.poll() is not None:
            return self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return "killed after SIGTERM timeout"


# ----------------------------------------------------------------------------- helpers

def load_vectors(path):
    t = pq.read_table(path, columns=["id", "emb"])
    ids = t.column("id").to_numpy()
    emb = t.column("emb").combine_chunks()
    vecs = emb.values.to_numpy(zero_copy_only=False).astype(np.float32).reshape(len(ids), -1)
    return ids.astype(np.int64), vecs


def normalized(a):
    a = np.asarray(a, dtype=np.float32)
    n = np.linalg.norm(a, axis=-1, keepdims=True)
    return a / np.where(n == 0, 1, n)


def pct(values, p):
    return float(np.percentile(values, p)) if len(values) else None


async def call(session, method, url, body=None, timeout=60.0):
    """A setup/check call that must succeed: the parsed result."""
    data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
    async with session.request(method, url, data=data,
                               timeout=aiohttp.ClientTimeout(total=timeout)) as r:
        raw = await r.read()
        if r.status != 200:
            raise RuntimeError(f"{method} {url}: HTTP {r.status}: {raw[:300]!r}")
        js = json.loads(raw)
        if js.get("status") != "ok":
            raise RuntimeError(f"{method} {url}: {raw[:300]!r}")
        return js["result"]


async def wait_ready(session, url, timeout):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        try:
            async with session.get(url + "/readyz", timeout=aiohttp.ClientTimeout(total=5)) as r:
                await r.read()
                if r.status == 200:
                    return time.monotonic() - t0
        except (aiohttp.ClientError, asyncio.TimeoutError):
            pass
        await asyncio.sleep(0.05)
    raise RuntimeError(f"{url}/readyz not ready within {timeout} s")


def proc_sample(pid):
    """RSS (bytes), CPU ticks (user+system), threads, open fds of a process; None when gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        stat = Path(f"/proc/{pid}/stat").read_text()
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    rss = int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1)) * 1024
    hwm = int(re.search(r"VmHWM:\s+(\d+) kB", status).group(1)) * 1024
    threads = int(re.search(r"Threads:\s+(\d+)", status).group(1))
    f = stat[stat.rindex(")") + 2:].split()
    ticks = int(f[11]) + int(f[12])  # utime, stime (fields 14, 15)
    return rss, hwm, ticks, threads, fds


def system_cpu():
    """(busy, iowait, total) jiffies of the whole machine."""
    f = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle, iowait = f[3], f[4]
    total = sum(f[:8])
    return total - idle - iowait, iowait, total


def dir_bytes(path):
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.stat(os.path.join(root, f)).st_size
            except FileNotFoundError:
                pass
    return total


# ----------------------------------------------------------------------------- the load phase

class Load:
    def __init__(self, args, server, train_ids, train, queries):
        self.args = args
        self.server = server
        self.train_ids, self.train = train_ids, train
        self.queries = queries
        self.next_row = args.preload          # next dataset row to upsert
        self.next_new_id = NEW_ID_BASE        # then perturbed points under new ids
        self.rng = np.random.default_rng(args.seed)
        # Every request: start (s since load start), latency (s), kind, HTTP status (0: none),
        # server-reported time (s, nan if none), error index (-1: none), interrupted by the kill.
        self.start, self.lat, self.kind, self.status = [], [], [], []
        self.server_time, self.err, self.interrupted = [], [], []
        self.short_results = 0
        self.errors = {}                      # error text -> index
        self.pending = {}                     # upserts without an answer yet: key -> (ids, vecs)
        self.acked = []                       # (ids, vecs) of upserts answered 200 / status ok
        self.failed_upserts = []              # (ids, vecs) answered otherwise (state unknown)
        self.cut_upserts = []                 # (ids, vecs) without an answer because of the kill
        self.samples = []                     # per-second server/client samples
        self.stop = asyncio.Event()
        self.kill_time = None                 # s since load start
        self.crashed = None                   # (s since load start, exit code) if the server died by itself
        self.t0 = None
        # Search bodies are serialized once (the client must stay cheap).
        params = {"hnsw_ef": args.hnsw_ef} if args.hnsw_ef else None
        self.search_bodies = []
        for q in queries:
            b = {"vector": q.tolist(), "limit": args.limit}
            if params:
                b["params"] = params
            self.search_bodies.append(json.dumps(b).encode())

    def new_points(self, n):
        if self.next_row < len(self.train):
            rows = range(self.next_row, min(self.next_row + n, len(self.train)))
            self.next_row = rows.stop
            return self.train_ids[rows.start:rows.stop].copy(), self.train[rows.start:rows.stop].copy()
        base = self.train[self.rng.integers(0, len(self.train), n)]
        vecs = (base + self.rng.normal(0, 0.02, base.shape)).astype(np.float32)
        ids = np.arange(self.next_new_id, self.next_new_id + n, dtype=np.int64)
        self.next_new_id += n
        return ids, vecs

    def record(self, t_start, t_end, kind, status, stime, err):
        self.start.append(t_start - self.t0)
        self.lat.append(t_end - t_start)
        self.kind.append(kind)
        self.status.append(status)
        self.server_time.append(stime)
        interrupted = err is not None and status == 0 and self.kill_time is not None
        self.interrupted.append(interrupted)
        if err is None:
            self.err.append(-1)
        else:
            self.err.append(self.errors.setdefault(err, len(self.errors)))
        return interrupted

    async def request(self, session, method, url, body, kind):
        """One timed request: (ok, parsed result or None)."""
        t_start = time.monotonic()
        status, stime, err, result = 0, float("nan"), None, None
        try:
            async with session.request(method, url, data=body, timeout=self.timeout) as r:
                status = r.status
                raw = await r.read()
            if status == 200:
                js = json.loads(raw)
                if js.get("status") == "ok":
                    result = js.get("result")
                    stime = float(js.get("time", float("nan")))
                else:
                    err = f"HTTP 200 with status {js.get('status')!r}"
            else:
                err = f"HTTP {status}: {raw[:200].decode(errors='replace')}"
        except asyncio.TimeoutError:
            err = f"timeout after {self.args.request_timeout} s"
        except aiohttp.ClientError as e:
            err = f"{type(e).__name__}: {str(e)[:200]}"
        except ValueError as e:
            err = f"bad JSON answer: {str(e)[:200]}"
        interrupted = self.record(t_start, time.monotonic(), kind, status, stime, err)
        return err is None, result, interrupted

    async def client(self, cid, session, deadline):
        rng = random.Random(self.args.seed * 1000 + cid)
        base = self.server.url + f"/collections/{COLLECTION}/points"
        search_url, upsert_url = base + "/search", base + "?wait=true"
        n = 0
        while not self.stop.is_set() and time.monotonic() < deadline and n < self.args.max_requests:
            n += 1
            if rng.random() < self.args.upsert_frac:
                ids, vecs = self.new_points(rng.randint(1, self.args.upsert_max))
                pts = [{"id": int(i), "vector": v.tolist(),
                        "payload": {"source": "load", "client": cid, "seq": n, "row_id": int(i)}}
                       for i, v in zip(ids, vecs)]
                key = object()
                self.pending[key] = (ids, vecs)
                ok, _, cut = await self.request(session, "PUT", upsert_url,
                                                json.dumps({"points": pts}).encode(), UPSERT)
                del self.pending[key]
                (self.acked if ok else self.cut_upserts if cut else self.failed_upserts).append((ids, vecs))
                if not ok and not cut:
                    await asyncio.sleep(0.05)  # no busy loop against a failing server
            else:
                body = self.search_bodies[rng.randrange(len(self.search_bodies))]
                ok, result, _ = await self.request(session, "POST", search_url, body, SEARCH)
                if ok and (not isinstance(result, list) or len(result) != self.args.limit):
                    self.short_results += 1
                if not ok:
                    await asyncio.sleep(0.05)

    async def sampler(self):
        pid = self.server.pid
        prev = None
        last_du = -1e9
        db_bytes = None
        while not self.stop.is_set():
            now = time.monotonic()
            if self.server.proc.poll() is not None and self.kill_time is None:
                self.crashed = (now - self.t0, self.server.proc.returncode)
                print(f"the server exited by itself at {self.crashed[0]:.1f} s, code {self.crashed[1]}",
                      file=sys.stderr)
                self.stop.set()
                break
            s = proc_sample(pid)
            ct = os.times()
            client_cpu = ct.user + ct.system
            sysc = system_cpu()
            if now - last_du >= 10:
                db_bytes = dir_bytes(self.args.db)
                last_du = now
            if s is not None:
                rss, hwm, ticks, threads, fds = s
                row = {"t": now - self.t0, "rss": rss, "hwm": hwm, "threads": threads, "fds": fds,
                       "db_bytes": db_bytes, "server_cpu": None, "client_cpu": None, "lag": None,
                       "machine_busy": None, "machine_iowait": None}
                if prev is not None:
                    dt = now - prev[0]
                    row["server_cpu"] = 100 * (ticks - prev[1]) / CLK_TCK / dt
                    row["client_cpu"] = 100 * (client_cpu - prev[2]) / dt
                    row["lag"] = dt - 1.0   # how late the sampler woke (event loop busy)
                    dtot = max(1, sysc[2] - prev[3][2])
                    ncpu = os.cpu_count() or 1
                    row["machine_busy"] = 100 * ncpu * (sysc[0] - prev[3][0]) / dtot
                    row["machine_iowait"] = 100 * ncpu * (sysc[1] - prev[3][1]) / dtot
                self.samples.append(row)
                prev = (now, ticks, client_cpu, sysc)
            try:
                await asyncio.wait_for(self.stop.wait(), timeout=max(0.0, 1.0 - (time.monotonic() - now)))
            except asyncio.TimeoutError:
                pass

    async def killer(self, at):
        try:
            await asyncio.wait_for(self.stop.wait(), timeout=max(0.0, at - (time.monotonic() - self.t0)))
            return  # the load ended first
        except asyncio.TimeoutError:
            pass
        # No await between these: no client can start a request after the kill.
        self.kill_time = time.monotonic() - self.t0
        self.in_flight_at_kill = len(self.pending)
        os.kill(self.server.pid, signal.SIGKILL)
        self.stop.set()

    async def run(self, session):
        a = self.args
        self.timeout = aiohttp.ClientTimeout(total=a.request_timeout)
        self.t0 = time.monotonic()
        deadline = self.t0 + a.duration
        if not a.no_kill:
            # The killer stops the clients; they must still be at full speed when it fires.
            deadline = self.t0 + a.kill_at + a.request_timeout + 5
        tasks = [asyncio.create_task(self.client(i, session, deadline)) for i in range(a.clients)]
        sampler = asyncio.create_task(self.sampler())
        killer = asyncio.create_task(self.killer(a.kill_at)) if not a.no_kill else None
        # Hard bound: the duration plus one request timeout plus slack.
        bound = (a.duration if a.no_kill else a.kill_at) + 2 * a.request_timeout + 30
        done, not_done = await asyncio.wait(tasks, timeout=bound)
        for t in not_done:
            t.cancel()
        self.hung_clients = len(not_done)
        for t in done:
            if t.exception() is not None:
                raise t.exception()
        self.stop.set()
        if killer:
            await killer
        await sampler
        self.elapsed = time.monotonic() - self.t0


# ----------------------------------------------------------------------------- check after restart

async def check_durability(session, url, expected, batch, tolerance):
    """expected: dict id -> vector. Returns (missing ids, mismatched ids, present ids)."""
    ids = list(expected)
    missing, mismatched, present = [], [], []
    for lo in range(0, len(ids), batch):
        chunk = ids[lo:lo + batch]
        recs = await call(session, "POST", f"{url}/collections/{COLLECTION}/points",
                          {"ids": chunk, "with_vector": True, "with_payload": False}, timeout=120)
        got = {int(r["id"]): r.get("vector") for r in recs}
        for i in chunk:
            v = got.get(i)
            if v is None:
                missing.append(i)
                continue
            present.append(i)
            if isinstance(v, dict):  # {"": [...]}, the default vector named
                v = next(iter(v.values()))
            diff = np.max(np.abs(normalized(v) - normalized(expected[i])))
            if not diff <= tolerance:
                mismatched.append(i)
    return missing, mismatched, present


def as_map(pairs):
    out = {}
    for ids, vecs in pairs:
        for i, v in zip(ids, vecs):
            out[int(i)] = v
    return out


# ----------------------------------------------------------------------------- report

def windows(load, width):
    start = np.array(load.start)
    lat = np.array(load.lat)
    kind = np.array(load.kind, dtype=np.int8)
    err = np.array(load.err)
    intr = np.array(load.interrupted, dtype=bool)
    end = start + lat
    ok = err < 0
    failed = (~ok) & (~intr)
    samples = load.samples
    out = []
    horizon = load.kill_time if load.kill_time is not None else load.elapsed
    # Windows of `width` s; a tail shorter than half a window joins the last one.
    edges = list(np.arange(0, horizon, width))
    if len(edges) > 1 and horizon - edges[-1] < width / 2:
        edges.pop()
    edges.append(horizon)
    nwin = len(edges) - 1
    for w in range(nwin):
        lo, hi = edges[w], edges[w + 1]
        span = hi - lo
        inw = (end >= lo) & (end < hi) if w < nwin - 1 else (end >= lo)
        s = inw & ok & (kind == SEARCH)
        u = inw & ok & (kind == UPSERT)
        rss = [x["rss"] for x in samples if lo <= x["t"] < hi]
        cpu = [x["server_cpu"] for x in samples if lo <= x["t"] < hi and x["server_cpu"] is not None]
        ccpu = [x["client_cpu"] for x in samples if lo <= x["t"] < hi and x["client_cpu"] is not None]
        # Busy CPU on the machine outside the server and this load generator (other work).
        other = [x["machine_busy"] - x["server_cpu"] - x["client_cpu"] for x in samples
                 if lo <= x["t"] < hi and x["machine_busy"] is not None]
        out.append({
            "t0": lo, "t1": hi,
            "qps": int(s.sum()) / span,
            "upserts_per_s": int(u.sum()) / span,
            "search_p50_ms": pct(lat[s] * 1e3, 50),
            "search_p99_ms": pct(lat[s] * 1e3, 99),
            "upsert_p50_ms": pct(lat[u] * 1e3, 50),
            "upsert_p99_ms": pct(lat[u] * 1e3, 99),
            "errors": int((inw & failed).sum()),
            "rss_mib": max(rss) / 2**20 if rss else None,
            "server_cpu_pct": float(np.mean(cpu)) if cpu else None,
            "client_cpu_pct": float(np.mean(ccpu)) if ccpu else None,
            "other_cpu_pct": max(0.0, float(np.mean(other))) if other else None,
        })
    return out


def totals(load):
    lat = np.array(load.lat)
    kind = np.array(load.kind, dtype=np.int8)
    err = np.array(load.err)
    intr = np.array(load.interrupted, dtype=bool)
    stime = np.array(load.server_time)
    ok = err < 0
    failed = (~ok) & (~intr)
    horizon = load.kill_time if load.kill_time is not None else load.elapsed
    s, u = ok & (kind == SEARCH), ok & (kind == UPSERT)
    names = {i: e for e, i in load.errors.items()}
    kinds = {}
    for e in err[failed]:
        kinds[names[e]] = kinds.get(names[e], 0) + 1
    interrupted_kinds = {}
    for e in err[intr]:
        interrupted_kinds[names[e]] = interrupted_kinds.get(names[e], 0) + 1
    status_counts = {}
    for st in np.array(load.status)[~intr]:
        status_counts[str(int(st))] = status_counts.get(str(int(st)), 0) + 1
    rss = [x["rss"] for x in load.samples]
    return {
        "duration_s": horizon,
        "requests": int(len(lat)),
        "searches_ok": int(s.sum()),
        "upserts_ok": int(u.sum()),
        "points_upserted_ok": int(sum(len(i) for i, _ in load.acked)),
        "qps": int(s.sum()) / horizon,
        "upserts_per_s": int(u.sum()) / horizon,
        "search_p50_ms": pct(lat[s] * 1e3, 50),
        "search_p90_ms": pct(lat[s] * 1e3, 90),
        "search_p99_ms": pct(lat[s] * 1e3, 99),
        "search_p999_ms": pct(lat[s] * 1e3, 99.9),
        "search_max_ms": float(lat[s].max() * 1e3) if s.any() else None,
        "search_server_p50_ms": pct(stime[s] * 1e3, 50),
        "search_server_p99_ms": pct(stime[s] * 1e3, 99),
        "upsert_p50_ms": pct(lat[u] * 1e3, 50),
        "upsert_p99_ms": pct(lat[u] * 1e3, 99),
        "upsert_max_ms": float(lat[u].max() * 1e3) if u.any() else None,
        "errors": int(failed.sum()),
        "error_kinds": kinds,
        "http_status_counts": status_counts,
        "short_search_results": load.short_results,
        "interrupted_by_kill": int(intr.sum()),
        "interrupted_kinds": interrupted_kinds,
        "hung_clients": load.hung_clients,
        "rss_first_mib": rss[0] / 2**20 if rss else None,
        "rss_last_mib": rss[-1] / 2**20 if rss else None,
        "rss_max_mib": max(rss) / 2**20 if rss else None,
        "server_hwm_mib": load.samples[-1]["hwm"] / 2**20 if load.samples else None,
        "threads_max": max((x["threads"] for x in load.samples), default=None),
        "fds_max": max((x["fds"] for x in load.samples), default=None),
        "server_cpu_mean_pct": float(np.mean([x["server_cpu"] for x in load.samples if x["server_cpu"] is not None] or [np.nan])),
        "client_cpu_mean_pct": float(np.mean([x["client_cpu"] for x in load.samples if x["client_cpu"] is not None] or [np.nan])),
        "machine_busy_mean_pct": float(np.mean([x["machine_busy"] for x in load.samples if x["machine_busy"] is not None] or [np.nan])),
        "machine_iowait_mean_pct": float(np.mean([x["machine_iowait"] for x in load.samples if x["machine_iowait"] is not None] or [np.nan])),
        "db_bytes_last": next((x["db_bytes"] for x in reversed(load.samples) if x["db_bytes"] is not None), None),
        "sampler_lag_max_s": max((x["lag"] for x in load.samples if x["lag"] is not None), default=None),
    }


def chart(path, wins, samples, kill_time, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    mid = [(w["t0"] + w["t1"]) / 2 for w in wins]
    fig, ax = plt.subplots(3, 1, figsize=(11, 9), sharex=True)
    ax[0].plot(mid, [w["qps"] for w in wins], "o-", label="searches/s")
    ax[0].plot(mid, [w["upserts_per_s"] for w in wins], "s-", label="upserts/s")
    ax[0].set_ylabel("per second (10 s windows)")
    ax[0].set_ylim(bottom=0)
    ax[0].legend(loc="lower left")
    nan = lambda v: np.nan if v is None else v
    ax[1].plot(mid, [nan(w["search_p50_ms"]) for w in wins], "o-", label="search p50")
    ax[1].plot(mid, [nan(w["search_p99_ms"]) for w in wins], "o-", label="search p99")
    ax[1].plot(mid, [nan(w["upsert_p99_ms"]) for w in wins], "s--", label="upsert p99")
    ax[1].set_ylabel("latency (ms)")
    ax[1].set_yscale("log")
    ax[1].legend(loc="upper left")
    t = [x["t"] for x in samples]
    ax[2].plot(t, [x["rss"] / 2**20 for x in samples], "-", color="C3", label="server RSS (MiB)")
    ax[2].set_ylabel("RSS (MiB)")
    ax[2].set_ylim(bottom=0)
    ax2 = ax[2].twinx()
    ax2.plot(t, [np.nan if x["server_cpu"] is None else x["server_cpu"] for x in samples], "-",
             color="C0", alpha=0.4, label="server CPU %")
    ax2.plot(t, [np.nan if x["client_cpu"] is None else x["client_cpu"] for x in samples], "-",
             color="C2", alpha=0.4, label="load generator CPU %")
    ax2.plot(t, [np.nan if x["machine_busy"] is None else
                 max(0.0, x["machine_busy"] - x["server_cpu"] - x["client_cpu"]) for x in samples], "-",
             color="C7", alpha=0.4, label="other CPU % (not server, not load generator)")
    ax2.set_ylabel("CPU % (200 = 2 cores)")
    ax2.set_ylim(0, 210)
    h1, l1 = ax[2].get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax[2].legend(h1 + h2, l1 + l2, loc="lower left")
    ax[2].set_xlabel("seconds since the load started")
    if kill_time is not None:
        for a in ax:
            a.axvline(kill_time, color="k", ls=":", lw=1)
        ax[0].annotate("SIGKILL", (kill_time, 0), xytext=(-50, 10), textcoords="offset points")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def fmt(v, spec=".1f"):
    return "-" if v is None else format(v, spec)


def summary_md(res):
    a, t, p, k = res["config"], res["totals"], res["preload"], res.get("kill")
    lines = ["## diskvec serve load test", ""]
    lines.append(f"`{a['binary']}`, {a['clients']} clients, {t['duration_s']:.0f} s of load, "
                 f"{a['upsert_frac']:.0%} upserts (1..{a['upsert_max']} points, wait=true), "
                 f"searches limit {a['limit']}" + (f", hnsw_ef {a['hnsw_ef']}" if a["hnsw_ef"] else "")
                 + f"; preload {p['points']} points of {a['dataset']} in {p['seconds']:.1f} s "
                 f"({p['points'] / p['seconds']:.0f} points/s), green after {fmt(p['settle_s'])} s.")
    lines += ["", "| window (s) | QPS | upserts/s | search p50 ms | search p99 ms | upsert p99 ms | errors | RSS MiB | server CPU % | client CPU % | other CPU % |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for w in res["windows"]:
        lines.append(f"| {w['t0']:.0f}-{w['t1']:.0f} | {w['qps']:.0f} | {w['upserts_per_s']:.1f} | "
                     f"{fmt(w['search_p50_ms'])} | {fmt(w['search_p99_ms'])} | {fmt(w['upsert_p99_ms'])} | "
                     f"{w['errors']} | {fmt(w['rss_mib'], '.0f')} | {fmt(w['server_cpu_pct'], '.0f')} | "
                     f"{fmt(w['client_cpu_pct'], '.0f')} | {fmt(w['other_cpu_pct'], '.0f')} |")
    lines += ["", "| total | value |", "|---|---|"]
    rows = [
        ("requests", t["requests"]),
        ("searches ok / upserts ok (points)", f"{t['searches_ok']} / {t['upserts_ok']} ({t['points_upserted_ok']})"),
        ("QPS (searches) / upserts/s", f"{t['qps']:.1f} / {t['upserts_per_s']:.1f}"),
        ("search p50 / p90 / p99 / p99.9 / max ms", f"{fmt(t['search_p50_ms'])} / {fmt(t['search_p90_ms'])} / {fmt(t['search_p99_ms'])} / {fmt(t['search_p999_ms'])} / {fmt(t['search_max_ms'])}"),
        ("search server-side time p50 / p99 ms", f"{fmt(t['search_server_p50_ms'])} / {fmt(t['search_server_p99_ms'])}"),
        ("upsert p50 / p99 / max ms", f"{fmt(t['upsert_p50_ms'])} / {fmt(t['upsert_p99_ms'])} / {fmt(t['upsert_max_ms'])}"),
        ("**errors**", f"**{t['errors']}**" + (" (" + "; ".join(f"{n}x {e}" for e, n in t["error_kinds"].items()) + ")" if t["error_kinds"] else "")),
        ("HTTP statuses (not counting the kill)", ", ".join(f"{k}: {v}" for k, v in sorted(t["http_status_counts"].items()))),
        ("searches with fewer than limit hits", t["short_search_results"]),
        ("server RSS first / last / max MiB", f"{fmt(t['rss_first_mib'], '.0f')} / {fmt(t['rss_last_mib'], '.0f')} / {fmt(t['rss_max_mib'], '.0f')}"),
        ("server threads max / fds max", f"{t['threads_max']} / {t['fds_max']}"),
        ("CPU mean %, 200 = 2 cores: server / load generator / whole machine busy / iowait",
         f"{t['server_cpu_mean_pct']:.0f} / {t['client_cpu_mean_pct']:.0f} / {t['machine_busy_mean_pct']:.0f} / {t['machine_iowait_mean_pct']:.0f}"),
        ("DB dir size at the end (MiB)", fmt(t["db_bytes_last"] / 2**20 if t["db_bytes_last"] else None, ".0f")),
    ]
    if k:
        rows += [
            ("SIGKILL at (s)" if "crash" not in res else "server died by itself at (s)", f"{k['kill_time_s']:.1f}, {k['in_flight_upserts_at_kill']} upserts in flight; {t['interrupted_by_kill']} requests cut by it"),
            ("restart: listening / ready (s)", f"{k['restart_listen_s']:.2f} / {k['restart_ready_s']:.2f}"),
            ("acknowledged points checked (preload + load)", f"{k['acked_checked']} ({k['preload_checked']} + {k['load_acked_checked']})"),
            ("**acknowledged missing / different vector**", f"**{k['missing']} / {k['mismatched']}**"),
            ("unanswered upsert points (in flight at kill + failed): present / absent / present with a different vector",
             f"{k['unanswered_present']} / {k['unanswered_absent']} / {k['unanswered_mismatched']}"),
            ("count after restart (expected range)", f"{k['count_after']} ({k['count_expected_min']}..{k['count_expected_max']})"),
        ]
        if k.get("self_check"):
            rows.append(("self-check (injected)", f"deleted id {k['self_check']['deleted']}, overwrote id {k['self_check']['overwritten']}: expected missing 1 / different 1"))
    if "final_exit_code" in res:
        rows.append(("server exit code on SIGTERM at the end", res["final_exit_code"]))
    for name, v in rows:
        lines.append(f"| {name} | {v} |")
    lines += ["", f"**{res['verdict']}**"]
    return "\n".join(lines)


# ----------------------------------------------------------------------------- main

async def main_async(args, out):
    ds = Path(args.dataset)
    train_ids, train = load_vectors(ds / "train.parquet")
    _, queries = load_vectors(ds / "test.parquet")
    dim = train.shape[1]
    if args.preload > len(train):
        raise SystemExit(f"--preload {args.preload} > {len(train)} rows")
    res = {"config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}}
    res["config"]["dim"] = dim
    headers = {"api-key": args.api_key} if args.api_key else {}
    server = Server(args.binary, args.db, out / "server.log", args.api_key)
    listen_s = server.start()
    print(f"server pid {server.pid} on {server.url} (listening after {listen_s:.2f} s)", file=sys.stderr)
    failed_verdict = []
    conn = aiohttp.TCPConnector(limit=args.clients + 4, force_close=False)
    async with aiohttp.ClientSession(connector=conn, headers=headers) as session:
        await wait_ready(session, server.url, 60)
        await call(session, "PUT", f"{server.url}/collections/{COLLECTION}",
                   {"vectors": {"size": dim, "distance": "Cosine"}})
        # Preload.
        t0 = time.monotonic()
        for lo in range(0, args.preload, args.batch):
            hi = min(lo + args.batch, args.preload)
            pts = [{"id": int(i), "vector": v.tolist(), "payload": {"source": "preload", "row": r}}
                   for r, (i, v) in enumerate(zip(train_ids[lo:hi], train[lo:hi]), start=lo)]
            await call(session, "PUT", f"{server.url}/collections/{COLLECTION}/points?wait=true",
                       {"points": pts}, timeout=args.request_timeout)
        preload_s = time.monotonic() - t0
        print(f"preloaded {args.preload} points in {preload_s:.1f} s", file=sys.stderr)
        t0 = time.monotonic()
        settle_s = None
        info = None
        while time.monotonic() - t0 < args.settle_timeout:
            info = await call(session, "GET", f"{server.url}/collections/{COLLECTION}")
            if info.get("status") == "green":
                settle_s = time.monotonic() - t0
                break
            await asyncio.sleep(0.5)
        cnt = (await call(session, "POST", f"{server.url}/collections/{COLLECTION}/points/count", {"exact": True}))["count"]
        res["preload"] = {"points": args.preload, "seconds": preload_s, "settle_s": settle_s,
                          "count": cnt, "collection_info": info}
        if cnt != args.preload:
            failed_verdict.append(f"count after preload {cnt} != {args.preload}")
        print(f"collection {'green after %.1f s' % settle_s if settle_s is not None else 'NOT green'}; "
              f"count {cnt}; load for {args.duration} s with {args.clients} clients", file=sys.stderr)

        load = Load(args, server, train_ids, train, queries)
        await load.run(session)
        res["windows"] = windows(load, args.window)
        res["totals"] = totals(load)
        res["samples"] = load.samples
        np.savez_compressed(out / "requests.npz", start=np.array(load.start), latency=np.array(load.lat),
                            kind=np.array(load.kind, dtype=np.int8), status=np.array(load.status, dtype=np.int16),
                            server_time=np.array(load.server_time), error=np.array(load.err, dtype=np.int32),
                            interrupted=np.array(load.interrupted, dtype=bool),
                            error_texts=np.array(sorted(load.errors, key=load.errors.get) or [""]))
        if res["totals"]["errors"]:
            failed_verdict.append(f"{res['totals']['errors']} failed requests")
        if load.hung_clients:
            failed_verdict.append(f"{load.hung_clients} clients past the hard deadline")
        print(f"load done: {res['totals']['requests']} requests, {res['totals']['errors']} errors", file=sys.stderr)

    if load.crashed:
        failed_verdict.append(f"the server died by itself at {load.crashed[0]:.1f} s (exit code {load.crashed[1]})")
        res["crash"] = {"t_s": load.crashed[0], "exit_code": load.crashed[1]}
    if load.kill_time is None and load.crashed is None:
        code = server.stop()
        res["final_exit_code"] = code
        if code != 0:
            failed_verdict.append(f"server exit code {code} on SIGTERM")
    else:
        rc = server.proc.wait(timeout=60)
        k = {"kill_time_s": load.kill_time if load.kill_time is not None else load.crashed[0],
             "killed_exit": rc,
             "in_flight_upserts_at_kill": getattr(load, "in_flight_at_kill", len(load.pending))}
        # Upserts the kill cut (and any failed or hung one): present or absent are both fine.
        unanswered = as_map(load.cut_upserts + list(load.pending.values()) + load.failed_upserts)
        acked_load = as_map(load.acked)
        expected = {int(i): v for i, v in zip(train_ids[:args.preload], train[:args.preload])}
        overlap = set(acked_load) & set(expected)
        assert not overlap, "load upserts reused preload ids"
        expected.update(acked_load)
        server2 = Server(args.binary, args.db, out / "server-restart.log", args.api_key)
        t_restart = time.monotonic()
        k["restart_listen_s"] = server2.start(timeout=args.recovery_timeout)
        conn = aiohttp.TCPConnector(limit=8)
        async with aiohttp.ClientSession(connector=conn, headers=headers) as session:
            await wait_ready(session, server2.url, args.recovery_timeout)
            k["restart_ready_s"] = time.monotonic() - t_restart
            print(f"restarted: pid {server2.pid} on {server2.url}, ready after {k['restart_ready_s']:.2f} s",
                  file=sys.stderr)
            col_url = f"{server2.url}/collections/{COLLECTION}"
            if args.self_check:
                victims = list(acked_load) or list(expected)
                deleted, overwritten = victims[0], victims[-1]
                await call(session, "POST", f"{col_url}/points/delete?wait=true", {"points": [deleted]})
                other = normalized(expected[overwritten])[::-1].copy()  # a different unit vector
                await call(session, "PUT", f"{col_url}/points?wait=true",
                           {"points": [{"id": overwritten, "vector": other.tolist()}]})
                k["self_check"] = {"deleted": deleted, "overwritten": overwritten}
                print(f"self-check: deleted {deleted}, overwrote {overwritten}", file=sys.stderr)
            t0 = time.monotonic()
            missing, mismatched, _ = await check_durability(session, server2.url, expected,
                                                            args.check_batch, args.tolerance)
            u_missing, u_mismatched, u_present = await check_durability(session, server2.url, unanswered,
                                                                        args.check_batch, args.tolerance)
            k["check_s"] = time.monotonic() - t0
            cnt = (await call(session, "POST", f"{col_url}/points/count", {"exact": True}))["count"]
        k.update({
            "acked_checked": len(expected), "preload_checked": args.preload,
            "load_acked_checked": len(acked_load),
            "missing": len(missing), "mismatched": len(mismatched),
            "missing_ids": missing[:100], "mismatched_ids": mismatched[:100],
            "unanswered_points": len(unanswered), "unanswered_present": len(u_present),
            "unanswered_absent": len(u_missing), "unanswered_mismatched": len(u_mismatched),
            "count_after": cnt,
            "count_expected_min": len(expected) - (1 if args.self_check else 0),
            "count_expected_max": len(expected) + len(unanswered),
        })
        res["kill"] = k
        if missing or mismatched:
            failed_verdict.append(f"{len(missing)} acknowledged points missing, {len(mismatched)} with a different vector")
        if u_mismatched:
            failed_verdict.append(f"{len(u_mismatched)} unanswered points present with a vector never sent")
        if not (k["count_expected_min"] <= cnt <= k["count_expected_max"]):
            failed_verdict.append(f"count {cnt} outside {k['count_expected_min']}..{k['count_expected_max']}")
        code = server2.stop()
        res["final_exit_code"] = code
        if code != 0:
            failed_verdict.append(f"restarted server exit code {code} on SIGTERM")
    res["verdict"] = ("FAIL: " + "; ".join(failed_verdict)) if failed_verdict else "PASS: 0 errors, 0 acknowledged writes lost"
    if args.self_check:
        res["verdict"] += " (self-check run: an injected loss must make it FAIL)"
    return res


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("binary", type=Path, help="the diskvec binary")
    p.add_argument("--dataset", default=DEFAULT_DATASET, help="dir with train.parquet and test.parquet (id, emb)")
    p.add_argument("--out", type=Path, default=None, help="results dir (default /work/bench/load/results/<time>)")
    p.add_argument("--db", type=Path, default=None, help="DB dir, must not exist (default OUT/db, removed at the end unless --keep-db)")
    p.add_argument("--keep-db", action="store_true")
    p.add_argument("--preload", type=int, default=40_000, help="rows of train.parquet loaded before the load")
    p.add_argument("--batch", type=int, default=256, help="preload batch size")
    p.add_argument("--settle-timeout", type=float, default=600, help="max wait for status green after the preload")
    p.add_argument("--clients", type=int, default=80)
    p.add_argument("--duration", type=float, default=600)
    p.add_argument("--upsert-frac", type=float, default=0.10)
    p.add_argument("--upsert-max", type=int, default=8, help="points per upsert: 1..N")
    p.add_argument("--limit", type=int, default=10)
    p.add_argument("--hnsw-ef", type=int, default=None)
    p.add_argument("--request-timeout", type=float, default=30, help="per request; a timeout is an error")
    p.add_argument("--max-requests", type=int, default=5_000_000, help="per client")
    p.add_argument("--window", type=float, default=10)
    p.add_argument("--no-kill", action="store_true", help="end with SIGTERM instead of the kill/restart check")
    p.add_argument("--kill-at", type=float, default=None, help="seconds into the load (default: --duration)")
    p.add_argument("--self-check", action="store_true", help="inject one loss and one corruption before the check")
    p.add_argument("--recovery-timeout", type=float, default=600)
    p.add_argument("--check-batch", type=int, default=256)
    p.add_argument("--tolerance", type=float, default=1e-5, help="max abs difference of normalized components")
    p.add_argument("--api-key", default=None)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    if args.kill_at is None:
        args.kill_at = args.duration
    if args.kill_at > args.duration:
        raise SystemExit("--kill-at must be at most --duration")
    args.binary = args.binary.resolve()
    out = args.out or Path("/work/bench/load/results") / time.strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    args.out = out
    for f in ("server.log", "server-restart.log"):
        (out / f).unlink(missing_ok=True)
    if args.db is None:
        args.db = out / "db"
    if args.db.exists():
        raise SystemExit(f"{args.db} exists: the load test needs a fresh DB dir")
    try:
        import uvloop
        uvloop.install()
    except ImportError:
        pass
    res = asyncio.run(main_async(args, out))
    (out / "results.json").write_text(json.dumps(res, indent=1, default=str))
    title = (f"diskvec serve: {args.clients} clients, {args.upsert_frac:.0%} upserts, "
             f"{args.preload} preloaded ({Path(args.dataset).name})")
    chart(out / "load.png", res["windows"], res["samples"], res.get("kill", {}).get("kill_time_s"), title)
    md = summary_md(res)
    (out / "summary.md").write_text(md + "\n")
    print(md)
    print(f"\nresults: {out}/results.json, {out}/load.png, {out}/summary.md", file=sys.stderr)
    if not args.keep_db:
        shutil.rmtree(args.db, ignore_errors=True)
    sys.exit(0 if res["verdict"].startswith("PASS") else 1)


if __name__ == "__main__":
    main()
