#!/bin/bash
# 1M x 768 float16 synthetic build at 25% (732 MiB) inside a 732 MiB memory cgroup; samples
# the index directory's disk use every second (max in $OUT.du).
# Env: BIN (binary), DTYPE (float16), INPUT_ORDER (1: nodes in input order, codes streamed
# into the index files), OUT (prefix of the result files).
BIN=${BIN:-/work/data/diskvec-s33b}; OUT=${OUT:-/work/data/run1m}
IDX=/work/data/idx1m
rm -rf $IDX; mkdir -p $IDX
echo 0 > /sys/fs/cgroup/memory/b1m/memory.max_usage_in_bytes
echo $$ > /sys/fs/cgroup/memory/b1m/cgroup.procs
( max=0; while true; do u=$(du -sb $IDX 2>/dev/null | cut -f1); [ -n "$u" ] && [ "$u" -gt "$max" ] && max=$u && echo $max > $OUT.du; sleep 1; done ) &
SAMPLER=$!
[ -n "$PIPNN" ] && export DISKVEC_PIPNN="$PIPNN"
[ -n "$INPUT_ORDER" ] && export DISKVEC_BUILD_INPUT_ORDER=1
/usr/bin/time -v $BIN build --dataset /work/data/synth1m-f16 --index $IDX --metric l2 --pq-bytes 96 --memory-budget 25% --dtype ${DTYPE:-float16} ${GRAPH:+--graph-builder $GRAPH} --json > $OUT.json 2> $OUT.err
echo "exit $?" >> $OUT.err
cat /sys/fs/cgroup/memory/b1m/memory.max_usage_in_bytes >> $OUT.err
kill $SAMPLER
