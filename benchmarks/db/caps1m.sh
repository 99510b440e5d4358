#!/usr/bin/env bash
# Search QPS against the DRAM a process may use (issue 22): the 1M x 768 synthetic set in
# diskvec's database with every setting at its default (the search memory automatic) and in
# qdrant-edge-py (vectors and HNSW on disk, its page cache counted), each search process in a
# memory cgroup of 5%, 10%, 20%, 40%, 100% and 200% of the raw vectors (2,930 MiB), the
# database's files evicted from the page cache first. One system at a time, every step bounded.
#
#   DB_BENCH_WORK=/tmp/w/dbbench bash benchmarks/db/caps1m.sh OUTDIR DATASET_DIR [STEPS]
#
# DATASET_DIR: the set as `diskvec dataset synth --n 1000000 --dim 768` wrote it (parquet);
# its .npy cache must be under $DB_BENCH_WORK/cache/synth-1m-768 (`common.py prepare`).
# STEPS (default "dv-load qd-load search"); CAPS ("5 10 20 40 100 200", percent), THREADS
# ("1 4") and SYSTEMS ("diskvec qdrant") choose the grid.
set -u
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
V="$HERE/.venvs"
OUT="$1"
DATA="$2"
STEPS="${3:-dv-load qd-load search}"
DS=synth-1m-768
WORK="${DB_BENCH_WORK:?}"
export DB_BENCH_WORK
RAW_MIB=2930
CAPS="${CAPS:-5 10 20 40 100 200}"
THREADS="${THREADS:-1 4}"
SYSTEMS="${SYSTEMS:-diskvec qdrant}"
MIN_S="${MIN_SECONDS:-5}"
MAX_S="${MAX_SECONDS:-20}"
DV_K10="${DV_K10:-20,50,120}"
DV_K100="${DV_K100:-120,250}"
QD_K10="${QD_K10:-32,64,160}"
QD_K100="${QD_K100:-128,300}"
DVDB="$WORK/db/diskvec-sync/$DS"
QDDB="$WORK/db/qdrant-edge-diskhnsw/$DS"
mkdir -p "$OUT"
LOG="$OUT/run.log"
. "$HERE/steps.sh"
{ cat "$V/versions.txt"; echo; nproc; free -m; uptime; } >> "$OUT/machine.txt" 2>&1

if has dv-load; then
  rm -rf "$DVDB"; mkdir -p "$(dirname "$DVDB")"
  step "diskvec import" 3000 bash -c "'$REPO/target/release/diskvec' import --db '$DVDB' --collection c \
    --dataset '$DATA' --metric l2 --seal-threshold 2000000 --interval-ms 200 --optimize --json \
    > '$OUT/diskvec-load.stdout' 2> '$OUT/diskvec-load.stderr'"
fi
if has qd-load; then
  step "qdrant-edge load" 3000 "$V/qdrant/bin/python" "$HERE/run_qdrant_edge.py" --phase load \
    --variant diskhnsw --dataset "$DS" --out "$OUT/qdrant-load.json" 2>>"$LOG"
fi

search() {  # search SYS PERCENT THREADS
  local sys="$1" pct="$2" threads="$3" py drv variant db k10 k100
  if [ "$sys" = diskvec ]; then py="$V/diskvec/bin/python"; drv="$HERE/run_diskvec.py"; variant=sync; db="$DVDB"; k10="$DV_K10"; k100="$DV_K100"
  else py="$V/qdrant/bin/python"; drv="$HERE/run_qdrant_edge.py"; variant=diskhnsw; db="$QDDB"; k10="$QD_K10"; k100="$QD_K100"; fi
  local cap=$((RAW_MIB * pct / 100)) label="cap${pct}pct-t${threads}"
  step "$sys search $label ($cap MiB)" 900 "$V/qdrant/bin/python" "$HERE/common.py" cgrun --cap-mib "$cap" --evict "$db" \
    --timeout 870 --info "$OUT/$sys-search-$label.cgroup.json" -- \
    "$py" "$drv" --phase search --variant "$variant" --dataset "$DS" --min-seconds "$MIN_S" --max-seconds "$MAX_S" \
    --threads "$threads" --knobs10 "$k10" --knobs100 "$k100" --out "$OUT/$sys-search-$label.json" 2>>"$LOG"
}

if has search; then
  for threads in $THREADS; do
    for pct in $CAPS; do
      for sys in $SYSTEMS; do search "$sys" "$pct" "$threads"; done
    done
  done
fi
say done
