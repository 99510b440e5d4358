#!/bin/bash
# usage: load.sh SYSTEM VENV ; runs the peer's load in a 4 GiB cgroup, killed at 90 minutes
SYS=$1; PY=/work/main/benchmarks/db/.venvs/$2/bin/python
CG=/sys/fs/cgroup/memory/peer4g
echo 0 > $CG/memory.max_usage_in_bytes 2>/dev/null
sync; echo 3 > /proc/sys/vm/drop_caches
echo $$ > $CG/cgroup.procs
date -u +%FT%TZ > /work/data/peers/$SYS.start
/usr/bin/time -v timeout -s KILL 5400 $PY /work/main/benchmarks/db/peers_large.py --system $SYS --phase load \
  --dataset /work/data/synth10m-f16 --store /work/data/peers/$SYS-store --out /work/data/peers/$SYS-load.json
echo "rc=$?" ; date -u +%FT%TZ
cat $CG/memory.max_usage_in_bytes
