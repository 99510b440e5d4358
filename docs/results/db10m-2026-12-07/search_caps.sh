#!/bin/bash
# The loaded 10M database (collection "c", synthetic 10M x 768 float16) searched with its
# test queries inside memory cgroups of 5%, 10% and 25% of the raw float32 vectors
# (30.72 GB): k = 100 and k = 10, 1 and 4 threads, several search lists; recall, QPS, p99,
# nodes read a query. Each run opens the database afresh inside its cgroup (the automatic
# search budget reads the cgroup's limit).
#   BIN=... DB=... DS=... OUT=... bash search_caps.sh
set -u
BIN=${BIN:-/work/data/diskvec-s39}; DB=${DB:-/work/data/http10m/db}
DS=${DS:-/work/data/synth10m-f16}; OUT=${OUT:-/work/data/search-caps}
RAW=$((10000000 * 768 * 4))
for pct in ${CAPS:-5 10 25}; do
  CG=/sys/fs/cgroup/memory/cap$pct
  mkdir -p $CG
  echo $((RAW * pct / 100)) > $CG/memory.limit_in_bytes
  for threads in 1 4; do
    limit=$([ $threads = 1 ] && echo 300 || echo 0)
    for k in 100 10; do
      lists=$([ $k = 100 ] && echo 100,150,200,300 || echo 10,20,40,80)
      echo 0 > $CG/memory.max_usage_in_bytes
      sh -c "echo \$\$ > $CG/cgroup.procs; exec $BIN query --db $DB --collection c --test-queries $DS --k $k --search-list $lists --threads $threads --limit $limit --json" \
        > $OUT.cap$pct.t$threads.k$k.json 2> $OUT.cap$pct.t$threads.k$k.err
      echo "cap $pct% threads $threads k $k exit $? peak $(cat $CG/memory.max_usage_in_bytes) failcnt $(cat $CG/memory.failcnt)" | tee -a $OUT.log
    done
  done
done
