"""Markdown table of VectorDBBench result files, figures as VectorDBBench wrote them.

    python vdbb_report.py RESULTS_DIR [RESULTS_DIR ...]

Reads every result_*.json under each directory (VectorDBBench writes them to
$RESULTS_LOCAL_DIR/<DB>/result_<date>_<task label>_<db>.json) and prints one row per case
result: database and its label, index config, dataset, load duration (VectorDBBench's
`load_duration` = insert + optimize, and the two parts), serial recall@k, serial p99 latency,
the highest concurrent QPS and the concurrency it came at, and QPS at each concurrency.
A case that failed (VectorDBBench records zeros) is listed as failed.
"""

import glob
import json
import os
import sys

INDEX_KEYS = {
    "QdrantLocal": ("m", "ef_construct", "hnsw_ef", "on_disk"),
}


def index_config(db: str, cfg: dict) -> str:
    cfg = {k: v for k, v in cfg.items() if v is not None and k not in ("metric_type", "use_partition_key")}
    keys = INDEX_KEYS.get(db)
    if keys:
        cfg = {k: cfg[k] for k in keys if k in cfg}
    return " ".join(f"{k}={v}" for k, v in cfg.items())


def rows(path: str):
    with open(path) as f:
        doc = json.load(f)
    for r in doc.get("results", []):
        m, t = r["metrics"], r["task_config"]
        case = t["case_config"]
        dataset = (case.get("custom_case") or {}).get("name") or str(case.get("case_id"))
        k = case.get("k", 100)
        db = t["db"]
        label = t["db_config"].get("db_label") or doc.get("task_label", "")
        conc = list(zip(m.get("conc_num_list", []), m.get("conc_qps_list", [])))
        failed = not m.get("load_duration") and not m.get("recall") and not conc
        if conc:
            best_n, best_q = max(conc, key=lambda c: c[1])
            best = f"{best_q:.1f} @ {best_n}"
        else:
            best = "-"
        yield {
            "db": f"{db} ({label})" if label else db,
            "index": index_config(db, t.get("db_case_config", {})),
            "dataset": dataset,
            "load": "FAILED" if failed else f"{m['load_duration']:.1f} ({m.get('insert_duration', 0):.1f} + {m.get('optimize_duration', 0):.1f})",
            "recall": "-" if failed else f"{m['recall']:.4f}",
            "k": k,
            "p99": "-" if failed else f"{m['serial_latency_p99'] * 1000:.2f}",
            "best": best,
            "conc": ", ".join(f"{n}: {q:.1f}" for n, q in conc) or "-",
            "file": os.path.basename(path),
        }


def main() -> int:
    dirs = sys.argv[1:] or ["."]
    files = sorted(
        p for d in dirs for p in glob.glob(os.path.join(d, "**", "result_*.json"), recursive=True)
    )
    if not files:
        print(f"no VectorDBBench result files under {', '.join(dirs)}", file=sys.stderr)
        return 1
    out = [r for p in files for r in rows(p)]
    out.sort(key=lambda r: (r["dataset"], r["db"]))
    ks = sorted({r["k"] for r in out})
    print(
        f"| database | index config | dataset | load duration s (insert + optimize) "
        f"| serial recall@{'/'.join(map(str, ks))} | serial p99 ms | max QPS @ concurrency "
        f"| QPS per concurrency |"
    )
    print("|---|---|---|---:|---:|---:|---:|---|")
    for r in out:
        print(
            f"| {r['db']} | {r['index']} | {r['dataset']} | {r['load']} | {r['recall']} "
            f"| {r['p99']} | {r['best']} | {r['conc']} |"
        )
    print()
    print("Source files: " + ", ".join(sorted({r['file'] for r in out})))
    return 0


if __name__ == "__main__":
    sys.exit(main())
