#!/usr/bin/env python3
"""Draws QPS against recall@10 for diskvec and diskannpy from disk_vs_diskannpy.py results.

    python benchmarks/plot.py docs/results/wordnet-minilm384-50k.json docs/qps-recall-minilm384.png
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(results_path, png_path):
    r = json.load(open(results_path))
    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=120)
    dv = r["diskvec"]["search"]
    dp = r["diskannpy"]["search"]["rows"]
    ax.plot([x["recall"] for x in dv], [x["qps"] for x in dv], "o-", label="diskvec (io_uring, 16 queries in flight/thread)")
    ax.plot([x["recall"] for x in dp], [x["qps"] for x in dp], "s--", label="diskannpy 0.7.0")
    for x in dv:
        ax.annotate(f"L={x['search_list']}", (x["recall"], x["qps"]), textcoords="offset points", xytext=(4, 4), fontsize=7)
    p = r["params"]
    ax.set_title(f"{r['dataset'].rstrip('/').split('/')[-1]}: R={p['max_degree']}, L_build={p['build_list']}, "
                 f"PQ {p['pq_bytes']} B, W={p['beam_width']}, {p['threads']} threads", fontsize=9)
    ax.set_xlabel("recall@10")
    ax.set_ylabel("queries per second")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png_path)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
