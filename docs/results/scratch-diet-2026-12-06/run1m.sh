#!/bin/bash
# 1M x 768 float16 synthetic build in 732 MiB budget, 1 GiB cgroup; samples disk use of the index dir.
IDX=/work/data/idx1m
rm -rf $IDX; mkdir -p $IDX
echo $$ > /sys/fs/cgroup/memory/b1m/cgroup.procs
( max=0; while true; do u=$(du -sb $IDX 2>/dev/null | cut -f1); [ -n "$u" ] && [ "$u" -gt "$max" ] && max=$u && echo $max > /work/data/run1m.du; sleep 1; done ) &
SAMPLER=$!
/usr/bin/time -v /work/data/diskvec-s33 build --dataset /work/data/synth1m-f16 --index $IDX --metric l2 --pq-bytes 96 --memory-budget 25% --dtype ${DTYPE:-float16} --json > /work/data/run1m.json 2> /work/data/run1m.err
echo "exit $?" >> /work/data/run1m.err
kill $SAMPLER
