#!/bin/bash
# usage: stream.sh TAG RATES [extra args]; the streaming case on the loaded 10M db, 4 GiB cgroup.
cd /work/data/s10m
TAG=$1; RATES=$2; shift 2
PY=/work/main/benchmarks/db/.venvs/diskvec/bin/python
CG=/sys/fs/cgroup/memory/imp4g
echo 0 > $CG/memory.max_usage_in_bytes
echo $$ > $CG/cgroup.procs
$PY /work/main/benchmarks/db/stream_large.py --db db --dataset /work/data/synth10m-f16 --rates $RATES --idle-s 120 --duration-s 600 --green-timeout 1200 --monitor-s 15 --new-from /work/data/more10m --out stream-$TAG.json "$@" > stream-$TAG.out 2> stream-$TAG.err
cat $CG/memory.max_usage_in_bytes > cgmax-$TAG.txt
