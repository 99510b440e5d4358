"""Shared pieces of the database-layer benchmark (issue 9): data loading (cached as .npy so the
search processes import only numpy), exact filtered ground truth, recall, the timed 2-thread
query loop, and the memory-cgroup helper. Used by run_diskvec.py, run_qdrant_edge.py and
run_lancedb.py; each runs in its own virtualenv (setup.sh), so this file needs only numpy
(pyarrow only for the one-time conversion, which `python common.py prepare` does).
"""
import json
import os
import platform
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
DATASETS = Path(os.environ.get("DB_BENCH_DATASETS", "/work/shared/datasets"))
WORK = Path(os.environ.get("DB_BENCH_WORK", "/work/bench/dbbench"))
CACHE = WORK / "cache"
BATCH = 100  # VectorDBBench's insert batch
PAYLOAD_FIELDS = ["pos", "lexname", "synset", "chars", "text"]


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# Data


def cache_dir(dataset):
    return CACHE / Path(dataset).name


def prepare(dataset):
    """Converts the parquet files once into .npy / .json files under CACHE."""
    import pyarrow.parquet as pq

    src = DATASETS / dataset
    out = cache_dir(dataset)
    if (out / "done").exists():
        return out
    out.mkdir(parents=True, exist_ok=True)

    def vectors(name):
        t = pq.read_table(src / f"{name}.parquet")
        ids = t.column("id").to_numpy()
        assert (ids == np.arange(len(ids))).all(), f"{name}: ids are not 0..N-1"
        col = t.column("emb").combine_chunks()
        width = len(col[0])
        return np.ascontiguousarray(col.flatten().to_numpy(zero_copy_only=False).astype(np.float32).reshape(-1, width))

    np.save(out / "train.npy", vectors("train"))
    np.save(out / "test.npy", vectors("test"))
    t = pq.read_table(src / "neighbors.parquet")
    assert (t.column("id").to_numpy() == np.arange(t.num_rows)).all()
    nb = np.array(t.column("neighbors_id").to_pylist(), dtype=np.int64)
    np.save(out / "neighbors.npy", nb)
    if (src / "train_payloads.parquet").exists():  # the synthetic sets have none
        p = pq.read_table(src / "train_payloads.parquet").to_pydict()
        assert p["id"] == list(range(len(p["id"])))
        with open(out / "payloads.json", "w") as f:
            json.dump({k: p[k] for k in PAYLOAD_FIELDS}, f)
    (out / "done").write_text("ok\n")
    return out


def load_queries(dataset):
    d = cache_dir(dataset)
    return np.load(d / "test.npy"), np.load(d / "neighbors.npy")


def load_train(dataset):
    # Mapped, not read: a load inside a memory cgroup smaller than the vectors (1M x 768 in
    # 1 GiB) would otherwise be killed before the system under test wrote anything. The
    # pages read stay reclaimable page cache.
    return np.load(cache_dir(dataset) / "train.npy", mmap_mode="r")


def load_payload_columns(dataset):
    """The payload columns, or None when the dataset has no train_payloads.parquet."""
    path = cache_dir(dataset) / "payloads.json"
    if not path.exists():
        return None
    with open(path) as f:
        return json.load(f)


def payload_dicts(cols, with_text=True):
    fields = [f for f in PAYLOAD_FIELDS if with_text or f != "text"]
    n = len(cols["pos"])
    return [{f: cols[f][i] for f in fields} for i in range(n)]


# ---------------------------------------------------------------------------------------------
# Filters: one neutral description, translated by each driver (Qdrant JSON, Qdrant objects, SQL).
# kind "eq": field == value; "any": field in values; "range": lo <= field < hi.

FILTERS = [
    {"name": "pos=noun", "kind": "eq", "field": "pos", "value": "noun"},
    {"name": "lexname in 6 top", "kind": "any", "field": "lexname",
     "values": ["adj.all", "noun.artifact", "noun.person", "noun.plant", "noun.act", "noun.animal"]},
    {"name": "lexname=noun.artifact", "kind": "eq", "field": "lexname", "value": "noun.artifact"},
    {"name": "lexname=noun.event", "kind": "eq", "field": "lexname", "value": "noun.event"},
    {"name": "lexname=verb.weather", "kind": "eq", "field": "lexname", "value": "verb.weather"},
    {"name": "60<=chars<75", "kind": "range", "field": "chars", "lo": 60, "hi": 75},
]


