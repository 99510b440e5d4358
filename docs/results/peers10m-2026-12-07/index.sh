#!/bin/bash
# usage: index.sh SYSTEM VENV SECONDS ; the index phase alone in the 4 GiB cgroup, killed at SECONDS
SYS=$1; PY=/work/main/benchmarks/db/.venvs/$2/bin/python
CG=/sys/fs/cgroup/memory/${CGNAME:-peer4g}
echo 0 > $CG/memory.max_usage_in_bytes 2>/dev/null
sync; echo 3 > /proc/sys/vm/drop_caches
echo $$ > $CG/cgroup.procs
date -u +%FT%TZ
/usr/bin/time -v timeout -s KILL $3 $PY /work/main/benchmarks/db/peers_large.py --system $SYS --phase index \
  --dataset /work/data/synth10m-f16 --store /work/data/peers/$SYS-store --out /work/data/peers/$SYS-index.json
echo "rc=$?" ; date -u +%FT%TZ
cat $CG/memory.max_usage_in_bytes
