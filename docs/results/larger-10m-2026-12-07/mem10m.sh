#!/bin/bash
# The 10M x 768 float16 build with PiPNN inside a 2 GiB memory cgroup (v1), with a memory timeline: every 2 s the cgroup's usage, its anon (rss) and
# huge-page (rss_huge) bytes, its page cache, and the build's phase.
BIN=${BIN:-/work/data/diskvec-s38}; OUT=${OUT:-/work/data/run10m-s38}
IDX=/work/data/idx10m
CG=/sys/fs/cgroup/memory/b10m
mkdir -p $CG; echo $((2 << 30)) > $CG/memory.limit_in_bytes
mkdir -p $IDX
echo 0 > $CG/memory.max_usage_in_bytes
echo $$ > $CG/cgroup.procs
( while true; do u=$(du -sb $IDX 2>/dev/null | cut -f1); f=$(df -B1 --output=avail /work | tail -1); echo "$(date +%s) $u $f" >> $OUT.du; sleep 5; done ) &
S1=$!
( while true; do st=$(awk '$1=="rss"||$1=="rss_huge"||$1=="cache"{printf "%s=%d ", $1, $2/1048576}' $CG/memory.stat); ph=$(tail -c 200 $OUT.err 2>/dev/null | grep -o '"done":[0-9]*,"phase":"[^"]*"' | tail -1); echo "$(date +%s) usage=$(( $(cat $CG/memory.usage_in_bytes)/1048576 )) $st $ph" >> $OUT.mem; sleep 2; done ) &
S2=$!
/usr/bin/time -v $BIN build --dataset /work/data/synth10m-f16 --index $IDX --metric cosine --memory-budget 2GiB --dtype float16 --graph-builder pipnn --json > $OUT.json 2> $OUT.err
echo "exit $?" >> $OUT.err
cat $CG/memory.max_usage_in_bytes $CG/memory.failcnt >> $OUT.err
kill $S1 $S2