def qdrant_json(f):
    if f["kind"] == "eq":
        return {"must": [{"key": f["field"], "match": {"value": f["value"]}}]}
    if f["kind"] == "any":
        return {"must": [{"key": f["field"], "match": {"any": f["values"]}}]}
    return {"must": [{"key": f["field"], "range": {"gte": f["lo"], "lt": f["hi"]}}]}


def sql(f):
    if f["kind"] == "eq":
        return f"{f['field']} = '{f['value']}'"
    if f["kind"] == "any":
        return f"{f['field']} IN (" + ", ".join(f"'{v}'" for v in f["values"]) + ")"
    return f"{f['field']} >= {f['lo']} AND {f['field']} < {f['hi']}"


def filter_mask(f, cols):
    v = np.asarray(cols[f["field"]])
    if f["kind"] == "eq":
        return v == f["value"]
    if f["kind"] == "any":
        return np.isin(v, f["values"])
    return (v >= f["lo"]) & (v < f["hi"])


def filtered_truth(dataset, k=10):
    """Exact top-k (cosine = dot product on the unit vectors) over the rows passing each filter,
    float64, ties to the smaller id; cached. Returns {name: (selectivity, int64[Q, k])}."""
    path = cache_dir(dataset) / f"filtered_truth_k{k}.npz"
    if path.exists():
        z = np.load(path)
        return {f["name"]: (float(z[f"sel_{i}"]), z[f"ids_{i}"]) for i, f in enumerate(FILTERS)}
    train = load_train(dataset).astype(np.float64)
    queries, _ = load_queries(dataset)
    q = queries.astype(np.float64)
    cols = load_payload_columns(dataset)
    out = {}
    for i, f in enumerate(FILTERS):
        mask = filter_mask(f, cols)
        rows = np.nonzero(mask)[0]
        sims = q @ train[rows].T
        # sort by (-sim, id): stable argsort on -sim keeps the smaller id first among ties
        order = np.argsort(-sims, axis=1, kind="stable")[:, :k]
        out[f["name"]] = (float(mask.mean()), rows[order])
    np.savez(path, **{f"sel_{i}": out[f["name"]][0] for i, f in enumerate(FILTERS)},
             **{f"ids_{i}": out[f["name"]][1] for i, f in enumerate(FILTERS)})
    return out


def recall(results, truth, k):
    """Mean |result[:k] & truth[:k]| / k over the queries (unanswered queries count 0)."""
    hits = 0
    for i, r in enumerate(results):
        if r is None:
            continue
        hits += len(set(int(x) for x in list(r)[:k]) & set(int(x) for x in truth[i, :k]))
    return hits / (k * len(results))


# ---------------------------------------------------------------------------------------------
# Timed query loop


