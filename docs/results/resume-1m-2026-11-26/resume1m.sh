#!/bin/bash
# 1M x 768 budgeted build (25%, 732 MiB cgroup): uninterrupted, then killed at KILL_AT s and run again (resumed).
BIN=/tmp/w/diskvec-s18
KILL_AT=${KILL_AT:-150}
LIM=$((732*1048576))
ARGS="--dataset /tmp/w/synth1m --metric l2 --max-degree 64 --build-list 100 --pq-bytes 96 --threads 2 --memory-budget 25% --json"
LOG=/tmp/w/resume1m.log
echo "start $(date +%s)" > $LOG
rm -rf /tmp/w/rs-full /tmp/w/rs-res
s=$(date +%s.%N); /tmp/w/incg.sh $LIM $BIN build --index /tmp/w/rs-full $ARGS > /tmp/w/rs-full.json 2> /tmp/w/rs-full.err; rc=$?
echo "full rc=$rc wall $(echo "$(date +%s.%N) - $s" | bc)" >> $LOG
s=$(date +%s.%N); /tmp/w/incg.sh $LIM timeout -s KILL $KILL_AT $BIN build --index /tmp/w/rs-res $ARGS > /tmp/w/rs-kill.json 2> /tmp/w/rs-kill.err; rc=$?
echo "killed rc=$rc wall $(echo "$(date +%s.%N) - $s" | bc)" >> $LOG
ls -la /tmp/w/rs-res/build-checkpoint >> $LOG 2>&1
s=$(date +%s.%N); /tmp/w/incg.sh $LIM $BIN build --index /tmp/w/rs-res $ARGS > /tmp/w/rs-res.json 2> /tmp/w/rs-res.err; rc=$?
echo "resumed rc=$rc wall $(echo "$(date +%s.%N) - $s" | bc)" >> $LOG
for i in full res; do
  $BIN search --index /tmp/w/rs-$i --dataset /tmp/w/synth1m --search-list 50,100 --json 2>/dev/null | grep '^{' | python3 -c "import sys,json; [print('$i', j['search_list'], j['recall']) for j in map(json.loads, sys.stdin)]" >> $LOG
done
echo "end $(date +%s)" >> $LOG
