#!/bin/bash
# A/B of the growing segments' share: TAG OFFSET
TAG=$1; OFF=$2
CG=/sys/fs/cgroup/memory/imp4g
echo $$ > $CG/cgroup.procs
cd /work/data/s10m
/work/main/benchmarks/db/.venvs/diskvec/bin/python /work/main/benchmarks/db/stream_large.py --db db --dataset /work/data/synth10m-f16 \
  --rates 500 --idle-s 60 --warmup-s 45 --duration-s 240 --green-timeout 900 --monitor-s 15 \
  --new-from /work/data/more10m --new-offset $OFF --out stream-$TAG.json > stream-$TAG.out 2> stream-$TAG.err
