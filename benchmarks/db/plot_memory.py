"""Chart of a process's memory over time from a samples file of lines
`EPOCH rss=MiB use=MiB cache=MiB dirty=MiB "kind":"..." "phase":"..."` (one a second; what
/tmp-side samplers write beside a run in a memory cgroup, e.g. docs/results/db-1m-1gib-*).

    python plot_memory.py SAMPLES OUT.png --limit-mib 1024 --title "..."
"""
import argparse
import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read(path):
    rows = []
    for line in open(path):
        m = re.match(r"(\d+) rss=(\d*) use=(\d+) cache=(\d+) dirty=(\d+)(.*)", line)
        if not m or not m.group(2):
            continue
        kinds = re.findall(r'"kind":"([a-z]*)"', m.group(6))
        phases = re.findall(r'"phase":"([^"]*)"', m.group(6))
        label = f"{kinds[-1]}: {phases[-1]}" if kinds and phases else (phases[-1] if phases else "")
        rows.append((int(m.group(1)), int(m.group(2)), int(m.group(3)), label))
    t0 = rows[0][0]
    return [(t - t0, rss, use, label) for t, rss, use, label in rows]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("samples")
    ap.add_argument("out")
    ap.add_argument("--limit-mib", type=float)
    ap.add_argument("--title", default="")
    a = ap.parse_args()
    rows = read(a.samples)
    t = [r[0] for r in rows]
    fig, ax = plt.subplots(figsize=(10, 4.5))
    ax.plot(t, [r[1] for r in rows], label="RSS", lw=1.2)
    ax.plot(t, [r[2] for r in rows], label="cgroup usage (with page cache)", lw=0.8, alpha=0.7)
    if a.limit_mib:
        ax.axhline(a.limit_mib, color="red", ls="--", lw=0.8, label="cgroup limit")
    # Phases marked where they start, those lasting 8 samples or more (short ones would
    # only overprint each other).
    bases = [r[3].split(" (")[0] for r in rows]
    i = 0
    while i < len(rows):
        j = i
        while j < len(rows) and bases[j] == bases[i]:
            j += 1
        if j - i >= 8 and bases[i]:
            ax.axvline(rows[i][0], color="grey", lw=0.5, alpha=0.5)
            ax.text(rows[i][0], 30, bases[i], rotation=90, fontsize=7, va="bottom")
        i = j
    ax.set_xlabel("seconds")
    ax.set_ylabel("MiB")
    ax.set_ylim(0, (a.limit_mib or max(r[2] for r in rows)) * 1.08)
    ax.set_title(a.title, fontsize=10)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)


if __name__ == "__main__":
    main()
