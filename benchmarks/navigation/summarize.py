"""Table of a navigation sweep (sweep.sh): per run name and search list, recall, reads per
query, median QPS over the rounds (and each round's), p99 and index DRAM.
Usage: python3 summarize.py RUNS_DIR [--json OUT]"""
import collections
import glob
import json
import os
import statistics
import sys

runs = sys.argv[1]
rows = collections.defaultdict(list)
for path in sorted(glob.glob(os.path.join(runs, "*.json"))):
    name = os.path.basename(path).rsplit("-r", 1)[0]
    for line in open(path):
        j = json.loads(line)
        rows[(name, j["search_list"])].append(j)
print("| run | L | recall | reads/query | QPS (median) | QPS per round | p99 ms | index DRAM MiB |")
print("|---|---:|---:|---:|---:|---|---:|---:|")
table = []
for (name, L), js in sorted(rows.items()):
    qps = [j["qps"] for j in js]
    row = {
        "run": name,
        "search_list": L,
        "recall": js[0]["recall"],
        "reads_per_query": statistics.mean(j["mean_ios"] for j in js),
        "qps_median": statistics.median(qps),
        "qps_rounds": qps,
        "p99_ms": statistics.median(j["p99_ms"] for j in js),
        "dram_mib": js[0]["dram_index_bytes"] / 2**20,
    }
    table.append(row)
    print(f"| {name} | {L} | {row['recall']:.4f} | {row['reads_per_query']:.1f} | {row['qps_median']:.0f} | "
          f"{' / '.join(f'{q:.0f}' for q in qps)} | {row['p99_ms']:.1f} | {row['dram_mib']:.1f} |")
if "--json" in sys.argv:
    with open(sys.argv[sys.argv.index("--json") + 1], "w") as f:
        json.dump({"rows": table, "runs": {f"{n}@{L}": js for (n, L), js in rows.items()}}, f, indent=1)