def run_threads(target, count):
    """Runs target(i) on `count` threads, i = 0..count-1, and waits for all of them."""
    ts = [threading.Thread(target=target, args=(i,)) for i in range(count)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


def run_queries(search, queries, threads=2, min_seconds=10.0, min_passes=2, max_seconds=60.0):
    """`threads` client threads, each sending one query at a time, in order over the query set,
    passes repeated until at least `min_passes` passes and `min_seconds` are done (stops at
    `max_seconds` even mid-pass). `search(vector) -> list of ids`. Returns QPS = answered / wall
    time, latency percentiles, and the last answer to each query (for recall)."""
    nq = len(queries)
    results = [None] * nq
    lat = []
    lock = threading.Lock()
    state = {"next": 0, "stop": False, "errors": 0, "first_error": None}
    cpu0 = cpu_seconds()
    t0 = time.perf_counter()

    def take():
        with lock:
            if state["stop"]:
                return None
            i = state["next"]
            now = time.perf_counter() - t0
            if now >= max_seconds:
                state["stop"] = True
                return None
            if i >= nq * min_passes and i % nq == 0 and now >= min_seconds:
                state["stop"] = True
                return None
            state["next"] = i + 1
            return i

    def worker():
        local = []
        while True:
            i = take()
            if i is None:
                break
            qi = i % nq
            s = time.perf_counter()
            try:
                ids = search(queries[qi])
            except Exception as e:  # counted, first one kept
                with lock:
                    state["errors"] += 1
                    if state["first_error"] is None:
                        state["first_error"] = repr(e)
                continue
            local.append(time.perf_counter() - s)
            results[qi] = ids
        with lock:
            lat.extend(local)

    run_threads(lambda _: worker(), threads)
    wall = time.perf_counter() - t0
    cpu = cpu_seconds() - cpu0
    lat_ms = np.array(lat) * 1000.0 if lat else np.array([np.nan])
    return {
        "answered": len(lat),
        "wall_s": round(wall, 3),
        "qps": round(len(lat) / wall, 2),
        "p50_ms": round(float(np.percentile(lat_ms, 50)), 3),
        "p99_ms": round(float(np.percentile(lat_ms, 99)), 3),
        "errors": state["errors"],
        "first_error": state["first_error"],
        "threads": threads,
        "cpu_cores_used": round(cpu / wall, 2),
        "complete_pass": all(r is not None for r in results),
    }, results


def sweep(search_for, knobs_for, queries, truth, ks=(10, 100), **kw):
    """For each k and knob value: the timed loop, then recall@k over the last answers."""
    rows = []
    for k in ks:
        for knob in knobs_for(k):
            stats, res = run_queries(search_for(k, knob), queries, **kw)
            stats.update({"k": k, "knob": knob, f"recall@{k}": round(recall(res, truth, k), 4)})
            if not stats["complete_pass"]:  # stopped mid-pass: recall over the answered queries too
                ans = [i for i, r in enumerate(res) if r is not None]
                stats["answered_distinct"] = len(ans)
                stats[f"recall@{k}_answered"] = round(recall([res[i] for i in ans], truth[ans], k), 4) if ans else None
            if k == 100:
                stats["recall@10_of_k100"] = round(recall([None if r is None else list(r)[:10] for r in res], truth, 10), 4)
            log(f"k={k} knob={knob}: recall@{k}={stats[f'recall@{k}']} qps={stats['qps']} p50={stats['p50_ms']}ms p99={stats['p99_ms']}ms")
            rows.append(stats)
    return rows


# ---------------------------------------------------------------------------------------------
# Process and machine facts


def proc_status_kib(field, pid="self"):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def rss_mib():
    v = proc_status_kib("VmRSS:")
    return None if v is None else round(v / 1024, 1)


def peak_rss_mib():
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1)


def reset_peak_rss():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def hwm_mib():
    v = proc_status_kib("VmHWM:")
    return None if v is None else round(v / 1024, 1)


def dir_bytes(path):
    total = 0
    for root, _, files in os.walk(path):
        for n in files:
            try:
                total += os.stat(os.path.join(root, n)).st_blocks * 512
            except OSError:
                pass
    return total


def cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def machine():
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    with open("/proc/meminfo") as f:
        mem = int(f.readline().split()[1]) // 1024
    return {"cpu": cpu, "cores": os.cpu_count(), "mem_mib": mem, "kernel": platform.release(),
            "python": platform.python_version(), "load_avg": os.getloadavg()}


def write_json(path, obj):
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1, default=str)
    os.replace(tmp, path)


def timed(fn, *a, **kw):
    t = time.perf_counter()
    r = fn(*a, **kw)
    return r, time.perf_counter() - t


