#!/usr/bin/env python3
"""diskvec's in-memory HNSW against hnswlib, same data, same parameters, same run.

    /tmp/dap/bin/pip install hnswlib   # (in the venv with numpy and pyarrow)
    /tmp/dap/bin/python benchmarks/hnsw_vs_hnswlib.py --dataset ../shared/datasets/wordnet-minilm384-50k \
        [--k 100 --ef 100,150,200 --repeat 5]
"""
import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DISKVEC = REPO / "target" / "release" / "diskvec"


def load(dataset, name, column="emb"):
    import numpy as np
    import pyarrow.parquet as pq

    col = pq.read_table(Path(dataset) / f"{name}.parquet").column(column).combine_chunks()
    width = len(col[0])
    dtype = np.int64 if column == "neighbors_id" else np.float32
    return np.ascontiguousarray(col.flatten().to_numpy(zero_copy_only=False).astype(dtype).reshape(-1, width))


def hnswlib_run(a):
    import hnswlib
    import numpy as np

    train, test = load(a.dataset, "train"), load(a.dataset, "test")
    truth = load(a.dataset, "neighbors", "neighbors_id")
    t = time.time()
    index = hnswlib.Index(space="cosine", dim=train.shape[1])
    index.init_index(max_elements=len(train), M=a.m, ef_construction=a.ef_construction)
    index.add_items(train, np.arange(len(train)), num_threads=a.threads)
    build = time.time() - t
    rows = []
    for ef in a.ef:
        index.set_ef(ef)
        index.knn_query(test, k=a.k, num_threads=a.threads)  # warm-up
        qps = []
        for _ in range(a.repeat):
            t = time.time()
            labels, _ = index.knn_query(test, k=a.k, num_threads=a.threads)
            qps.append(len(test) / (time.time() - t))
        recall = sum(len(set(l) & set(g[:a.k])) for l, g in zip(labels, truth)) / (a.k * len(test))
        rows.append({"ef": ef, "recall": recall, "qps": statistics.median(qps)})
    print(json.dumps({"build_seconds": build, "rows": rows,
                      "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", required=True)
    p.add_argument("--m", type=int, default=30)
    p.add_argument("--ef-construction", type=int, default=360)
    p.add_argument("--ef", type=lambda s: [int(x) for x in s.split(",")], default=[32, 64, 100])
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeat", type=int, default=1,
                   help="timed runs per ef for each system; the table shows the median QPS")
    p.add_argument("--out")
    p.add_argument("--peer", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.peer:
        return hnswlib_run(a)
    efs = ",".join(map(str, a.ef))
    # diskvec runs each ef `repeat` times in a row (after one warm-up run of the first).
    repeated = ",".join(str(ef) for ef in a.ef for _ in range(a.repeat))
    out = subprocess.run([str(DISKVEC), "hnsw", f"--dataset={a.dataset}", f"--m={a.m}",
                          f"--ef-construction={a.ef_construction}", f"--ef={a.ef[0]},{repeated}", f"--k={a.k}",
                          f"--threads={a.threads}", "--json"], check=True, capture_output=True, text=True).stdout
    runs = [json.loads(l) for l in out.splitlines() if l.startswith("{")][1:]  # first is a warm-up
    ours = []
    for i in range(len(a.ef)):
        group = runs[i * a.repeat:(i + 1) * a.repeat]
        ours.append(dict(group[0], qps=statistics.median(r["qps"] for r in group)))
    peer_cmd = [sys.executable, __file__, "--peer", f"--dataset={a.dataset}", f"--m={a.m}",
                f"--ef-construction={a.ef_construction}", f"--ef={efs}", f"--k={a.k}", f"--threads={a.threads}",
                f"--repeat={a.repeat}"]
    peer = json.loads(subprocess.run(peer_cmd, check=True, capture_output=True, text=True).stdout.splitlines()[-1])
    print(f"build: diskvec {ours[0]['build_seconds']:.1f} s, hnswlib {peer['build_seconds']:.1f} s; "
          f"peak RSS diskvec {ours[-1]['peak_rss_mb']:.0f} MiB, hnswlib {peer['peak_rss_mb']:.0f} MiB")
    print(f"| ef | diskvec recall@{a.k} | diskvec QPS | hnswlib recall@{a.k} | hnswlib QPS | QPS ratio |")
    print("|---|---|---|---|---|---|")
    for o, h in zip(ours, peer["rows"]):
        print(f"| {o['ef']} | {o['recall']:.4f} | {o['qps']:.0f} | {h['recall']:.4f} | {h['qps']:.0f} | "
              f"{o['qps'] / h['qps']:.2f}x |")
    if a.out:
        Path(a.out).write_text(json.dumps({"params": vars(a), "diskvec": ours, "hnswlib": peer}, indent=1))


if __name__ == "__main__":
    main()
