#!/usr/bin/env python3
"""QPS at recall@100 >= 0.99 for a DRAM budget: the disk index's search inside a memory
cgroup (RAM + page cache) capped at a share of the raw vector bytes (issue 11's curve).

For each budget the index is searched in each mode whose fixed DRAM fits: the graph search
(PQ codes in DRAM) and the navigation walk (neighbour lists and 4-bit codes in DRAM, PQ codes
dropped); the rest of the budget caches nodes. The cgroup's limit is the budget plus the
process's own footprint without index data (binary, runtime, the test queries and their
ground truth), measured once per set in a probe run and reported beside the results.

Run with a Python that has numpy (benchmarks/db/common.py's cgroup helper imports it):
    PY benchmarks/navigation/budget.py --bin target/release/diskvec \\
        --dataset ../shared/datasets/wordnet-minilm384-50k --index IDX --out OUT.json
The index must have been built with a navigation file (every build since 2026-11-23 has).
"""
import argparse
import json
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "db"))
from common import run_in_cgroup  # noqa: E402

MIB = 1 << 20
MODES = {
    "graph": [],
    "navigation": ["--navigation"],
}
# Search lists swept per mode at k=100 (recall@100 >= 0.99 lies inside on every set we have).
SWEEPS = {"graph": "150,200,250,300", "navigation": "100,120,150,200,250"}


def search(args, mode, cache_nodes, search_list, queries=None, cap=None):
    """One `diskvec search` sweep; with `cap` (bytes) inside a fresh memory cgroup."""
    cmd = [args.bin, "search", "--index", args.index, "--dataset", args.dataset, "--k", "100",
           "--search-list", search_list, "--threads", str(args.threads),
           "--cache-nodes", str(cache_nodes), "--json"] + MODES[mode]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out"
        shell = ["bash", "-c", f"{shlex.join(cmd)} > {out} 2> {out}.err"]
        if cap is None:
            info = {"exit_code": subprocess.call(shell)}
        else:
            info = run_in_cgroup(shell, cap, evict=[args.index], timeout_s=args.timeout,
                                 name="budget")
        lines = [json.loads(line) for line in out.read_text().splitlines()
                 if line.startswith("{")] if out.exists() else []
        err = (Path(f"{out}.err").read_text()[-400:] if Path(f"{out}.err").exists() else "")
    return lines, info, err


def probe(args, mode):
    """Fixed DRAM of `mode` (no node cache), DRAM per cached node, process footprint."""
    none, _, err0 = search(args, mode, 0, "100")
    some, _, err1 = search(args, mode, 1000, "100")
    if not none or not some:
        raise SystemExit(f"probe of {mode} failed: {err0} {err1}")
    fixed = none[-1]["dram_index_bytes"]
    per_node = (some[-1]["dram_index_bytes"] - fixed) / 1000
    process = max(l["peak_rss_mb"] * MIB - l["dram_index_bytes"] for l in none + some)
    return {"fixed_bytes": fixed, "bytes_per_cached_node": per_node,
            "process_bytes": int(process), "navigates": bool(MODES[mode])}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bin", required=True)
    p.add_argument("--dataset", required=True)
    p.add_argument("--index", required=True)
    p.add_argument("--raw-bytes", type=int,
                   help="raw vector bytes (default: what `diskvec inspect` reports)")
    p.add_argument("--budgets", default="0.05,0.1,0.2,0.4")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--slack-mib", type=int, default=16,
                   help="added to the measured process footprint in every cgroup")
    p.add_argument("--timeout", type=int, default=900)
    p.add_argument("--out", required=True)
    args = p.parse_args()

    probes = {m: probe(args, m) for m in MODES}
    raw = args.raw_bytes
    if raw is None:
        inspect = subprocess.run([args.bin, "inspect", "--index", args.index, "--json"],
                                 check=True, capture_output=True, text=True).stdout
        raw = json.loads(inspect.strip().splitlines()[-1])["raw_vector_bytes"]
    process = max(pr["process_bytes"] for pr in probes.values()) + args.slack_mib * MIB
    report = {"dataset": args.dataset, "index": args.index, "raw_bytes": raw,
              "process_allowance_bytes": process, "probes": probes, "budgets": []}
    print(json.dumps({"raw_mib": raw / MIB, "process_allowance_mib": process / MIB,
                      "probes": probes}), flush=True)
    for share in [float(b) for b in args.budgets.split(",")]:
        budget = int(share * raw)
        row = {"share": share, "budget_bytes": budget, "cap_bytes": budget + process, "modes": {}}
        for mode, pr in probes.items():
            if pr["fixed_bytes"] > budget:
                row["modes"][mode] = {"fits": False, "fixed_bytes": pr["fixed_bytes"]}
                continue
            cache = int((budget - pr["fixed_bytes"]) // pr["bytes_per_cached_node"])
            lines, info, err = search(args, mode, cache, SWEEPS[mode], cap=budget + process)
            best = next((l for l in lines if l["recall"] >= 0.99), None)
            row["modes"][mode] = {
                "fits": True, "cache_nodes": cache, "sweep": [
                    {k: l[k] for k in ("search_list", "recall", "qps", "mean_ios", "p99_ms",
                                       "dram_index_bytes", "peak_rss_mb")} for l in lines],
                "first_at_0_99": best and {k: best[k] for k in ("search_list", "recall", "qps",
                                                                  "mean_ios")},
                "cgroup": {k: info.get(k) for k in ("exit_code", "max_usage_bytes", "failcnt",
                                                    "oom_kills", "wall_s", "stat")},
                "stderr_tail": err if info.get("exit_code") else ""}
            print(json.dumps({"share": share, "mode": mode, "cache_nodes": cache,
                              "first_at_0_99": row["modes"][mode]["first_at_0_99"],
                              "exit": info.get("exit_code"),
                              "max_usage_mib": (info.get("max_usage_bytes") or 0) / MIB,
                              "cap_mib": (budget + process) / MIB}), flush=True)
        report["budgets"].append(row)
    Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
