#!/usr/bin/env python3
"""diskvec's disk index against diskannpy 0.7.0 (Microsoft DiskANN), same machine, same run.

Both indexes use the same graph parameters (R, L_build), the same PQ code size, beam width,
thread count and node-cache size; both read nodes with O_DIRECT, so the page cache is not warm.
Each build and each search runs in its own process so peak RSS is per phase.

Run with a Python that has diskannpy 0.7.0 (it pins numpy==1.25.0) and pyarrow:
    python3 -m venv /tmp/dap && /tmp/dap/bin/pip install numpy==1.25.0 diskannpy==0.7.0 'pyarrow<17'
    /tmp/dap/bin/python benchmarks/disk_vs_diskannpy.py --dataset ../shared/datasets/wordnet-minilm384-50k

diskannpy's build alone, under a build memory budget (below the data's size DiskANN partitions the points
and builds the graph shard by shard), printing build seconds and peak RSS as one JSON line:
    /tmp/dap/bin/python benchmarks/disk_vs_diskannpy.py --mode=dap-build --build-memory-gib=0.02 \
        --dataset ../shared/datasets/wordnet-mpnet768-25k --work /tmp/dap-budget
"""
import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DISKVEC = REPO / "target" / "release" / "diskvec"


def peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def read_bytes():
    with open("/proc/self/io") as f:
        for line in f:
            if line.startswith("read_bytes:"):
                return int(line.split()[1])
    return 0


def load(dataset, name, column="emb"):
    import numpy as np
    import pyarrow.parquet as pq

    t = pq.read_table(Path(dataset) / f"{name}.parquet")
    col = t.column(column).combine_chunks()
    width = len(col[0])
    values = col.flatten().to_numpy(zero_copy_only=False)
    dtype = np.int64 if column == "neighbors_id" else np.float32
    return np.ascontiguousarray(values.astype(dtype).reshape(-1, width))


def recall(found, truth, k):
    return sum(len(set(f[:k]) & set(t[:k])) for f, t in zip(found, truth)) / (k * len(truth))


def percentiles(lat_ms):
    import numpy as np

    return {f"p{p}_ms": float(np.percentile(lat_ms, p)) for p in (50, 95, 99)}


def dap_metric(metric):
    # diskannpy's disk index refuses cosine; on unit-normalized data L2 ranks identically.
    return "l2" if metric == "cosine" else metric


def dap_build(a):
    import diskannpy as dap
    import numpy as np

    data = load(a.dataset, "train")
    n = data.shape[0]
    out = Path(a.work) / "dap-index"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    # DiskANN sizes PQ codes as floor(search_memory_maximum / n) bytes for small budgets.
    budget_gb = (a.pq_bytes + 0.5) * n / 2**30
    print(f"diskannpy build: {n} vectors, build_memory_maximum={a.build_memory_gib} GiB ...", file=sys.stderr)
    t = time.time()
    dap.build_disk_index(data=data, distance_metric=dap_metric(a.metric), index_directory=str(out), complexity=a.build_list,
                         graph_degree=a.max_degree, search_memory_maximum=budget_gb, build_memory_maximum=a.build_memory_gib,
                         num_threads=a.threads, index_prefix="ann")
    seconds = time.time() - t
    header = np.fromfile(out / "ann_pq_compressed.bin", dtype=np.int32, count=2)
    row = {"build_seconds": seconds, "peak_rss_mb": peak_rss_mb(), "build_memory_gib": a.build_memory_gib,
           "pq_bytes": int(header[1]), "disk_bytes": os.path.getsize(out / "ann_disk.index")}
    if a.out:
        Path(a.out).write_text(json.dumps(row, indent=1))
    print(f"diskannpy build: {seconds:.1f} s, peak RSS {row['peak_rss_mb']:.0f} MiB", file=sys.stderr)
    print(json.dumps(row))


