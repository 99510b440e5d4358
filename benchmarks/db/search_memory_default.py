#!/usr/bin/env python3
"""Default settings against `on_disk=False` on a machine with memory to spare (issue 22).

As a new user would: the Python database API, the dataset upserted in batches of 100,
`optimize(wait=True)`, then the test queries one at a time (one client), k=100 at L=150.
Two databases: one with every setting at its default (the search memory automatic), one
with `on_disk=False` (every node in DRAM). Rounds alternate between them (and which goes
first), each opening its database afresh; the report gives QPS (median of the rounds), recall@100 and what each
holds (`info()["search_memory"]`).

    python benchmarks/db/search_memory_default.py --dataset wordnet-mpnet768-25k --out OUT.json
"""
import argparse
import json
import shutil
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import load_queries, load_train, machine, recall, write_json  # noqa: E402

import diskvec  # noqa: E402


def load(path, train, on_disk):
    shutil.rmtree(path, ignore_errors=True)
    with diskvec.open(path) as db:
        col = db.create_collection("c", dim=train.shape[1], metric="cosine", on_disk=on_disk)
        for start in range(0, len(train), 100):
            rows = range(start, min(start + 100, len(train)))
            col.upsert(list(rows), train[start:start + 100])
        col.optimize(wait=True)


def search_round(path, queries, truth, k, search_list):
    with diskvec.open(path) as db:
        col = db.collection("c")
        col.search(queries[0], k=k, search_list=search_list)  # threads started, first read done
        found = []
        started = time.perf_counter()
        for q in queries:
            found.append([h["id"] for h in col.search(q, k=k, search_list=search_list)])
        seconds = time.perf_counter() - started
        memory = col.info()["search_memory"]
    return {"qps": len(queries) / seconds, "recall": recall(found, truth, k), "search_memory": memory}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dataset", default="wordnet-mpnet768-25k")
    ap.add_argument("--work", default="/tmp/dvbench-search-memory")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--k", type=int, default=100)
    ap.add_argument("--search-list", type=int, default=150)
    ap.add_argument("--skip-load", action="store_true", help="search the databases a run before loaded")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    train = load_train(a.dataset)
    queries, neighbors = load_queries(a.dataset)
    truth = neighbors
    work = Path(a.work)
    paths = {"default": work / "default", "on_disk=False": work / "in-memory"}
    loads = {}
    for name, path in paths.items():
        if a.skip_load:
            loads[name] = None
            continue
        started = time.perf_counter()
        load(path, train, on_disk=(name == "default"))
        loads[name] = time.perf_counter() - started
        print(f"{name}: loaded {len(train)} in {loads[name]:.1f} s", flush=True)
    runs = {name: [] for name in paths}
    for r in range(a.rounds):
        # Alternate which goes first: a round's first search runs on a colder machine.
        for name, path in (list(paths.items()) if r % 2 == 0 else list(reversed(paths.items()))):
            run = search_round(path, queries, truth, a.k, a.search_list)
            runs[name].append(run)
            print(f"round {r} {name}: {run['qps']:.0f} QPS, recall@{a.k} {run['recall']:.4f}, "
                  f"cached {run['search_memory']['cached_nodes']} of {run['search_memory']['nodes']}",
                  flush=True)
    summary = {name: {"qps_median": statistics.median(x["qps"] for x in rs),
                      "qps": [x["qps"] for x in rs], "recall": rs[-1]["recall"],
                      "search_memory": rs[-1]["search_memory"], "load_seconds": loads[name]}
               for name, rs in runs.items()}
    ratio = summary["default"]["qps_median"] / summary["on_disk=False"]["qps_median"]
    print(f"default / on_disk=False: {ratio:.2f}x")
    write_json(a.out, {"dataset": a.dataset, "k": a.k, "search_list": a.search_list, "queries": len(queries),
                       "machine": machine(), "summary": summary, "default_over_in_memory": ratio})


if __name__ == "__main__":
    main()