def ingest(prep, write, n, batch=BATCH, writers=1):
    """Client writes of consecutive batches of `batch` points: prep(lo, hi) builds the batch in
    the system's client form (numpy -> lists/objects, not timed as the system's), write(obj)
    returns after the system's acknowledgement. Reports points/s over the write calls alone
    (`points_per_s`) and over the whole loop including the client-side conversion
    (`points_per_s_wall`), and batch latency percentiles.

    With `writers` > 1, every batch is prepared first, then that many client threads write them
    (batch i by thread i % writers) as fast as they are acknowledged; `points_per_s` is then the
    points acknowledged per second of the writing phase, all threads together."""
    if writers > 1:
        objs = [prep(lo, min(n, lo + batch)) for lo in range(0, n, batch)]
        lat = [[] for _ in range(writers)]

        def client(t):
            for obj in objs[t::writers]:
                s = time.perf_counter()
                write(obj)
                lat[t].append(time.perf_counter() - s)

        t0 = time.perf_counter()
        run_threads(client, writers)
        wall = time.perf_counter() - t0
        lat = np.array([x for per in lat for x in per])
        return {"points": n, "batch": batch, "writers": writers, "write_s": round(wall, 3),
                "wall_s": round(wall, 3), "points_per_s": round(n / wall, 1),
                "points_per_s_wall": round(n / wall, 1),
                "batch_p50_ms": round(float(np.percentile(lat * 1000, 50)), 3),
                "batch_p99_ms": round(float(np.percentile(lat * 1000, 99)), 3)}
    lat = []
    t0 = time.perf_counter()
    for lo in range(0, n, batch):
        obj = prep(lo, min(n, lo + batch))
        s = time.perf_counter()
        write(obj)
        lat.append(time.perf_counter() - s)
    wall = time.perf_counter() - t0
    lat = np.array(lat)
    return {"points": n, "batch": batch, "writers": 1, "write_s": round(float(lat.sum()), 3), "wall_s": round(wall, 3),
            "points_per_s": round(n / float(lat.sum()), 1), "points_per_s_wall": round(n / wall, 1),
            "batch_p50_ms": round(float(np.percentile(lat * 1000, 50)), 3),
            "batch_p99_ms": round(float(np.percentile(lat * 1000, 99)), 3)}


# ---------------------------------------------------------------------------------------------
# Memory cgroup (v1). Groups are made as children of this process's own memory cgroup, so the
# machine's accounting above is untouched; the child process joins its group before exec, so
# everything it allocates and every page-cache page it reads is charged there.


def own_memory_cgroup():
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, ctrl, path = line.rstrip("\n").split(":", 2)
            if "memory" in ctrl.split(","):
                return Path("/sys/fs/cgroup/memory") / path.lstrip("/")
    return None


def evict_page_cache(path):
    """Drops the page-cache pages of every file under `path` (fdatasync first, then
    POSIX_FADV_DONTNEED), so the next reader faults them in and is charged for them."""
    n = 0
    for root, _, files in os.walk(path):
        for name in files:
            p = os.path.join(root, name)
            try:
                fd = os.open(p, os.O_RDONLY)
            except OSError:
                continue
            try:
                try:
                    os.fdatasync(fd)
                except OSError:
                    pass
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                n += 1
            finally:
                os.close(fd)
    return n


def _read(p):
    try:
        return Path(p).read_text()
    except OSError:
        return None


