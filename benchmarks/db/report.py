#!/usr/bin/env python3
"""Results JSON of run.sh -> Markdown tables (ratios are diskvec / peer).

    python report.py benchmarks/db/results/2026-11-22 > report.md
"""
import json
import re
import sys
from pathlib import Path

SYSTEMS = ["diskvec", "diskvec-interval", "qdrant-mem", "qdrant-disk", "lancedb", "lancedb-ivfpq"]
LABEL = {
    "diskvec": "diskvec (sync)", "diskvec-interval": "diskvec (interval 200 ms)",
    "qdrant-mem": "qdrant-edge, vectors in RAM", "qdrant-disk": "qdrant-edge, vectors on disk",
    "lancedb": "lancedb IVF_HNSW_SQ", "lancedb-ivfpq": "lancedb IVF_PQ",
}
KNOB = {"diskvec": "L", "diskvec-interval": "L", "qdrant-mem": "ef", "qdrant-disk": "ef", "lancedb": "ef", "lancedb-ivfpq": "nprobes"}


def load(out):
    res = {}
    for p in sorted(Path(out).glob("*.json")):
        m = None
        for s in sorted(SYSTEMS, key=len, reverse=True):
            m = re.match(re.escape(s) + r"-(load|search|filter|mem|batch|ingest2000|ingest10000)-(.+)\.json$", p.name)
            if m:
                break
        if not m:
            continue
        try:
            res[(s, m.group(1), m.group(2))] = json.loads(p.read_text())
        except json.JSONDecodeError:
            pass
    return res


def ratio(a, b, digits=2):
    if a is None or b is None or not b:
        return "—"
    return f"{a / b:.{digits}f}x"


def f(v, d=1):
    if v is None:
        return "—"
    if isinstance(v, float):
        return f"{v:,.{d}f}"
    return f"{v:,}" if isinstance(v, int) else str(v)


def datasets(res):
    return sorted({k[2] for k in res}, key=lambda d: (0 if "minilm" in d else 1, d))


def ingest_table(res, ds):
    rows = ["| system | acked points/s (write calls) | points/s incl. client conversion | batch p50 / p99 ms | "
            "time to fully indexed s | load duration s | disk MiB | peak RSS MiB | diskvec/peer points/s | "
            "diskvec/peer load duration |", "|---|---|---|---|---|---|---|---|---|---|"]
    dv = res.get(("diskvec", "load", ds))
    for s in SYSTEMS:
        r = res.get((s, "load", ds))
        if not r:
            continue
        ing = r["ingest"]
        rat1 = ratio(dv["ingest"]["points_per_s"], ing["points_per_s"]) if dv and s != "diskvec" else ""
        rat2 = ratio(dv["load_duration_s"], r["load_duration_s"]) if dv and s != "diskvec" else ""
        rows.append(f"| {LABEL[s]} | {f(ing['points_per_s'], 0)} | {f(ing['points_per_s_wall'], 0)} | "
                    f"{ing['batch_p50_ms']:.2f} / {ing['batch_p99_ms']:.2f} | {r['index_wait_s']:.1f} | "
                    f"{r['load_duration_s']:.1f} | {r['disk_bytes'] / 2**20:.1f} | {f(r.get('peak_rss_mib'))} | {rat1} | {rat2} |")
    return "\n".join(rows)


def sweep_table(res, ds):
    rows = ["| system | k | knob | recall@k | QPS (2 threads) | p50 ms | p99 ms | CPU cores used |",
            "|---|---|---|---|---|---|---|---|"]
    for s in SYSTEMS:
        r = res.get((s, "search", ds))
        if not r:
            continue
        for x in r["sweep"]:
            rows.append(f"| {LABEL[s]} | {x['k']} | {KNOB.get(s, 'knob')}={x['knob']} | {x[f'recall@{x[chr(107)]}']:.4f} | "
                        f"{x['qps']:,.0f} | {x['p50_ms']:.2f} | {x['p99_ms']:.2f} | {x.get('cpu_cores_used', '—')} |")
        t = r.get("one_thread")
        if t:
            rows.append(f"| {LABEL[s]}, 1 thread | 10 | {KNOB.get(s, 'knob')}={t['knob']} | {t['recall@10']:.4f} | "
                        f"{t['qps']:,.0f} | {t['p50_ms']:.2f} | {t['p99_ms']:.2f} | {t.get('cpu_cores_used', '—')} |")
    return "\n".join(rows)


def batch_table(res, ds):
    rows = ["| system | k | knob | recall@k | QPS | CPU cores used |", "|---|---|---|---|---|---|"]
    found = False
    for s in SYSTEMS:
        r = res.get((s, "batch", ds))
        if not r:
            continue
        for x in r["batch"]:
            found = True
            rows.append(f"| {LABEL[s]} | {x['k']} | {KNOB.get(s, 'knob')}={x['knob']} | {x[f'recall@{x[chr(107)]}']:.4f} | "
                        f"{x['qps']:,.0f} | {x['cpu_cores_used']} |")
    return "\n".join(rows) if found else ""


def best_at(r, k, thr):
    best = None
    for x in r["sweep"]:
        if x["k"] == k and x.get(f"recall@{k}", 0) >= thr and x["errors"] == 0:
            if best is None or x["qps"] > best["qps"]:
                best = x
    return best


