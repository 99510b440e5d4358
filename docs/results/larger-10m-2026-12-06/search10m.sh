#!/bin/bash
# Search the 10M index inside a memory cgroup of CAP bytes (page cache counts): for k = 10
# and 100, and 1, 4 and 32 queries in flight (threads x queries each), recall, reads, QPS
# and p99 at several search lists.
# usage: search10m.sh CAP_BYTES LABEL [extra search flags...]
BIN=${BIN:-/work/data/diskvec-s35e}; CAP=$1; LABEL=$2; shift 2
EXTRA=("$@")
CG=/sys/fs/cgroup/memory/s10m
mkdir -p $CG
echo $CAP > $CG/memory.limit_in_bytes
echo 0 > $CG/memory.max_usage_in_bytes
sync; echo 1 > /proc/sys/vm/drop_caches
echo $$ > $CG/cgroup.procs
for k in 10 100; do
 L="100,200"; [ $k = 100 ] && L="150,200,300"
 for tq in "1 1" "4 1" "2 16"; do
  read t q <<< "$tq"
  $BIN search --index /work/data/idx10m --dataset /work/data/synth10m-f16 --k $k --search-list $L \
    --threads $t --queries-per-thread $q "${EXTRA[@]}" --json 2>/dev/null | python3 -c "
import sys,json
out=[]
for l in sys.stdin:
  try: o=json.loads(l)
  except: continue
  rs=o if isinstance(o,list) else o.get('results',[o])
  for r in rs:
    if isinstance(r,dict) and 'recall' in r: out.append('L%d %.4f %.1f reads %.0f qps p99 %.1f ms rss %.0f MB' % (r['search_list'], r['recall'], r['mean_ios'], r.get('qps',0), r.get('p99_ms',-1), r.get('peak_rss_mb',-1)))
print('$LABEL k=$k in-flight=$((t*q)) (threads $t x $q) |', ' | '.join(out))"
 done
done
echo "$LABEL max_usage $(cat $CG/memory.max_usage_in_bytes) failcnt $(cat $CG/memory.failcnt)"
