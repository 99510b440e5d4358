#!/usr/bin/env python3
"""`diskvec iobench` against fio on the same file: 4 KiB random reads at queue depth 1 and 32,
alternating the two tools, 3 rounds, medians. Needs Debian's fio.

    python3 benchmarks/iobench_vs_fio.py --dir /some/dir/on/the/device [--out docs/results/iobench-vs-fio.json]
"""
import argparse
import json
import statistics
import subprocess
from pathlib import Path

DISKVEC = Path(__file__).resolve().parent.parent / "target" / "release" / "diskvec"


def diskvec(d, qd, seconds):
    out = subprocess.run([str(DISKVEC), "iobench", f"--paths={d}", "--bs=4", "--mix=read100", f"--qd={qd}",
                          f"--seconds={seconds}", "--json"], check=True, capture_output=True, text=True).stdout
    j = json.loads(out.strip().splitlines()[-1])
    return j["iops"], j["p50_us"], j["p99_us"]


def fio(d, qd, seconds):
    out = subprocess.run(["fio", "--name=rr", f"--filename={Path(d) / 'diskvec-iobench.dat'}", "--direct=1",
                          "--rw=randread", "--bs=4k", "--ioengine=io_uring", f"--iodepth={qd}",
                          f"--runtime={seconds}", "--time_based", "--output-format=json"],
                         check=True, capture_output=True, text=True).stdout
    r = json.loads(out[out.index("{"):])["jobs"][0]["read"]
    pct = r["clat_ns"]["percentile"]
    return r["iops"], pct["50.000000"] / 1000, pct["99.000000"] / 1000


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dir", required=True)
    p.add_argument("--seconds", type=int, default=5)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out")
    a = p.parse_args()
    diskvec(a.dir, 1, 1)  # lays out the 1 GiB test file
    rows = []
    for qd in (1, 32):
        dv, fi = [], []
        for _ in range(a.rounds):
            dv.append(diskvec(a.dir, qd, a.seconds))
            fi.append(fio(a.dir, qd, a.seconds))
        med = lambda xs, i: statistics.median(x[i] for x in xs)
        row = {"qd": qd, "diskvec_iops": med(dv, 0), "fio_iops": med(fi, 0), "diskvec_p50_us": med(dv, 1),
               "fio_p50_us": med(fi, 1), "diskvec_p99_us": med(dv, 2), "fio_p99_us": med(fi, 2),
               "diskvec_runs": [x[0] for x in dv], "fio_runs": [x[0] for x in fi]}
        row["ratio"] = row["diskvec_iops"] / row["fio_iops"]
        rows.append(row)
        print(f"QD{qd}: diskvec {row['diskvec_iops']:.0f} IOPS, fio {row['fio_iops']:.0f} IOPS, "
              f"ratio {row['ratio']:.3f}; p50 {row['diskvec_p50_us']:.0f} vs {row['fio_p50_us']:.0f} us; "
              f"runs {row['diskvec_runs']} vs {row['fio_runs']}", flush=True)
    if a.out:
        Path(a.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
