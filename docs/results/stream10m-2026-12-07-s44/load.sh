#!/bin/bash
# Load the 10M set to green in a 4 GiB cgroup (testbed for the streaming case at 10M).
cd /work/data/s10m
PY=/work/main/benchmarks/db/.venvs/diskvec/bin/python
CG=/sys/fs/cgroup/memory/imp4g
echo 0 > $CG/memory.max_usage_in_bytes
echo $$ > $CG/cgroup.procs
rm -rf db
sync; echo 3 > /proc/sys/vm/drop_caches
/usr/bin/time -v $PY /work/main/benchmarks/db/import_large.py --api python --dataset /work/data/synth10m-f16 --db db --out import.json > import.out 2> import.err
cat $CG/memory.max_usage_in_bytes > cgmax.txt