def run_in_cgroup(cmd, limit_bytes, evict=(), timeout_s=300, name="dbbench"):
    """Runs `cmd` in a new child memory cgroup limited to `limit_bytes` (RAM + page cache).
    Returns the cgroup's peak usage, its final memory.stat, the fail and OOM-kill counts,
    the exit code (None on timeout: the process group is killed) and the wall time."""
    base = own_memory_cgroup()
    info = {"limit_bytes": int(limit_bytes), "cgroup": None}
    if base is None or not os.access(base, os.W_OK):
        info["error"] = f"memory cgroup not writable ({base})"
        return info
    g = base / f"{name}-{os.getpid()}-{int(time.time())}"
    g.mkdir()
    info["cgroup"] = str(g)
    try:
        (g / "memory.limit_in_bytes").write_text(str(int(limit_bytes)))
        info["evicted_files"] = sum(evict_page_cache(p) for p in evict)
        procs = str(g / "cgroup.procs")

        def join():
            with open(procs, "w") as f:
                f.write(str(os.getpid()))
            os.setsid()

        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, preexec_fn=join)
        peak = {"total_rss": 0, "total_cache": 0, "total_mapped_file": 0}
        while True:
            try:
                info["exit_code"] = p.wait(timeout=0.25)
                break
            except subprocess.TimeoutExpired:
                pass
            for line in (_read(g / "memory.stat") or "").splitlines():
                k, v = line.split()
                if k in peak:
                    peak[k] = max(peak[k], int(v))
            if time.perf_counter() - t0 > timeout_s:
                os.killpg(p.pid, 9)
                p.wait()
                info["exit_code"] = None
                info["timed_out"] = True
                break
        info["sampled_max"] = peak  # every 0.25 s while the child ran
        info["wall_s"] = round(time.perf_counter() - t0, 2)
        info["max_usage_bytes"] = int(_read(g / "memory.max_usage_in_bytes") or 0)
        info["failcnt"] = int(_read(g / "memory.failcnt") or 0)
        st = {}
        for line in (_read(g / "memory.stat") or "").splitlines():
            k, v = line.split()
            st[k] = int(v)
        info["stat"] = {k: st.get(k) for k in ("total_rss", "total_cache", "total_mapped_file", "total_pgmajfault",
                                                "total_pgpgin", "total_inactive_file", "total_active_file")}
        oc = _read(g / "memory.oom_control") or ""
        for line in oc.splitlines():
            if line.startswith("oom_kill "):
                info["oom_kills"] = int(line.split()[1])
    finally:
        # the child has exited; any page cache still charged moves to the parent on removal
        for _ in range(50):
            try:
                g.rmdir()
                break
            except OSError:
                time.sleep(0.1)
    return info


def mem_phase(driver, args_list, dataset, db_paths, caps, out, timeout_s=240):
    """Runs `driver --phase memchild ...` under each cap; `out` collects the cgroup figures and
    the child's own JSON (QPS, recall, VmHWM)."""
    rows = []
    for label, cap in caps:
        child_json = WORK / "tmp" / f"memchild-{Path(driver).stem}-{Path(dataset).name}-{label}.json"
        child_json.parent.mkdir(parents=True, exist_ok=True)
        if child_json.exists():
            child_json.unlink()
        cmd = [sys.executable, str(driver), "--phase", "memchild", "--dataset", dataset, "--child-out", str(child_json)] + args_list
        log(f"memory run '{label}': cap {cap / 2**20:.0f} MiB: {' '.join(cmd[1:])}")
        info = run_in_cgroup(cmd, cap, evict=db_paths, timeout_s=timeout_s)
        if child_json.exists():
            info["child"] = json.loads(child_json.read_text())
        info["label"] = label
        log(f"  -> exit {info.get('exit_code')} peak {info.get('max_usage_bytes', 0) / 2**20:.0f} MiB "
            f"oom_kills {info.get('oom_kills')} child {info.get('child', {}).get('search')}")
        rows.append(info)
    return rows


def cgrun(argv):
    """`common.py cgrun --cap-mib MiB --evict DIR [--evict DIR] --info OUT.json [--timeout S] -- CMD...`:
    runs CMD (e.g. a whole `--phase search` sweep) in a fresh child memory cgroup capped at MiB
    (RAM + page cache), after dropping the page cache of the files under each DIR; writes the
    cgroup figures (peak usage, failcnt, OOM kills, memory.stat) to OUT.json. Exit code: CMD's."""
    import argparse
    i = argv.index("--")
    ap = argparse.ArgumentParser(prog="common.py cgrun")
    ap.add_argument("--cap-mib", type=float, required=True)
    ap.add_argument("--evict", action="append", default=[])
    ap.add_argument("--info", required=True)
    ap.add_argument("--timeout", type=float, default=3600)
    a = ap.parse_args(argv[:i])
    cmd = argv[i + 1:]
    log(f"cgrun: cap {a.cap_mib} MiB, evict {a.evict}: {' '.join(cmd)}")
    info = run_in_cgroup(cmd, a.cap_mib * 2**20, evict=a.evict, timeout_s=a.timeout, name="dbbench-cgrun")
    info["cmd"] = cmd
    info["cap_mib"] = a.cap_mib
    write_json(a.info, info)
    log(f"cgrun: exit {info.get('exit_code')} peak {info.get('max_usage_bytes', 0) / 2**20:.1f} MiB "
        f"failcnt {info.get('failcnt')} oom_kills {info.get('oom_kills')}")
    return 1 if info.get("exit_code") is None else info["exit_code"]


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "cgrun":
        sys.exit(cgrun(sys.argv[2:]))
    if len(sys.argv) >= 2 and sys.argv[1] == "prepare":
        for ds in sys.argv[2:]:
            d = prepare(ds)
            log(f"prepared {d}")
            if "minilm" in ds:
                ft = filtered_truth(ds)
                for f in FILTERS:
                    log(f"  {f['name']}: selectivity {ft[f['name']][0]:.4%}")
    else:
        print(__doc__)


