#!/usr/bin/env python3
"""QPS at recall@100 >= 0.99 for a DRAM budget: disk-index searches inside a memory cgroup
(RAM + page cache) capped at a share of the raw vector bytes (issue 11's curve).

For each budget, diskvec's index is searched in each mode whose fixed DRAM fits: the graph
search (PQ codes in DRAM) and the navigation walk (neighbour lists and 4-bit codes in DRAM,
PQ codes dropped), with exact distances and with estimated ones for the surely-in candidates; with --dap-python, diskannpy 0.7.0 too (its PQ codes in DRAM). The rest of
each budget caches nodes. A cgroup's limit is the budget plus the process's own footprint
without index data (binary or interpreter, libraries, the test queries and their ground
truth), measured per system in a probe run (peak RSS less index DRAM) and reported.

Run with a Python that has numpy (benchmarks/db/common.py's cgroup helper imports it):
    PY benchmarks/navigation/budget.py --bin target/release/diskvec \\
        --dataset ../shared/datasets/wordnet-minilm384-50k --index IDX --out OUT.json \\
        [--dap-python DAP_VENV/bin/python --dap-work DIR]
The index must have a navigation file (every build since 2026-11-23 has); DIR must hold a
diskannpy index built by `benchmarks/disk_vs_diskannpy.py --mode dap-build --work DIR`.
"""
import argparse
import json
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "db"))
from common import run_in_cgroup  # noqa: E402

MIB = 1 << 20
DISKVEC_MODES = {"graph": [], "navigation": ["--navigation"],
                 "navigation-estimated": ["--navigation", "--estimated-distances"]}
# Search lists swept per system at k=100 (recall@100 >= 0.99 lies inside on every set we have).
SWEEPS = {"graph": "150,200,250,300,400", "navigation": "100,120,150,200,250",
          "navigation-estimated": "100,120,150,200,250", "diskannpy": "150,200,250,300,400"}
ROW_KEYS = ("search_list", "recall", "qps", "mean_ios")


