#!/bin/bash
# The streaming case at 2M (a head of the synthetic 10M set): load to green, then 5,000/s with four searchers.
set -x
cd /work/data/stall2m
PY=/work/main/benchmarks/db/.venvs/diskvec/bin/python
B=/work/main/target/release/diskvec
[ -f /work/data/synth2m-f16/neighbors.parquet ] || /usr/bin/time -v $B dataset head --from /work/data/synth10m-f16 --n 2000000 --out /work/data/synth2m-f16 > head.out 2> head.err
CG=/sys/fs/cgroup/memory/imp4g
echo 0 > $CG/memory.max_usage_in_bytes
echo $$ > $CG/cgroup.procs
rm -rf db
$PY /work/main/benchmarks/db/import_large.py --api python --dataset /work/data/synth2m-f16 --db db --out import.json > import.out 2> import.err
echo 0 > $CG/memory.max_usage_in_bytes
$PY /work/main/benchmarks/db/stream_large.py --db db --dataset /work/data/synth2m-f16 --rates 5000,500 --idle-s 60 --duration-s 300 --green-timeout 600 --monitor-s 15 --out stream.json > stream.out 2> stream.err
cat $CG/memory.max_usage_in_bytes > cgmax.txt
