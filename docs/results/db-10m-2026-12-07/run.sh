#!/bin/bash
# The 10M x 768 float16 synthetic set loaded into the database through the Python API
# (benchmarks/db/import_large.py) inside a 4 GiB memory cgroup (v1, page cache counts),
# with a 2 s memory timeline of the cgroup. Paths are this machine's (data outside the repository).
# usage: run.sh LABEL API LIMIT|"" [CAP_BYTES]  -> /work/data/imp/LABEL.{json,samples,log}
LABEL=$1; API=$2; LIMIT=$3; CAP=${4:-4294967296}
CG=/sys/fs/cgroup/memory/${CGN:-imp}
mkdir -p $CG
echo $CAP > $CG/memory.limit_in_bytes
echo 0 > $CG/memory.max_usage_in_bytes
echo 0 > $CG/memory.failcnt 2>/dev/null
DB=/work/data/imp/db-$LABEL
rm -rf $DB
echo $$ > $CG/cgroup.procs
( while true; do st=$(awk '$1=="rss"||$1=="rss_huge"||$1=="cache"{printf "%s=%d ", $1, $2/1048576}' $CG/memory.stat); echo "$(date +%s) usage=$(( $(cat $CG/memory.usage_in_bytes)/1048576 )) $st" >> /work/data/imp/$LABEL.mem; sleep 2; done ) &
S=$!
L=(); [ -n "$LIMIT" ] && L=(--limit $LIMIT)
/work/data/venv10m/bin/python /work/main/benchmarks/db/import_large.py --api $API --bin /work/data/diskvec-s36c \
  --dataset /work/data/synth10m-f16 --db $DB --out /work/data/imp/$LABEL.json --sample-every ${EVERY:-60} "${L[@]}" > /work/data/imp/$LABEL.log 2>&1
echo "exit $?" >> /work/data/imp/$LABEL.log
cat $CG/memory.max_usage_in_bytes $CG/memory.failcnt >> /work/data/imp/$LABEL.log
kill $S
