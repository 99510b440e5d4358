#!/usr/bin/env python3
"""float16 (and float32) node records on the shipped real sets, same run, same binary.

For each dataset: one index per datatype (`diskvec build --dtype`), then `diskvec search` at
k = 10 (search lists 50/100/200) and k = 100 (100/200/300), with the graph walked from SSD (plain) and in DRAM
(`--navigation`); QPS is the median of `--repeat` runs, the datatypes taking turns. Prints a markdown table and writes the
raw rows as JSON.

    python3 benchmarks/datatypes.py --bin target/release/diskvec \
        --datasets ../shared/datasets/wordnet-mpnet768-25k,../shared/datasets/wordnet-minilm384-50k \
        --work /tmp/dtype-bench --out docs/results/datatypes-2026-12-06
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path


def run_json(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def cpu_name():
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="target/release/diskvec")
    ap.add_argument("--datasets", required=True)
    ap.add_argument("--dtypes", default="float32,float16")
    ap.add_argument("--lists-k10", default="50,100,200")
    ap.add_argument("--lists-k100", default="100,200,300")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    work, out = Path(a.work), Path(a.out)
    work.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for ds in a.datasets.split(","):
        name = Path(ds).name
        dtypes = a.dtypes.split(",")
        info = {}
        for dtype in dtypes:
            ix = work / f"{name}-{dtype}"
            built = run_json([a.bin, "build", "--dataset", ds, "--index", str(ix), "--dtype", dtype,
                              "--threads", str(a.threads), "--json"])[-1]
            info[dtype] = dict(run_json([a.bin, "inspect", "--index", str(ix), "--json"])[-1],
                               build_seconds=built["build_seconds"])
            print(f"{name} {dtype}: built in {built['build_seconds']:.1f} s, record "
                  f"{info[dtype]['node_bytes']} B x {info[dtype]['nodes_per_sector']}/sector, disk "
                  f"{info[dtype]['disk_bytes'] / 1e6:.1f} MB", file=sys.stderr)
        for mode, extra in [("ssd walk", []), ("navigation", ["--navigation"])]:
            for k in (10, 100):
                lists = ",".join(str(l) for l in (a.lists_k10 if k == 10 else a.lists_k100).split(","))
                # Repeats alternate the datatypes, so drift in the shared disk's rate falls on both.
                runs = {d: [] for d in dtypes}
                for _ in range(a.repeat):
                    for dtype in dtypes:
                        runs[dtype].append(run_json([
                            a.bin, "search", "--index", str(work / f"{name}-{dtype}"), "--dataset", ds,
                            "--k", str(k), "--search-list", lists, "--threads", str(a.threads), "--json",
                            *extra]))
                for dtype in dtypes:
                    for per_list in zip(*runs[dtype]):
                        first = per_list[0]
                        rows.append({
                            "dataset": name, "dtype": dtype, "mode": mode, "k": k,
                            "search_list": first["search_list"], "recall": first["recall"],
                            "reads": first["mean_ios"], "read_bytes": first["mean_ios"] * 4096,
                            "qps": statistics.median(r["qps"] for r in per_list),
                            "p99_ms": statistics.median(r["p99_ms"] for r in per_list),
                            "node_bytes": info[dtype]["node_bytes"],
                            "per_sector": info[dtype]["nodes_per_sector"],
                            "disk_bytes": info[dtype]["disk_bytes"],
                            "build_seconds": info[dtype]["build_seconds"],
                        })
    meta = {"cpu": cpu_name(), "cores": os.cpu_count(), "bin": a.bin, "rows": rows}
    (out / "datatypes.json").write_text(json.dumps(meta, indent=1))
    print(f"CPU: {meta['cpu']}, {meta['cores']} vCPU; QPS median of {a.repeat}, {a.threads} threads\n")
    print("| dataset | mode | k | L | dtype | record | recall | reads/q | KiB read/q | QPS | p99 ms |")
    print("|---|---|---:|---:|---|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['dataset']} | {r['mode']} | {r['k']} | {r['search_list']} | {r['dtype']} | "
              f"{r['node_bytes']} B, {r['per_sector']}/sector | {r['recall']:.4f} | {r['reads']:.1f} | "
              f"{r['read_bytes'] / 1024:.0f} | {r['qps']:.0f} | {r['p99_ms']:.2f} |")


if __name__ == "__main__":
    main()
