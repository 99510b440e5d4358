#!/usr/bin/env python3
"""Charts of `diskvec bench` results files (PNG, matplotlib): QPS against recall over each
configuration's sweep, QPS per concurrency level, and serial latency percentiles.

    python3 benchmarks/bench_charts.py OUT_DIR results1.json [results2.json ...]

`diskvec bench` embeds this file and runs it after a run when matplotlib is importable.
"""
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def chart(run, out):
    name = run["dataset"]["name"]
    results = run["results"]
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8))
    ax = axes[0]
    for r in results:
        pts = [(p["recall"], p["qps"]) for p in sorted(r["sweep"], key=lambda p: p["knob"])]
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=r["label"])
    ax.set_xlabel(f"recall@{run['k']}")
    ax.set_ylabel("QPS (at the best concurrency)")
    ax.set_yscale("log")
    ax.set_title("QPS vs recall (ef / L sweep)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax = axes[1]
    for r in results:
        ax.plot(r["conc_num_list"], r["conc_qps_list"], marker="o", label=r["label"])
    ax.set_xlabel("concurrent clients")
    ax.set_ylabel("QPS")
    ax.set_title("Concurrent phase")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax = axes[2]
    width = 0.8 / max(1, len(results))
    for i, r in enumerate(results):
        vals = [r["serial_latency_p50"], r["serial_latency_p95"], r["serial_latency_p99"]]
        ax.bar([x + i * width for x in range(3)], vals, width, label=r["label"])
    ax.set_xticks([x + width * (len(results) - 1) / 2 for x in range(3)], ["p50", "p95", "p99"])
    ax.set_ylabel("ms")
    ax.set_title("Serial latency")
    ax.legend(fontsize=8)
    synth = " (synthetic)" if run["dataset"].get("synthetic") else ""
    fig.suptitle(f"{name}{synth}: {run['dataset']['vectors']:,} x {run['dataset']['dim']}, {run['date']}, {run['machine']}",
                 fontsize=9)
    fig.tight_layout()
    path = Path(out) / f"{name}.png"
    fig.savefig(path, dpi=110)
    print(path)


def main():
    out = sys.argv[1]
    for f in sys.argv[2:]:
        chart(json.loads(Path(f).read_text()), out)


if __name__ == "__main__":
    main()
