#!/usr/bin/env python3
"""Tables for the 1M x 768 tight-DRAM run (bench1m.sh): `python report1m.py OUTDIR` prints
markdown: per system and budget the sweep (recall, QPS, p50/p99, complete pass), the cgroup
figures, and the QPS ratio diskvec / qdrant at equal recall (the best QPS among the knobs that
reach the recall target, per system)."""
import json
import sys
from pathlib import Path

OUT = Path(sys.argv[1])
TARGETS = {10: 0.95, 100: 0.99}


def load(name):
    p = OUT / name
    return json.loads(p.read_text()) if p.exists() else None


def mib(b):
    return None if b is None else round(b / 2**20, 1)


def runs():
    for sys_ in ("diskvec", "qdrant"):
        for f in sorted(OUT.glob(f"{sys_}-search-*.json")):
            if f.name.endswith(".cgroup.json"):
                continue
            label = f.stem[len(f"{sys_}-search-"):]
            yield sys_, label, json.loads(f.read_text()), load(f"{sys_}-search-{label}.cgroup.json")


def best(sweep, k, target):
    ok = [r for r in sweep if r["k"] == k and r.get(f"recall@{k}", 0) >= target and r.get("complete_pass")]
    return max(ok, key=lambda r: r["qps"]) if ok else None


print("## Search sweeps\n")
table = {}
for sys_, label, s, cg in runs():
    table[(sys_, label)] = s
    print(f"### {sys_}, budget `{label}`\n")
    if cg:
        st = cg.get("stat") or {}
        print(f"cgroup: limit {mib(cg.get('limit_bytes'))} MiB, peak usage {mib(cg.get('max_usage_bytes'))} MiB, "
              f"failcnt {cg.get('failcnt')}, OOM kills {cg.get('oom_kills')}, exit {cg.get('exit_code')}, "
              f"wall {cg.get('wall_s')} s; sampled max rss {mib((cg.get('sampled_max') or {}).get('total_rss'))} MiB, "
              f"cache {mib((cg.get('sampled_max') or {}).get('total_cache'))} MiB; major faults "
              f"{st.get('total_pgmajfault')}, pages in {st.get('total_pgpgin')}; files evicted first: "
              f"{cg.get('evicted_files', 0)}\n")
    print(f"open {s.get('open_s', 0):.2f} s, warm-up pass {s.get('warmup_s')} s, VmHWM {s.get('peak_rss_mib')} MiB\n")
    print("| k | knob | recall@k | recall@10 (of k=100) | QPS | p50 ms | p99 ms | CPU cores | complete pass | errors |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in s["sweep"]:
        k = r["k"]
        rec = r[f"recall@{k}"]
        if not r.get("complete_pass"):
            rec = f"{rec} (answered only: {r.get(f'recall@{k}_answered')})"
        print(f"| {k} | {r['knob']} | {rec} | {r.get('recall@10_of_k100', '')} | {r['qps']} | {r['p50_ms']} | "
              f"{r['p99_ms']} | {r['cpu_cores_used']} | {r['complete_pass']} | {r['errors']} |")
    o = s.get("one_thread")
    if o:
        print(f"\none client thread, k=10 knob {o['knob']}: recall@10 {o['recall@10']}, {o['qps']} QPS, "
              f"p50 {o['p50_ms']} ms, p99 {o['p99_ms']} ms\n")

print("## diskvec / qdrant QPS at equal recall\n")
print("Per system, the knob with the highest QPS among those whose recall reaches the target "
      "(complete passes only).\n")
print("| budget | k | target | diskvec knob / recall / QPS | qdrant knob / recall / QPS | ratio |")
print("|---|---|---|---|---|---|")
labels = sorted({lab for (_, lab) in table})
for lab in labels:
    for k, t in TARGETS.items():
        d = table.get(("diskvec", lab))
        q = table.get(("qdrant", lab))
        bd = best(d["sweep"], k, t) if d else None
        bq = best(q["sweep"], k, t) if q else None
        fmt = lambda b: "not reached" if b is None else f"{b['knob']} / {b[f'recall@{k}']} / {b['qps']}"
        ratio = f"{bd['qps'] / bq['qps']:.2f}" if bd and bq else "n/a"
        print(f"| {lab} | {k} | {t} | {fmt(bd) if d else 'not run'} | {fmt(bq) if q else 'not run'} | {ratio} |")
