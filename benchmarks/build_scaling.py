#!/usr/bin/env python3
"""How cost grows with n: `diskvec build` of 768-d sets of several sizes, each inside a
memory cgroup (v1) of its budget (page cache counted), one build at a time, with the index
directory's disk peak; optionally the search's QPS at recall@100 0.95 and the database's load
duration at each size; then the chart.

    python benchmarks/build_scaling.py run --bin target/release/diskvec --work DIR \
        --sizes 250000,500000,1000000,2000000 --out results.json
    python benchmarks/build_scaling.py run --bin ... --work DIR --from synth10m-f16 \
        --sizes 1000000,2000000,5000000 --budget 2GiB --build-args "--dtype float16 \
        --graph-builder pipnn --metric cosine" --search --load PYTHON --out results.json
    python benchmarks/build_scaling.py chart results.json chart.png   (needs matplotlib)

`run` makes each set with `diskvec dataset synth` (or, with --from, `dataset head` of a larger
set: its first n rows, the same queries, exact truth over those n) when DIR/synth-N is
missing, builds it into DIR/index-N (removed after its recall is measured, like the set unless
--keep), and records the build's JSON report, the cgroup's max_usage and OOM count, the index
directory's peak bytes, and recall@10 at L=50 and 100. --search adds k = 100 at several
search lists (32 queries in flight, compact codes, in a cgroup of 10% of the raw vectors) and
the QPS at recall 0.95 read off that curve; --load PYTHON adds the database's load of the same
set through the Python API (benchmarks/db/import_large.py, run by PYTHON, in a 4 GiB cgroup).
Results already in --out (by n) are kept, so a run can be resumed or extended (--add FILE
merges another run's rows, e.g. a 10M build measured by hand).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup/memory")


def in_cgroup(limit, cmd, stdout, stderr):
    """Runs cmd in a fresh memory cgroup of `limit` bytes; returns (rc, max_usage, oom_kills)."""
    cg = CGROUP_ROOT / f"build-scaling-{os.getpid()}"
    cg.mkdir()
    try:
        (cg / "memory.limit_in_bytes").write_text(str(limit))
        try:
            (cg / "memory.swappiness").write_text("0")
        except OSError:
            pass
        join = f"echo $$ > {cg}/cgroup.procs && exec \"$@\""
        rc = subprocess.call(["bash", "-c", join, "_", *cmd], stdout=stdout, stderr=stderr)
        usage = int((cg / "memory.max_usage_in_bytes").read_text())
        oom = 0
        for line in (cg / "memory.oom_control").read_text().splitlines():
            if line.startswith("oom_kill "):
                oom = int(line.split()[1])
        return rc, usage, oom
    finally:
        cg.rmdir()


class DiskPeak(threading.Thread):
    """The largest size a directory reached, sampled every 2 s."""

    def __init__(self, path):
        super().__init__(daemon=True)
        self.path, self.peak, self.stop = path, 0, threading.Event()

    def run(self):
        while not self.stop.wait(2):
            total = 0
            for root, _, files in os.walk(self.path):
                for f in files:
                    try:
                        total += os.path.getsize(os.path.join(root, f))
                    except OSError:
                        pass
            self.peak = max(self.peak, total)


def parse_bytes(text):
    units = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
    for u, m in units.items():
        if text.endswith(u):
            return int(float(text[: -len(u)]) * m)
    return int(text)


def qps_at_recall(points, target=0.95):
    """QPS where recall crosses `target` on a curve of (recall, qps), interpolated linearly
    between the two search lists around it; None when no list reaches it."""
    points = sorted(points)
    for (r0, q0), (r1, q1) in zip(points, points[1:]):
        if r0 <= target <= r1:
            return q0 + (q1 - q0) * (target - r0) / (r1 - r0) if r1 > r0 else q1
    return points[0][1] if points and points[0][0] >= target else None


def search_curve(a, n, data, index):
    """k = 100 at several search lists, 2 threads x 16 queries in flight, compact codes, in a
    cgroup of 10% of the raw float32 vectors (at least 256 MiB: a process needs that much)."""
    cmd = [a.bin, "search", "--index", str(index), "--dataset", str(data), "--k", "100",
           "--search-list", "100,125,150,200,300", "--threads", "2", "--queries-per-thread", "16",
           "--compact-codes", "--json"]
    with open(Path(a.work) / f"search-{n}.out", "w") as so, open(Path(a.work) / f"search-{n}.err", "w") as se:
        rc, usage, oom = in_cgroup(max(n * 768 * 4 // 10, 256 << 20), cmd, so, se)
    curve = [{k: r.get(k) for k in ("search_list", "recall", "qps", "p99_ms", "mean_ios")}
             for r in json_lines((Path(a.work) / f"search-{n}.out").read_text()) if "recall" in r]
    return {"rc": rc, "cgroup_max_usage": usage, "oom_kills": oom, "curve": curve,
            "qps_at_recall_0_95": qps_at_recall([(c["recall"], c["qps"]) for c in curve])}


def load_db(a, n, data):
    """The set loaded into a database through the Python API in a 4 GiB cgroup, to green."""
    db = Path(a.work) / f"db-{n}"
    shutil.rmtree(db, ignore_errors=True)
    out = Path(a.work) / f"load-{n}.json"
    script = Path(__file__).resolve().parent / "db" / "import_large.py"
    with open(Path(a.work) / f"load-{n}.err", "w") as se:
        rc, usage, oom = in_cgroup(4 << 30, [a.load, str(script), "--api", "python", "--dataset", str(data),
                                             "--db", str(db), "--out", str(out)], subprocess.DEVNULL, se)
    shutil.rmtree(db, ignore_errors=True)
    report = json.loads(out.read_text()) if rc == 0 and out.exists() else None
    return {"rc": rc, "cgroup_max_usage": usage, "oom_kills": oom, "report": report}


def json_lines(text):
    """The JSON objects a command printed, one a line, among its other output."""
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def last_json(text):
    found = json_lines(text)
    return found[-1] if found else None


def cpu_name():
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def run(a):
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    out = Path(a.out)
    rows = {r["n"]: r for r in json.loads(out.read_text())["rows"]} if out.exists() else {}
    sizes = a.sizes or ("" if a.add else "250000,500000,1000000,2000000")
    for n in [int(x) for x in sizes.split(",") if x]:
        if n in rows:
            continue
        data = work / f"synth-{n}"
        if not (data / "train.parquet").exists():
            t = time.time()
            make = (["dataset", "head", "--from", a.source, "--n", str(n)] if a.source
                    else ["dataset", "synth", "--n", str(n), "--dim", "768"])
            subprocess.check_call([a.bin, *make, "--out", str(data)], stdout=subprocess.DEVNULL)
            print(f"{make[1]} {n}: {time.time() - t:.0f} s", file=sys.stderr)
        index = work / f"index-{n}"
        shutil.rmtree(index, ignore_errors=True)
        raw = n * 768 * 4
        budget = parse_bytes(a.budget) if a.budget else raw // 4
        budget_arg = a.budget or "25%"
        extra = a.build_args.split() if a.build_args else ["--metric", "l2"]
        disk = DiskPeak(index)
        disk.start()
        with open(work / f"build-{n}.out", "w") as so, open(work / f"build-{n}.err", "w") as se:
            t = time.time()
            rc, usage, oom = in_cgroup(budget, [a.bin, "build", "--dataset", str(data), "--index", str(index),
                                                *extra, "--memory-budget", budget_arg, "--json"], so, se)
            wall = time.time() - t
        disk.stop.set()
        disk.join()
        disk.peak = max(disk.peak, sum(f.stat().st_size for f in index.iterdir()) if index.exists() else 0)
        report = last_json((work / f"build-{n}.out").read_text()) if rc == 0 else None
        row = {"n": n, "rc": rc, "wall_s": round(wall, 1), "budget_bytes": budget, "cgroup_max_usage": usage,
               "oom_kills": oom, "build": report, "index_disk_peak_bytes": disk.peak,
               "synthetic": True, "cpu": cpu_name()}
        if rc == 0:
            s = subprocess.run([a.bin, "search", "--index", str(index), "--dataset", str(data), "--k", "10",
                                "--search-list", "50,100", "--json"], capture_output=True, text=True, check=True)
            row["recall"] = json_lines(s.stdout)
            row["index_at_rest_bytes"] = sum(f.stat().st_size for f in index.iterdir())
            if a.search:
                row["search"] = search_curve(a, n, data, index)
        shutil.rmtree(index, ignore_errors=True)
        if rc == 0 and a.load:
            row["load"] = load_db(a, n, data)
        print(json.dumps({k: row[k] for k in ("n", "rc", "wall_s", "cgroup_max_usage", "oom_kills")}), file=sys.stderr)
        rows[n] = row
        out.write_text(json.dumps({"machine": os.uname().nodename, "rows": sorted(rows.values(), key=lambda r: r["n"])},
                                  indent=1))
        if not a.keep:
            shutil.rmtree(data, ignore_errors=True)
    if a.add:
        for r in json.loads(Path(a.add).read_text())["rows"]:
            rows.setdefault(r["n"], r)
        out.write_text(json.dumps({"machine": os.uname().nodename, "rows": sorted(rows.values(), key=lambda r: r["n"])},
                                  indent=1))


def chart(results, png):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in json.loads(Path(results).read_text())["rows"] if r.get("rc") == 0]
    n = [r["n"] / 1e6 for r in rows]

    def series(get):
        """(n, value) of the rows that have the value."""
        return [(x, get(r)) for x, r in zip(n, rows) if get(r)]

    def plot(ax, pts, style, label, **kw):
        if pts:
            ax.plot(*zip(*pts), style, label=label, **kw)

    def finish(ax, ylabel, title, log=False):
        ax.set_xlabel("vectors (millions, 768-d)")
        ax.set_ylabel(ylabel)
        if log:
            ax.set_yscale("log")
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=0.3, which="both" if log else "major")
        ax.legend(fontsize=8)

    def load(r):
        return (r.get("load") or {}).get("report") or {}

    fig, ((t_ax, m_ax), (d_ax, q_ax)) = plt.subplots(2, 2, figsize=(11, 8), dpi=120)
    plot(t_ax, series(lambda r: r["build"]["build_seconds"]), "o-", "index build")
    plot(t_ax, series(lambda r: r["build"]["graph_seconds"]), "s--", "its graph phase")
    plot(t_ax, series(lambda r: load(r).get("load_duration_seconds")), "^-", "database load to green")
    finish(t_ax, "seconds", "time")
    mib = 2 ** 20
    plot(m_ax, series(lambda r: r["n"] * 768 * 4 / mib), ":", "raw float32 vectors", color="grey")
    plot(m_ax, series(lambda r: r["budget_bytes"] / mib), "--", "build budget (cgroup limit)")
    plot(m_ax, series(lambda r: r["build"]["peak_rss_mb"]), "o-", "build peak RSS")
    finish(m_ax, "MiB", "memory", log=True)
    gb = 1e9
    plot(d_ax, series(lambda r: r.get("index_at_rest_bytes", 0) / gb), "o-", "index at rest")
    plot(d_ax, series(lambda r: r.get("index_disk_peak_bytes", 0) / gb), "s--", "index directory at its build peak")
    plot(d_ax, series(lambda r: load(r).get("disk_peak_bytes", 0) / gb), "^-", "database at its load peak")
    finish(d_ax, "GB", "disk")
    plot(q_ax, series(lambda r: (r.get("search") or {}).get("qps_at_recall_0_95")), "o-",
         "QPS at recall@100 0.95 (32 in flight)")
    finish(q_ax, "queries a second", "search inside 10% of the raw vectors (compact codes)")
    cpus = sorted({r.get("cpu", "unknown") for r in rows})
    fig.suptitle(f"diskvec cost against n, synthetic 768-d sets; CPU: {', '.join(cpus)}", fontsize=10)
    fig.tight_layout()
    fig.savefig(png)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--bin", required=True)
    r.add_argument("--work", required=True)
    r.add_argument("--sizes", help="comma-separated n (default 250000,500000,1000000,2000000; "
                   "none when only --add is given)")
    r.add_argument("--out", required=True)
    r.add_argument("--keep", action="store_true", help="keep the generated sets")
    r.add_argument("--from", dest="source", help="cut each set from this larger dataset (dataset head)")
    r.add_argument("--budget", help="the build's memory budget and cgroup limit, e.g. 2GiB (default 25%% of raw)")
    r.add_argument("--build-args", help='extra build flags (default "--metric l2")')
    r.add_argument("--search", action="store_true", help="QPS at recall@100 0.95 (k = 100 sweep)")
    r.add_argument("--load", metavar="PYTHON", help="a Python with diskvec installed: measure the database load")
    r.add_argument("--add", help="merge rows of another results file")
    c = sub.add_parser("chart")
    c.add_argument("results")
    c.add_argument("png")
    a = ap.parse_args()
    if a.cmd == "run":
        run(a)
    else:
        chart(a.results, a.png)


if __name__ == "__main__":
    main()
