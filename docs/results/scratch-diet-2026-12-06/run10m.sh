#!/bin/bash
# 10M x 768 float16 synthetic build, 2 GiB budget inside a 2 GiB memory cgroup (page cache
# counts); samples the index directory's disk use every 5 s and the file system's free space.
IDX=/work/data/idx10m
rm -rf $IDX; mkdir -p $IDX
echo 0 > /sys/fs/cgroup/memory/b10m/memory.max_usage_in_bytes
echo $$ > /sys/fs/cgroup/memory/b10m/cgroup.procs
( max=0; while true; do u=$(du -sb $IDX 2>/dev/null | cut -f1); f=$(df -B1 --output=avail /work | tail -1); echo "$(date +%s) $u $f" >> /work/data/run10m.du; sleep 5; done ) &
SAMPLER=$!
/usr/bin/time -v /work/data/diskvec-s33 build --dataset /work/data/synth10m-f16 --index $IDX --metric cosine --memory-budget 2GiB --dtype float16 --json > /work/data/run10m.json 2> /work/data/run10m.err
echo "exit $?" >> /work/data/run10m.err
cat /sys/fs/cgroup/memory/b10m/memory.max_usage_in_bytes /sys/fs/cgroup/memory/b10m/memory.failcnt >> /work/data/run10m.err
kill $SAMPLER