def dap_search(a):
    import diskannpy as dap
    import numpy as np

    queries = load(a.dataset, "test")
    truth = load(a.dataset, "neighbors", "neighbors_id")
    idx = dap.StaticDiskIndex(index_directory=str(Path(a.work) / "dap-index"), num_threads=a.threads,
                              num_nodes_to_cache=a.cache_nodes, distance_metric=dap_metric(a.metric), vector_dtype=np.float32,
                              dimensions=queries.shape[1], index_prefix="ann")
    # One discarded pass warms the process (allocations, page tables), as diskvec's first is discarded too.
    idx.batch_search(queries, k_neighbors=a.k, complexity=a.search_list[0], num_threads=a.threads,
                     beam_width=a.beam_width)
    rows = []
    for L in a.search_list:
        timings = []
        for _ in range(a.repeat):
            before = read_bytes()
            t = time.time()
            res = idx.batch_search(queries, k_neighbors=a.k, complexity=L, num_threads=a.threads,
                                   beam_width=a.beam_width)
            timings.append(time.time() - t)
            reads = (read_bytes() - before) / 4096 / len(queries)
        seconds = sorted(timings)[len(timings) // 2]
        lat = []
        for q in queries:
            s = time.perf_counter()
            idx.search(q, k_neighbors=a.k, complexity=L, beam_width=a.beam_width)
            lat.append((time.perf_counter() - s) * 1000)
        row = {"search_list": L, "recall": recall(res.identifiers, truth, a.k), "qps": len(queries) / seconds,
               "mean_ios": reads, "serial": percentiles(lat)}
        rows.append(row)
    print(json.dumps({"rows": rows, "peak_rss_mb": peak_rss_mb()}))


def run_json(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return [json.loads(l) for l in out.splitlines() if l.startswith("{")]


def fio(work, depth):
    path = Path(work) / "fio.dat"
    out = subprocess.run(["fio", "--name=rr", f"--filename={path}", "--size=1G", "--direct=1", "--rw=randread",
                          "--bs=4k", "--ioengine=io_uring", f"--iodepth={depth}", "--runtime=10", "--time_based",
                          "--output-format=json"], check=True, capture_output=True, text=True).stdout
    job = json.loads(out[out.index("{"):])["jobs"][0]["read"]
    return {"iodepth": depth, "iops": job["iops"], "lat_mean_us": job["lat_ns"]["mean"] / 1000}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", required=True)
    p.add_argument("--work", default="/tmp/diskvec-bench")
    p.add_argument("--metric", default="cosine")
    p.add_argument("--max-degree", type=int, default=64)
    p.add_argument("--build-list", type=int, default=100)
    p.add_argument("--pq-bytes", type=int, default=96)
    p.add_argument("--beam-width", type=int, default=4)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--cache-nodes", type=int, default=None, help="default: 1%% of the vectors, for both")
    p.add_argument("--search-list", type=lambda s: [int(x) for x in s.split(",")], default=[20, 30, 50, 100, 200])
    p.add_argument("--repeat", type=int, default=3, help="runs per point; the median QPS is reported")
    p.add_argument("--build-memory-gib", type=float, default=8.0,
                   help="diskannpy's build_memory_maximum in GiB; below the data's size it builds in shards")
    p.add_argument("--out", help="write all results as JSON here")
    p.add_argument("--mode", default="main", choices=["main", "dap-build", "dap-search"])
    a = p.parse_args()
    if a.cache_nodes is None:
        import pyarrow.parquet as pq
        a.cache_nodes = pq.ParquetFile(Path(a.dataset) / "train.parquet").metadata.num_rows // 100
    if a.mode == "dap-build":
        return dap_build(a)
    if a.mode == "dap-search":
        return dap_search(a)

    Path(a.work).mkdir(parents=True, exist_ok=True)
    common = [f"--dataset={a.dataset}", f"--work={a.work}", f"--metric={a.metric}", f"--max-degree={a.max_degree}",
              f"--build-list={a.build_list}", f"--pq-bytes={a.pq_bytes}", f"--beam-width={a.beam_width}",
              f"--threads={a.threads}", f"--k={a.k}", f"--cache-nodes={a.cache_nodes}",
              f"--build-memory-gib={a.build_memory_gib}",
              "--search-list=" + ",".join(map(str, a.search_list))]
    me = [sys.executable, __file__]
    result = {"dataset": a.dataset, "params": vars(a), "date": time.strftime("%Y-%m-%d"),
              "machine": {"cpus": os.cpu_count(), "kernel": os.uname().release}}
    print("fio 4 KiB random reads on the work directory's file system ...", file=sys.stderr)
    result["fio"] = [fio(a.work, 1), fio(a.work, 32)]
    result["fio_note"] = "measured before the builds; fio_after repeats it after the searches"

    index = Path(a.work) / "diskvec-index"
    print("diskvec build ...", file=sys.stderr)
    t = time.time()
    build = run_json([str(DISKVEC), "build", f"--dataset={a.dataset}", f"--index={index}", f"--metric={a.metric}",
                      f"--max-degree={a.max_degree}", f"--build-list={a.build_list}", f"--pq-bytes={a.pq_bytes}",
                      f"--threads={a.threads}", "--json"])[-1]
    build["wall_seconds"] = time.time() - t
    print("diskannpy build ...", file=sys.stderr)
    dap_b = run_json(me + common + ["--mode=dap-build"])[-1]

    warm_and_sweep = [a.search_list[0]] + a.search_list
    search = [str(DISKVEC), "search", f"--index={index}", f"--dataset={a.dataset}", f"--k={a.k}",
              "--search-list=" + ",".join(map(str, warm_and_sweep)), f"--beam-width={a.beam_width}",
              f"--cache-nodes={a.cache_nodes}", "--json"]
    print("diskvec search ...", file=sys.stderr)
    runs = [run_json(search + [f"--threads={a.threads}"])[1:] for _ in range(a.repeat)]
    dv_rows = [sorted(same_l, key=lambda r: r["qps"])[len(same_l) // 2] for same_l in zip(*runs)]
    dv_serial = run_json(search + ["--threads=1", "--queries-per-thread=1"])[1:]
    print("diskannpy search ...", file=sys.stderr)
    dap_s = run_json(me + common + ["--mode=dap-search"])[-1]
    result.update({"diskvec": {"build": build, "search": dv_rows, "serial": dv_serial},
                   "diskannpy": {"build": dap_b, "search": dap_s}})
    result["fio_after"] = [fio(a.work, 1), fio(a.work, 32)]
    if a.out:
        Path(a.out).write_text(json.dumps(result, indent=1))

    for when in ("fio", "fio_after"):
        f = result[when]
        print(f"\n{when} randread 4 KiB: QD1 {f[0]['iops']:.0f} IOPS ({f[0]['lat_mean_us']:.0f} us), "
              f"QD32 {f[1]['iops']:.0f} IOPS")
    print(f"build: diskvec {build['build_seconds']:.1f} s (peak RSS {build['peak_rss_mb']:.0f} MiB), "
          f"diskannpy {dap_b['build_seconds']:.1f} s (peak RSS {dap_b['peak_rss_mb']:.0f} MiB, PQ {dap_b['pq_bytes']} B)")
    print("\n| L | diskvec recall@10 | diskvec QPS | diskvec reads/q | diskvec reads/s | diskvec p99 ms (serial) "
          "| diskannpy recall@10 | diskannpy QPS | diskannpy reads/q | diskannpy p99 ms (serial) | QPS ratio |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for dv, sv, dp in zip(dv_rows, dv_serial, dap_s["rows"]):
        print(f"| {dv['search_list']} | {dv['recall']:.4f} | {dv['qps']:.0f} | {dv['mean_ios']:.1f} | "
              f"{dv['reads_per_second']:.0f} | {sv['p99_ms']:.2f} | {dp['recall']:.4f} | {dp['qps']:.0f} | "
              f"{dp['mean_ios']:.1f} | {dp['serial']['p99_ms']:.2f} | {dv['qps'] / dp['qps']:.2f}x |")
    print(f"\nsearch peak RSS: diskvec {dv_rows[-1]['peak_rss_mb']:.0f} MiB "
          f"(index DRAM {dv_rows[-1]['dram_index_bytes'] / 2**20:.1f} MiB), diskannpy {dap_s['peak_rss_mb']:.0f} MiB")


if __name__ == "__main__":
    main()