def run(shell_cmd, cap, args, evict):
    """Runs a shell command, inside a fresh memory cgroup of `cap` bytes unless None;
    returns its stdout's JSON lines, the cgroup's counters and the tail of its stderr."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out"
        shell = ["bash", "-c", f"{shell_cmd} > {out} 2> {out}.err"]
        if cap is None:
            info = {"exit_code": subprocess.call(shell)}
        else:
            info = run_in_cgroup(shell, cap, evict=evict, timeout_s=args.timeout, name="budget")
        text = out.read_text() if out.exists() else ""
        lines = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
        err = Path(f"{out}.err").read_text()[-400:] if Path(f"{out}.err").exists() else ""
    return lines, info, err


def search(args, system, cache_nodes, search_list, cap=None):
    """One sweep of `system`; returns (rows, peak RSS MiB, index DRAM bytes or None, cgroup
    info, stderr tail)."""
    if system == "diskannpy":
        cmd = [args.dap_python, str(HERE.parent / "disk_vs_diskannpy.py"), "--mode", "dap-search",
               "--dataset", args.dataset, "--work", args.dap_work, "--metric", args.metric,
               "--k", "100", "--threads", str(args.threads), "--cache-nodes", str(cache_nodes),
               "--search-list", search_list, "--repeat", "1"]
        lines, info, err = run(shlex.join(cmd), cap, args, [args.dap_work])
        last = lines[-1] if lines else {"rows": [], "peak_rss_mb": 0}
        return last["rows"], last["peak_rss_mb"], None, info, err
    cmd = [args.bin, "search", "--index", args.index, "--dataset", args.dataset, "--k", "100",
           "--search-list", search_list, "--threads", str(args.threads),
           "--cache-nodes", str(cache_nodes), "--json"] + DISKVEC_MODES[system]
    lines, info, err = run(shlex.join(cmd), cap, args, [args.index])
    peak = max((l["peak_rss_mb"] for l in lines), default=0)
    dram = lines[-1]["dram_index_bytes"] if lines else None
    return lines, peak, dram, info, err


def dap_fixed_and_per_node(args, count, dim):
    """diskannpy's index DRAM by DiskANN's own layout: PQ codes and pivots, then per cached
    node its vector and its neighbour list (count + max_degree ids)."""
    work = Path(args.dap_work) / "dap-index"
    pq_bytes = int(np.fromfile(work / "ann_pq_compressed.bin", dtype=np.int32, count=2)[1])
    pivots = (work / "ann_pq_pivots.bin").stat().st_size
    return count * pq_bytes + pivots, dim * 4 + (args.dap_max_degree + 1) * 4


def probe(args, system, inspect):
    """Fixed index DRAM of `system` (no node cache), DRAM per cached node, and the
    process's footprint beside its index."""
    if system == "diskannpy":
        fixed, per_node = dap_fixed_and_per_node(args, inspect["count"], inspect["dim"])
        rows, peak, _, _, err = search(args, system, 0, "100")
        if not rows:
            raise SystemExit(f"probe of diskannpy failed: {err}")
        return {"fixed_bytes": fixed, "bytes_per_cached_node": per_node,
                "process_bytes": int(peak * MIB - fixed)}
    none, peak0, fixed, _, err0 = search(args, system, 0, "100")
    some, peak1, dram1, _, err1 = search(args, system, 1000, "100")
    if not none or not some:
        raise SystemExit(f"probe of {system} failed: {err0} {err1}")
    return {"fixed_bytes": fixed, "bytes_per_cached_node": (dram1 - fixed) / 1000,
            "process_bytes": int(max(peak0 * MIB - fixed, peak1 * MIB - dram1))}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bin", required=True)
    p.add_argument("--dataset", required=True)
    p.add_argument("--index", required=True)
    p.add_argument("--metric", default="cosine", help="for diskannpy (cosine runs as L2 there)")
    p.add_argument("--budgets", default="0.05,0.1,0.2,0.4")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--slack-mib", type=int, default=16,
                   help="added to the measured process footprint in every cgroup")
    p.add_argument("--timeout", type=int, default=900)
    p.add_argument("--rounds", type=int, default=1, help="alternating runs per budget; median")
    p.add_argument("--dap-python", help="a Python with diskannpy 0.7.0, numpy and pyarrow")
    p.add_argument("--dap-work", help="the --work directory of its dap-build")
    p.add_argument("--dap-max-degree", type=int, default=64)
    p.add_argument("--out", required=True)
    args = p.parse_args()

    inspect = subprocess.run([args.bin, "inspect", "--index", args.index, "--json"],
                             check=True, capture_output=True, text=True).stdout
    inspect = json.loads(inspect.strip().splitlines()[-1])
    raw = inspect["raw_vector_bytes"]
    systems = list(DISKVEC_MODES) + (["diskannpy"] if args.dap_python else [])
    probes = {s: probe(args, s, inspect) for s in systems}
    for pr in probes.values():
        pr["allowance_bytes"] = pr["process_bytes"] + args.slack_mib * MIB
    report = {"dataset": args.dataset, "index": args.index, "raw_bytes": raw,
              "slack_mib": args.slack_mib, "probes": probes, "budgets": []}
    print(json.dumps({"raw_mib": raw / MIB, "probes": probes}), flush=True)
    for share in [float(b) for b in args.budgets.split(",")]:
        budget = int(share * raw)
        row = {"share": share, "budget_bytes": budget, "systems": {}}
        fitting = {}
        for system, pr in probes.items():
            if pr["fixed_bytes"] > budget:
                row["systems"][system] = {"fits": False, "fixed_bytes": pr["fixed_bytes"]}
                print(json.dumps({"share": share, "system": system, "fits": False}), flush=True)
            else:
                fitting[system] = int((budget - pr["fixed_bytes"]) // pr["bytes_per_cached_node"])
        # Rounds alternate the systems, so a slow minute of the shared disk hits all of them.
        for round_no in range(args.rounds):
            for system, cache in fitting.items():
                cap = budget + probes[system]["allowance_bytes"]
                rows, peak, dram, info, err = search(args, system, cache, SWEEPS[system], cap=cap)
                entry = row["systems"].setdefault(system, {
                    "fits": True, "cache_nodes": cache, "cap_bytes": cap, "index_dram_bytes": dram,
                    "rounds": []})
                entry["rounds"].append({
                    "peak_rss_mb": peak, "sweep": [{k: r[k] for k in ROW_KEYS} for r in rows],
                    "cgroup": {k: info.get(k) for k in ("exit_code", "max_usage_bytes", "failcnt",
                                                        "oom_kills", "wall_s", "stat")},
                    "stderr_tail": err if info.get("exit_code") else ""})
                print(json.dumps({"share": share, "system": system, "round": round_no,
                                  "cache_nodes": cache, "exit": info.get("exit_code"),
                                  "first_at_0_99": next(({k: r[k] for k in ROW_KEYS} for r in rows
                                                         if r["recall"] >= 0.99), None),
                                  "cap_mib": cap / MIB,
                                  "max_usage_mib": (info.get("max_usage_bytes") or 0) / MIB}),
                      flush=True)
        for system in fitting:
            entry = row["systems"][system]
            entry["sweep"] = median_sweep([r["sweep"] for r in entry["rounds"]])
            entry["first_at_0_99"] = next((r for r in entry["sweep"] if r["recall"] >= 0.99), None)
        report["budgets"].append(row)
        Path(args.out).write_text(json.dumps(report, indent=1))


def median_sweep(rounds):
    """Per search list, the median QPS and reads of the rounds that ran it (recall is the
    same in every round up to thread timing: the mean)."""
    by_list = {}
    for sweep in rounds:
        for r in sweep:
            by_list.setdefault(r["search_list"], []).append(r)
    return [{"search_list": l, "recall": float(np.mean([r["recall"] for r in rs])),
             "qps": float(np.median([r["qps"] for r in rs])),
             "mean_ios": float(np.median([r["mean_ios"] for r in rs])), "rounds": len(rs)}
            for l, rs in sorted(by_list.items())]

if __name__ == "__main__":
    main()