# ---------------------------------------------------------------------------------------------
# The protocol, shared by the three drivers. A driver subclasses Driver and provides:
#   create(dataset, dim)         new empty store at self.path, payload indexes declared
#   write_prep(lo, hi) / write(obj)  one batch, returning after the durable acknowledgement
#   wait_indexed()               block until fully indexed (load duration ends there)
#   open()                       open the existing store for search (fresh process)
#   searcher(k, knob, filt)      -> callable(vector) -> list of ids
#   info()                       dict of the system's own figures (segments, DRAM, ...)
#   close()
# and the class attributes name, knobs (dict dataset-kind -> list), filter_knobs, mem_knob,
# durability (text).


class Driver:
    name = "?"
    knobs = []
    filter_knobs = []
    mem_knob = None
    durability = ""

    def __init__(self, args):
        self.args = args
        self.variant = args.variant
        self.dataset = args.dataset
        suffix = "-ingest" if args.phase == "ingest-only" else ""
        self.path = WORK / "db" / f"{self.name}-{self.variant}{suffix}" / Path(self.dataset).name

    # to be provided
    def create(self, dim): raise NotImplementedError
    def write_prep(self, lo, hi): raise NotImplementedError
    def write(self, obj): raise NotImplementedError
    def wait_indexed(self): pass
    def open(self): raise NotImplementedError
    def searcher(self, k, knob, filt=None): raise NotImplementedError
    def info(self): return {}
    def knobs_for(self, k): return self.knobs
    def close(self): pass
    def versions(self): return {}
    def config(self): return {}

    # shared phases
    def header(self, phase):
        return {"system": self.name, "variant": self.variant, "dataset": Path(self.dataset).name, "phase": phase,
                "date": time.strftime("%Y-%m-%d %H:%M:%S"), "machine": machine(), "versions": self.versions(),
                "config": self.config(), "path": str(self.path), "durability": self.durability}

    def phase_load(self, n=None, index=True):
        import shutil
        if self.path.exists():
            shutil.rmtree(self.path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.train = load_train(self.dataset)
        self.cols = load_payload_columns(self.dataset)
        n = n or len(self.train)
        out = self.header("load")
        reset_peak_rss()
        rss0 = rss_mib()
        _, out["create_s"] = timed(self.create, self.train.shape[1])
        cpu0 = cpu_seconds()
        writers = getattr(self.args, "writers", 1)
        log(f"{self.name}/{self.variant}: ingest {n} points in batches of {BATCH}, {writers} writer(s)")
        out["ingest"] = ingest(self.write_prep, self.write, n, writers=writers)
        log(f"  {out['ingest']}")
        out["info_after_ingest"] = self.info()
        _, out["index_wait_s"] = timed(self.wait_indexed) if index else (None, 0.0)
        out["cpu_s"] = round(cpu_seconds() - cpu0, 2)
        out["load_duration_s"] = round(out["ingest"]["wall_s"] + out["index_wait_s"], 3)
        out["info"] = self.info()
        out["rss_before_mib"] = rss0
        out["peak_rss_mib"] = hwm_mib()
        self.close()
        out["disk_bytes"] = dir_bytes(self.path)
        log(f"  index wait {out['index_wait_s']:.1f} s, load duration {out['load_duration_s']:.1f} s, "
            f"disk {out['disk_bytes'] / 2**20:.1f} MiB, info {out['info']}")
        return out

    def phase_search(self, min_seconds, max_seconds, threads=2):
        queries, truth = load_queries(self.dataset)
        out = self.header("search")
        out["threads"] = threads
        reset_peak_rss()
        _, out["open_s"] = timed(self.open)
        out["info"] = self.info()
        # warm-up: one pass at the middle knob, not timed
        mid = self.knobs[len(self.knobs) // 2]
        _, t = timed(run_queries, self.searcher(10, mid), queries, threads=2, min_seconds=0, min_passes=1, max_seconds=max_seconds)
        out["warmup_s"] = round(t, 2)
        out["sweep"] = sweep(self.searcher, self.knobs_for, queries, truth, threads=threads, min_seconds=min_seconds,
                             max_seconds=max_seconds)
        # one thread at the middle knob: per-query latency without queueing, and whether the
        # binding lets two client threads run at once
        stats, res = run_queries(self.searcher(10, mid), queries, threads=1, min_seconds=min_seconds / 2,
                                 min_passes=1, max_seconds=max_seconds)
        stats.update({"k": 10, "knob": mid, "recall@10": round(recall(res, truth, 10), 4)})
        out["one_thread"] = stats
        log(f"one thread k=10 knob={mid}: {stats['qps']} QPS, p50 {stats['p50_ms']} ms")
        out["peak_rss_mib"] = hwm_mib()
        self.close()
        return out

    def batch_searcher(self, k, knob):
        return None

    def phase_batch(self, min_seconds, max_seconds):
        """Supplementary, not the protocol: the binding's own batch call over all 1000 queries
        (diskvec search_batch with threads=2, qdrant query_batch), passes repeated until
        min_seconds; QPS = answered / wall time."""
        queries, truth = load_queries(self.dataset)
        out = self.header("batch")
        self.open()
        rows = []
        for k in (10, 100):
            for knob in self.knobs_for(k):
                fn = self.batch_searcher(k, knob)
                if fn is None:
                    continue
                fn(queries[:100])  # warm-up
                cpu0 = cpu_seconds()
                t0 = time.perf_counter()
                passes = 0
                while True:
                    res = fn(queries)
                    passes += 1
                    el = time.perf_counter() - t0
                    if (el >= min_seconds and passes >= 2) or el >= max_seconds:
                        break
                row = {"k": k, "knob": knob, "passes": passes, "wall_s": round(el, 3),
                       "qps": round(passes * len(queries) / el, 1),
                       "cpu_cores_used": round((cpu_seconds() - cpu0) / el, 2),
                       f"recall@{k}": round(recall(res, truth, k), 4)}
                log(f"batch k={k} knob={knob}: {row}")
                rows.append(row)
        out["batch"] = rows
        self.close()
        return out

    def phase_filter(self, min_seconds, max_seconds):
        queries, _ = load_queries(self.dataset)
        truth = filtered_truth(self.dataset)
        out = self.header("filter")
        _, out["open_s"] = timed(self.open)
        mid = self.filter_knobs[0]
        run_queries(self.searcher(10, mid), queries, threads=2, min_seconds=0, min_passes=1, max_seconds=max_seconds)
        rows = []
        for f in FILTERS:
            sel, t = truth[f["name"]]
            for knob in self.filter_knobs:
                stats, res = run_queries(self.searcher(10, knob, f), queries, min_seconds=min_seconds, min_passes=1,
                                         max_seconds=max_seconds)
                stats.update({"filter": f["name"], "selectivity": round(sel, 5), "k": 10, "knob": knob,
                              "recall@10": round(recall(res, t, 10), 4)})
                log(f"filter {f['name']} ({sel:.3%}) knob={knob}: recall@10={stats['recall@10']} qps={stats['qps']} "
                    f"p99={stats['p99_ms']}ms errors={stats['errors']}")
                rows.append(stats)
        out["filters"] = rows
        out["peak_rss_mib"] = hwm_mib()
        self.close()
        return out

    def phase_memchild(self, min_seconds, max_seconds):
        """Runs inside the capped cgroup: open, one untimed pass, then the timed k=10 run at
        mem_knob. Writes its JSON after every step, so a kill still leaves what was reached."""
        queries, truth = load_queries(self.dataset)
        out = {"rss_after_imports_mib": rss_mib(), "stage": "open"}
        dump = lambda: write_json(self.args.child_out, out)
        dump()
        _, out["open_s"] = timed(self.open)
        out["rss_after_open_mib"] = rss_mib()
        out["stage"] = "warmup"
        dump()
        _, t = timed(run_queries, self.searcher(10, self.mem_knob), queries, threads=2, min_seconds=0, min_passes=1,
                     max_seconds=max_seconds)
        out["warmup_s"] = round(t, 2)
        out["stage"] = "search"
        dump()
        stats, res = run_queries(self.searcher(10, self.mem_knob), queries, min_seconds=min_seconds, min_passes=1,
                                 max_seconds=max_seconds)
        stats.update({"k": 10, "knob": self.mem_knob, "recall@10": round(recall(res, truth, 10), 4)})
        out["search"] = stats
        out["stage"] = "done"
        out["vm_hwm_mib"] = hwm_mib()
        out["rss_end_mib"] = rss_mib()
        dump()
        self.close()


def main(driver_cls, extra_args=None):
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--phase", required=True, choices=["load", "search", "filter", "mem", "memchild", "ingest-only", "batch"])
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--variant", default=None)
    ap.add_argument("--out", help="results JSON (phases load, search, filter, mem)")
    ap.add_argument("--child-out")
    ap.add_argument("--min-seconds", type=float, default=10.0)
    ap.add_argument("--max-seconds", type=float, default=40.0)
    ap.add_argument("--caps-mib", default="8192", help="memory caps, label=MiB,... e.g. generous=8192,tight=160")
    ap.add_argument("--mem-timeout", type=float, default=240)
    ap.add_argument("--n", type=int, default=None, help="ingest-only: points to write")
    ap.add_argument("--writers", type=int, default=1, help="load, ingest-only: client threads writing")
    ap.add_argument("--knobs10", default=None, help="search: knob values for k=10, comma-separated (overrides the driver's)")
    ap.add_argument("--knobs100", default=None, help="search: knob values for k=100, comma-separated")
    ap.add_argument("--threads", type=int, default=2, help="search: client threads of the sweep")
    if extra_args:
        extra_args(ap)
    args = ap.parse_args()
    if args.variant is None:
        args.variant = driver_cls.default_variant
    d = driver_cls(args)
    if args.knobs10 or args.knobs100:
        k10 = [int(x) for x in args.knobs10.split(",")] if args.knobs10 else list(d.knobs)
        k100 = [int(x) for x in args.knobs100.split(",")] if args.knobs100 else d.knobs_for(100)
        d.knobs = k10
        d.knobs_for = lambda k: k100 if k == 100 else k10
    if args.phase == "load":
        out = d.phase_load()
    elif args.phase == "ingest-only":
        out = d.phase_load(n=args.n, index=False)
    elif args.phase == "search":
        out = d.phase_search(args.min_seconds, args.max_seconds, threads=args.threads)
    elif args.phase == "filter":
        out = d.phase_filter(args.min_seconds, args.max_seconds)
    elif args.phase == "batch":
        out = d.phase_batch(args.min_seconds, args.max_seconds)
    elif args.phase == "memchild":
        d.phase_memchild(args.min_seconds, args.max_seconds)
        return
    elif args.phase == "mem":
        caps = []
        for part in args.caps_mib.split(","):
            label, mib = part.split("=")
            caps.append((label, int(float(mib) * 2**20)))
        passthru = ["--variant", args.variant, "--min-seconds", str(args.min_seconds), "--max-seconds", str(args.max_seconds)]
        out = d.header("mem")
        out["knob"] = d.mem_knob
        out["runs"] = mem_phase(sys.argv[0], passthru, args.dataset, [d.path], caps, args.out, timeout_s=args.mem_timeout)
    if args.out:
        write_json(args.out, out)
        log(f"wrote {args.out}")
