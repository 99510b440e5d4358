#!/usr/bin/env python3
"""QPS and p95 latency against concurrency for an index on 1, 2 and 4 emulated storage paths.

Each path is capped (IOPS and added latency) by diskvec's path emulation, so one path is the
bottleneck, as one NVMe-oF namespace was in the briefs. Concurrency is the number of queries
in flight (2 threads x queries per thread), closed loop: each finished query is replaced.

    python3 benchmarks/paths_emulated.py --dataset ../shared/datasets/wordnet-minilm384-50k \\
        --index 1=/idx/one --index 2=/idx/two --index 4=/idx/four --out docs/results/paths-emulated.json
    (build the indexes first: diskvec build ... --paths DIR1,DIR2,...)
"""
import argparse
import json
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DISKVEC = REPO / "target" / "release" / "diskvec"


def run(index, dataset, emulate, search_list, qpt, queue_depth):
    cmd = [str(DISKVEC), "search", f"--index={index}", f"--dataset={dataset}", f"--search-list={search_list}",
           "--threads=2", f"--queries-per-thread={qpt}", f"--queue-depth={queue_depth}",
           f"--emulate-path={emulate}", "--json"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def chart(rows, png, title):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(9.6, 3.8), dpi=120)
    for paths in sorted({r["paths"] for r in rows}):
        mine = [r for r in rows if r["paths"] == paths]
        c = [r["concurrency"] for r in mine]
        a.plot(c, [r["qps"] for r in mine], "o-", label=f"{paths} path{'s' if paths > 1 else ''}")
        b.plot(c, [r["p95_ms"] for r in mine], "o-", label=f"{paths} path{'s' if paths > 1 else ''}")
    a.set_xlabel("queries in flight")
    a.set_ylabel("QPS")
    b.set_xlabel("queries in flight")
    b.set_ylabel("p95 latency (ms)")
    for ax in (a, b):
        ax.set_xscale("log", base=2)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(png)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", required=True)
    p.add_argument("--index", action="append", required=True, help="PATHS=DIR, e.g. 4=/idx/four")
    p.add_argument("--emulate", default="latency_us=100,iops=8000")
    p.add_argument("--search-list", type=int, default=50)
    p.add_argument("--queries-per-thread", default="1,2,4,8,16")
    p.add_argument("--queue-depth", type=int, default=64)
    p.add_argument("--out")
    p.add_argument("--chart")
    a = p.parse_args()
    rows = []
    for spec in a.index:
        paths, index = spec.split("=", 1)
        for qpt in map(int, a.queries_per_thread.split(",")):
            j = run(index, a.dataset, a.emulate, a.search_list, qpt, a.queue_depth)
            row = {"paths": int(paths), "concurrency": 2 * qpt, "qps": j["qps"], "recall": j["recall"],
                   "p50_ms": j["p50_ms"], "p95_ms": j["p95_ms"], "p99_ms": j["p99_ms"],
                   "reads_per_second": j["reads_per_second"],
                   "path_iops": [round(x["iops"]) for x in j["paths"]],
                   "path_max_in_flight": [x["max_in_flight"] for x in j["paths"]]}
            rows.append(row)
            print(f"{row['paths']} paths, {row['concurrency']:>2} in flight: {row['qps']:7.0f} QPS, "
                  f"p95 {row['p95_ms']:7.1f} ms, recall {row['recall']:.4f}, path IOPS {row['path_iops']}", flush=True)
    result = {"emulate": a.emulate, "search_list": a.search_list, "queue_depth": a.queue_depth, "rows": rows}
    if a.out:
        Path(a.out).write_text(json.dumps(result, indent=1))
    if a.chart:
        chart(rows, a.chart, f"each path emulated as {a.emulate}; L={a.search_list}, k=10, 2 threads")
    top = {n: max(r["qps"] for r in rows if r["paths"] == n) for n in sorted({r["paths"] for r in rows})}
    print("peak QPS by paths:", {n: round(q) for n, q in top.items()},
          "ratio 4/1:", round(top.get(4, 0) / top[1], 2) if 1 in top else "n/a")


if __name__ == "__main__":
    main()
