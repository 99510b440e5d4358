#!/usr/bin/env python3
"""The table of caps1m.sh: for each memory cap and client thread count, each system's best QPS
among its knob settings that reach a recall target (recall@10 >= 0.95 and 0.99 at k=10,
recall@100 >= 0.95 and 0.99 at k=100), and diskvec's ratio to qdrant-edge's; a system whose
search process was killed (OOM) or reached no setting with that recall shows why. Also
draws QPS against the cap (the DRAM a process may use), both systems, one line per target.

    python benchmarks/db/report_caps.py OUTDIR [--png OUT.png] > OUTDIR/report.md
"""
import argparse
import json
from pathlib import Path

RAW_MIB = 2930
TARGETS = [(10, 0.95), (10, 0.99), (100, 0.95), (100, 0.99)]


def recall_of(r, k):
    """A setting's recall: over every query, or over those answered where the timed loop
    stopped mid-pass (a slow system answers part of the 1,000 queries in its time limit)."""
    if r.get("complete_pass", True):
        return r.get(f"recall@{k}")
    return r.get(f"recall@{k}_answered")


def best(run, k, target):
    """The highest QPS of the run's settings at k whose recall reaches `target`."""
    rows = [r for r in run["sweep"] if r["k"] == k and (recall_of(r, k) or 0) >= target]
    if not rows:
        return None
    r = max(rows, key=lambda r: r["qps"])
    return r["qps"], r["knob"], recall_of(r, k)


def load(out, system, pct, threads):
    label = f"cap{pct}pct-t{threads}"
    result = out / f"{system}-search-{label}.json"
    cgroup = out / f"{system}-search-{label}.cgroup.json"
    info = json.loads(cgroup.read_text()) if cgroup.exists() else {}
    if result.exists():
        return json.loads(result.read_text()), info
    why = "not run"
    if info.get("oom_kills"):
        why = "OOM-killed"
    elif info:
        why = f"exit {info.get('exit_code', info.get('returncode', '?'))}"
    return why, info


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--png")
    a = ap.parse_args()
    out = Path(a.out)
    caps = sorted({int(p.name.split("cap")[1].split("pct")[0]) for p in out.glob("*-search-cap*pct-t*.cgroup.json")})
    threads_all = sorted({int(p.name.split("-t")[-1].split(".")[0]) for p in out.glob("*-search-cap*pct-t*.cgroup.json")})
    series = {}
    for threads in threads_all:
        print(f"\n### {threads} client thread{'s' if threads > 1 else ''}\n")
        print("| cap (% of raw) | MiB | target | diskvec QPS (L) | qdrant-edge QPS (ef) | diskvec / qdrant |")
        print("|---|---|---|---|---|---|")
        for pct in caps:
            runs = {s: load(out, s, pct, threads) for s in ("diskvec", "qdrant")}
            for k, target in TARGETS:
                cells, qps = [], {}
                for s in ("diskvec", "qdrant"):
                    run, _ = runs[s]
                    if isinstance(run, str):
                        cells.append(run)
                        continue
                    b = best(run, k, target)
                    if b is None:
                        cells.append("none reaches it")
                        continue
                    qps[s] = b[0]
                    cells.append(f"{b[0]:,.0f} ({b[1]}; {b[2]:.4f})")
                    series.setdefault((threads, k, target, s), []).append((RAW_MIB * pct / 100, b[0]))
                ratio = f"**{qps['diskvec'] / qps['qdrant']:.1f}x**" if len(qps) == 2 else "-"
                print(f"| {pct}% | {RAW_MIB * pct // 100:,} | recall@{k} >= {target} | {cells[0]} | {cells[1]} | {ratio} |")
    if a.png:
        import matplotlib
        import matplotlib.ticker
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, axes = plt.subplots(1, len(threads_all), figsize=(6 * len(threads_all), 4.5), squeeze=False)
        for ax, threads in zip(axes[0], threads_all):
            for (t, k, target, s), pts in sorted(series.items()):
                if t != threads or (k, target) not in ((10, 0.95), (100, 0.99)):
                    continue
                xs, ys = zip(*sorted(pts))
                ax.plot(xs, ys, marker="o", linestyle="-" if s == "diskvec" else "--",
                        label=f"{'diskvec' if s == 'diskvec' else 'qdrant-edge'} recall@{k}>={target}")
            ax.set_xscale("log")
            ax.set_yscale("log")
            ticks = [RAW_MIB * p / 100 for p in caps]
            ax.set_xticks(ticks)
            ax.set_xticklabels([f"{t:,.0f}\n{p}%" for t, p in zip(ticks, caps)], fontsize=8)
            ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
            ax.set_xlabel("memory cap of the search process (MiB, page cache counted)")
            ax.set_ylabel("QPS")
            ax.set_title(f"1M x 768, {threads} client thread{'s' if threads > 1 else ''}")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(a.png, dpi=110)


if __name__ == "__main__":
    main()
