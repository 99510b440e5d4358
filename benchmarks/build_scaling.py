#!/usr/bin/env python3
"""Build time and peak memory against n: `diskvec build --memory-budget 25%` of synthetic
768-d sets of several sizes, each inside a memory cgroup (v1) of its budget (page cache
counted), one build at a time; then the chart.

    python benchmarks/build_scaling.py run --bin target/release/diskvec --work DIR \
        --sizes 250000,500000,1000000,2000000 --out results.json
    python benchmarks/build_scaling.py chart results.json chart.png   (needs matplotlib)

`run` makes each set with `diskvec dataset synth` when DIR/synth-N is missing, builds it into
DIR/index-N (removed after its recall is measured, like the set unless --keep), and records
the build's JSON report, the cgroup's max_usage and OOM count, and recall@10 at L=50 and 100.
Results already in --out (by n) are kept, so a run can be resumed or extended (--add FILE
merges another run's rows, e.g. a 4M build measured by hand).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
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


def last_json(text):
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return None


def run(a):
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    out = Path(a.out)
    rows = {r["n"]: r for r in json.loads(out.read_text())["rows"]} if out.exists() else {}
    for n in [int(x) for x in a.sizes.split(",")]:
        if n in rows:
            continue
        data = work / f"synth-{n}"
        if not (data / "train.parquet").exists():
            t = time.time()
            subprocess.check_call([a.bin, "dataset", "synth", "--n", str(n), "--dim", "768", "--out", str(data)],
                                  stdout=subprocess.DEVNULL)
            print(f"synth {n}: {time.time() - t:.0f} s", file=sys.stderr)
        index = work / f"index-{n}"
        shutil.rmtree(index, ignore_errors=True)
        raw = n * 768 * 4
        budget = raw // 4
        with open(work / f"build-{n}.out", "w") as so, open(work / f"build-{n}.err", "w") as se:
            t = time.time()
            rc, usage, oom = in_cgroup(budget, [a.bin, "build", "--dataset", str(data), "--index", str(index),
                                                "--metric", "l2", "--memory-budget", "25%", "--json"], so, se)
            wall = time.time() - t
        report = last_json((work / f"build-{n}.out").read_text()) if rc == 0 else None
        row = {"n": n, "rc": rc, "wall_s": round(wall, 1), "budget_bytes": budget, "cgroup_max_usage": usage,
               "oom_kills": oom, "build": report}
        if rc == 0:
            s = subprocess.run([a.bin, "search", "--index", str(index), "--dataset", str(data), "--k", "10",
                                "--search-list", "50,100", "--json"], capture_output=True, text=True, check=True)
            row["recall"] = [json.loads(line) for line in s.stdout.splitlines() if line.startswith("{")]
        print(json.dumps({k: row[k] for k in ("n", "rc", "wall_s", "cgroup_max_usage", "oom_kills")}), file=sys.stderr)
        rows[n] = row
        out.write_text(json.dumps({"machine": os.uname().nodename, "rows": sorted(rows.values(), key=lambda r: r["n"])},
                                  indent=1))
        shutil.rmtree(index, ignore_errors=True)
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
    fig, (t_ax, m_ax) = plt.subplots(1, 2, figsize=(11, 4.2), dpi=120)
    t_ax.plot(n, [r["build"]["build_seconds"] for r in rows], "o-", label="build")
    t_ax.plot(n, [r["build"]["graph_seconds"] for r in rows], "s--", label="graph phase")
    for r, x in zip(rows, n):
        share = r["budget_bytes"] / (r["n"] * 768 * 4)
        t_ax.annotate(f"{r['build']['shards']} shards, budget {share:.0%}", (x, r["build"]["build_seconds"]),
                      textcoords="offset points", xytext=(-30, 8), fontsize=7)
    t_ax.set_xlabel("vectors (millions, 768-d)")
    t_ax.set_ylabel("seconds")
    t_ax.set_title("diskvec build within a memory budget (a share of the raw vectors)", fontsize=9)
    t_ax.grid(alpha=0.3)
    t_ax.legend(fontsize=8)
    mib = 2 ** 20
    m_ax.plot(n, [r["n"] * 768 * 4 / mib for r in rows], ":", color="grey", label="raw vectors")
    m_ax.plot(n, [r["budget_bytes"] / mib for r in rows], "--", label="budget (cgroup limit)")
    m_ax.plot(n, [r["build"]["peak_rss_mb"] for r in rows], "o-", label="peak RSS")
    m_ax.set_xlabel("vectors (millions, 768-d)")
    m_ax.set_ylabel("MiB")
    m_ax.set_yscale("log")
    m_ax.set_title("memory: cgroup limit (RSS + page cache) and the build's RSS", fontsize=9)
    m_ax.grid(alpha=0.3, which="both")
    m_ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--bin", required=True)
    r.add_argument("--work", required=True)
    r.add_argument("--sizes", default="250000,500000,1000000,2000000")
    r.add_argument("--out", required=True)
    r.add_argument("--keep", action="store_true", help="keep the generated sets")
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