def equal_recall_table(res, ds):
    cols = [s for s in SYSTEMS if (s, "search", ds) in res]
    rows = ["| target | " + " | ".join(LABEL[s] for s in cols) + " |", "|---|" + "---|" * len(cols)]
    dv = res.get(("diskvec", "search", ds))
    for k, thr in ((10, 0.95), (10, 0.99), (100, 0.99)):
        cells = []
        dvb = best_at(dv, k, thr) if dv else None
        for s in cols:
            b = best_at(res[(s, "search", ds)], k, thr)
            if b is None:
                cells.append("not reached")
                continue
            c = f"{b['qps']:,.0f} ({KNOB.get(s, 'knob')}={b['knob']}, {b[f'recall@{k}']:.4f})"
            if s != "diskvec" and dvb:
                c += f", diskvec/peer **{ratio(dvb['qps'], b['qps'])}**"
            cells.append(c)
        rows.append(f"| recall@{k} >= {thr} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def filter_table(res, ds):
    cols = [s for s in SYSTEMS if (s, "filter", ds) in res]
    if not cols:
        return ""
    names = []
    for s in cols:
        for x in res[(s, "filter", ds)]["filters"]:
            if x["filter"] not in names:
                names.append(x["filter"])
    rows = ["| filter (selectivity) | " + " | ".join(LABEL[s] for s in cols) + " |", "|---|" + "---|" * len(cols)]
    for n in names:
        sel = None
        cells = []
        for s in cols:
            xs = [x for x in res[(s, "filter", ds)]["filters"] if x["filter"] == n]
            if xs:
                sel = xs[0]["selectivity"]
            cells.append("<br>".join(f"{KNOB.get(s, 'knob')}={x['knob']}: {x['recall@10']:.3f} @ {x['qps']:,.0f} QPS"
                                     + (f" ({x['errors']} errors)" if x["errors"] else "") for x in xs) or "—")
        rows.append(f"| `{n}` ({sel:.2%}) | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def mem_table(res, ds):
    rows = ["| system | cap MiB | outcome | peak cgroup usage MiB (RSS + cache) | max sampled RSS / cache MiB | "
            "process VmHWM MiB | major faults | QPS | recall@10 |", "|---|---|---|---|---|---|---|---|---|"]
    any_row = False
    for s in SYSTEMS:
        r = res.get((s, "mem", ds))
        if not r:
            continue
        for run in r["runs"]:
            any_row = True
            ch = run.get("child") or {}
            st = run.get("stat") or {}
            srch = ch.get("search") or {}
            if run.get("error"):
                outcome = run["error"]
            elif run.get("timed_out"):
                outcome = f"timed out (stage {ch.get('stage')})"
            elif run.get("exit_code") == 0:
                outcome = "ok"
            else:
                outcome = f"exit {run.get('exit_code')}, OOM kills {run.get('oom_kills')} (stage {ch.get('stage')})"
            sm = run.get("sampled_max") or {}
            rss = sm.get("total_rss")
            cache = sm.get("total_cache")
            rows.append(
                f"| {LABEL[s]} | {run['label']} {run['limit_bytes'] / 2**20:,.0f} | {outcome} | "
                f"{run.get('max_usage_bytes', 0) / 2**20:,.1f} | "
                f"{'—' if rss is None else f'{rss / 2**20:,.1f}'} / {'—' if cache is None else f'{cache / 2**20:,.1f}'} | "
                f"{f(ch.get('vm_hwm_mib'))} | {f(st.get('total_pgmajfault'))} | "
                f"{f(srch.get('qps'), 0)} | {f(srch.get('recall@10'), 4)}"
                + ("" if not srch or srch.get("complete_pass") else
                   f" (pass not completed in {srch.get('wall_s')} s: {srch.get('answered')} answers, the rest count 0)")
                + " |")
    return "\n".join(rows) if any_row else ""


def durability_table(out):
    names = ("fsync", "fdatasync", "msync", "io_uring_enter", "sync_file_range")
    rows = ["| system | points written | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    found = False
    for s in ["diskvec", "diskvec-interval", "qdrant-mem", "lancedb"]:
        for n in (2000, 10000):
            p = Path(out) / f"durability-{s}-{n}.strace.txt"
            if not p.exists():
                continue
            found = True
            calls = {}
            for line in p.read_text().splitlines():
                parts = line.split()
                if len(parts) >= 5 and parts[-1] in names:
                    try:
                        calls[parts[-1]] = int(parts[3])
                    except ValueError:
                        pass
            rows.append(f"| {LABEL[s]} | {n:,} ({n // 100} batches) | " + " | ".join(str(calls.get(c, 0)) for c in names) + " |")
    return "\n".join(rows) if found else ""


def main():
    out = sys.argv[1]
    res = load(out)
    print(f"# Database-layer benchmark: {out}\n")
    for ds in datasets(res):
        print(f"## {ds}\n")
        print("### Ingest (batches of 100, one client, payloads) and load duration\n")
        print(ingest_table(res, ds) + "\n")
        print("### QPS at equal recall (best sweep point reaching the target)\n")
        print(equal_recall_table(res, ds) + "\n")
        print("### Search sweep\n")
        print(sweep_table(res, ds) + "\n")
        bt = batch_table(res, ds)
        if bt:
            print("### Supplementary: the bindings' batch calls (diskvec search_batch threads=2, qdrant query_batch), 1000 queries per call\n")
            print(bt + "\n")
        ft = filter_table(res, ds)
        if ft:
            print("### Filtered search, k=10 (recall@10 against exact filtered top-10)\n")
            print(ft + "\n")
        mt = mem_table(res, ds)
        if mt:
            print("### Memory: search phase in a memory cgroup\n")
            print(mt + "\n")
    dt = durability_table(out)
    if dt:
        print("## Sync calls while one client writes N points in batches of 100 (strace -f -c, whole process incl. open and close)\n")
        print(dt + "\n")
    fp = Path(out) / "failures.txt"
    if fp.exists():
        print("## Failures\n")
        print("```\n" + fp.read_text() + "```")


if __name__ == "__main__":
    main()
