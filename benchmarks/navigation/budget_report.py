#!/usr/bin/env python3
"""Tables and a chart from budget.py's results: QPS at recall@100 >= 0.99 per DRAM budget.

    python benchmarks/navigation/budget_report.py OUT.png SET=FILE[,FILE...] ... \\
        [--in-memory SET=LABEL:SHARE:QPS ...]

Each SET names one panel; its files (e.g. the default build's 10-40% and the small-PQ build's
5%) are merged. --in-memory adds the in-memory HNSW points measured elsewhere (their DRAM as
a share of the raw vectors). Prints one markdown table per set. Needs matplotlib.
"""
import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

LABELS = {"graph": "diskvec, graph search", "navigation": "diskvec, navigation (exact distances)",
          "navigation-estimated": "diskvec, navigation (estimated surely-in)",
          "diskannpy": "diskannpy 0.7.0"}


def rows_of(files):
    rows = []
    for f in files:
        report = json.load(open(f))
        for b in report["budgets"]:
            for system, e in b["systems"].items():
                rows.append((b["share"], system, e, report["raw_bytes"]))
    return sorted(rows, key=lambda r: (r[0], list(LABELS).index(r[1])))


def table(name, rows):
    print(f"\n{name}\n")
    print("| DRAM budget | system | cache nodes | first L at recall@100 >= 0.99 | recall | QPS | reads/query |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for share, system, e, raw in rows:
        budget = f"{share:.0%} ({share * raw / 2**20:.1f} MiB)"
        if not e["fits"]:
            print(f"| {budget} | {LABELS[system]} | does not fit: needs {e['fixed_bytes'] / 2**20:.1f} MiB "
                  f"before any cache | | | | |")
            continue
        best = e.get("first_at_0_99")
        if best is None:
            top = max(e["sweep"], key=lambda r: r["recall"], default=None)
            got = f"none up to L={top['search_list']} ({top['recall']:.4f})" if top else "no result"
            print(f"| {budget} | {LABELS[system]} | {e['cache_nodes']} | {got} | | | |")
            continue
        print(f"| {budget} | {LABELS[system]} | {e['cache_nodes']} | {best['search_list']} | "
              f"{best['recall']:.4f} | {best['qps']:.0f} | {best['mean_ios']:.1f} |")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("png")
    p.add_argument("sets", nargs="+", help="SET=FILE[,FILE...]")
    p.add_argument("--in-memory", action="append", default=[], help="SET=LABEL:SHARE:QPS")
    a = p.parse_args()
    sets = [(s.split("=", 1)[0], s.split("=", 1)[1].split(",")) for s in a.sets]
    extra = {}
    for spec in a.in_memory:
        name, rest = spec.split("=", 1)
        label, share, qps = rest.rsplit(":", 2)
        extra.setdefault(name, []).append((label, float(share), float(qps)))
    fig, axes = plt.subplots(1, len(sets), figsize=(5.2 * len(sets), 4.2), dpi=110, squeeze=False)
    for ax, (name, files) in zip(axes[0], sets):
        rows = rows_of(files)
        table(name, rows)
        for system in LABELS:
            pts = [(share * 100, e["first_at_0_99"]["qps"]) for share, s, e, _ in rows
                   if s == system and e["fits"] and e.get("first_at_0_99")]
            if pts:
                ax.plot(*zip(*pts), "o-" if system != "diskannpy" else "s--", label=LABELS[system])
        for label, share, qps in extra.get(name, []):
            ax.plot([share * 100], [qps], "*", markersize=11, label=label)
        ax.set_ylim(bottom=0)
        ax.set_xscale("log")
        ax.set_xticks([5, 10, 20, 40, 100])
        ax.set_xticklabels(["5%", "10%", "20%", "40%", "100%"])
        ax.set_title(f"{name}: k=100, recall@100 >= 0.99", fontsize=9)
        ax.set_xlabel("index DRAM (memory cgroup) / raw vector bytes")
        ax.set_ylabel("queries per second (2 threads)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(a.png)


if __name__ == "__main__":
    main()
