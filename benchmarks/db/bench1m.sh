#!/usr/bin/env bash
# The "tight DRAM budget" case at 1M x 768 (synthetic, `diskvec dataset synth`): diskvec vs
# qdrant-edge-py with vectors and HNSW graph on disk, search served from a process in a memory
# cgroup capped at CAP_MIB (RAM + page cache), then (if time allows) with a generous budget.
# One system at a time, every step bounded by `timeout`.
#
#   DB_BENCH_WORK=/work/bench/db1m DB_BENCH_DATASETS=/work/bench/db1m bash benchmarks/db/bench1m.sh OUTDIR [STEPS]
#
# STEPS (default "prepare dv-load dv-cap dv-gen qd-load qd-cap qd-gen"):
#   prepare  parquet -> .npy cache (common.py prepare)
#   dv-load  `diskvec import --seal-threshold 2000000 --interval-ms 200 --optimize --json`
#            (one growing segment, one DiskANN build of 1M at optimize)
#   qd-load  run_qdrant_edge.py --phase load --variant diskhnsw (batches of 100, then optimize())
#   *-cap    --phase search inside `common.py cgrun --cap-mib CAP_MIB`, the DB's page cache
#            dropped first
#   *-gen    the same with a generous cap (GEN_MIB), DB files read into the page cache first
set -u
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
V="$HERE/.venvs"
OUT="$1"
STEPS="${2:-prepare dv-load dv-cap dv-gen qd-load qd-cap qd-gen}"
DS=synth-1m-768
WORK="${DB_BENCH_WORK:?}"
export DB_BENCH_WORK DB_BENCH_DATASETS="${DB_BENCH_DATASETS:?}"
CAP_MIB="${CAP_MIB:-512}"
GEN_MIB="${GEN_MIB:-16384}"
MIN_S="${MIN_SECONDS:-10}"
MAX_S="${MAX_SECONDS:-60}"
LOAD_LIMIT="${LOAD_LIMIT:-2700}"
SEARCH_LIMIT="${SEARCH_LIMIT:-1500}"
DV_K10="${DV_K10:-10,20,40,80,150,250}"
DV_K100="${DV_K100:-100,150,250,400}"
QD_K10="${QD_K10:-16,32,64,128,256}"
QD_K100="${QD_K100:-100,128,256,512}"
DVDB="$WORK/db/diskvec-sync/$DS"
QDDB="$WORK/db/qdrant-edge-diskhnsw/$DS"
mkdir -p "$OUT"
LOG="$OUT/run.log"
. "$HERE/steps.sh"
# say's output and the drivers' logs go to $LOG (stderr of the steps is appended there)
steal() { top -bn2 -d5 | grep '%Cpu' | tail -1; }

{ cat "$V/versions.txt"; echo; nproc; free -m; uptime; echo "top (5 s): $(steal)"; } >> "$OUT/machine.txt" 2>&1

has prepare && step prepare 1200 "$V/qdrant/bin/python" "$HERE/common.py" prepare "$DS" 2>>"$LOG"

if has dv-load; then
  rm -rf "$DVDB"; mkdir -p "$(dirname "$DVDB")"
  say "top before dv-load: $(steal)"
  step "diskvec import" "$LOAD_LIMIT" bash -c "/usr/bin/time -v '$REPO/target/release/diskvec' import --db '$DVDB' \
    --collection c --dataset '$DB_BENCH_DATASETS/$DS' --seal-threshold 2000000 --interval-ms 200 --optimize --json \
    > '$OUT/diskvec-load.stdout' 2> '$OUT/diskvec-load.stderr'"
  du -sb "$DVDB" >> "$OUT/diskvec-load.stdout"
fi

search() {  # search SYS LABEL CAP_MIB EVICT(0/1)
  local sys="$1" label="$2" cap="$3" evict="$4" py drv variant db k10 k100
  if [ "$sys" = diskvec ]; then py="$V/diskvec/bin/python"; drv="$HERE/run_diskvec.py"; variant=sync; db="$DVDB"; k10="$DV_K10"; k100="$DV_K100"
  else py="$V/qdrant/bin/python"; drv="$HERE/run_qdrant_edge.py"; variant=diskhnsw; db="$QDDB"; k10="$QD_K10"; k100="$QD_K100"; fi
  local ev=()
  if [ "$evict" = 1 ]; then ev=(--evict "$db"); else find "$db" -type f -exec cat {} + > /dev/null; fi
  say "top before $sys $label: $(steal)"
  step "$sys search $label" "$SEARCH_LIMIT" "$V/qdrant/bin/python" "$HERE/common.py" cgrun --cap-mib "$cap" "${ev[@]}" \
    --timeout $((SEARCH_LIMIT - 30)) --info "$OUT/$sys-search-$label.cgroup.json" -- \
    "$py" "$drv" --phase search --variant "$variant" --dataset "$DS" --min-seconds "$MIN_S" --max-seconds "$MAX_S" \
    --knobs10 "$k10" --knobs100 "$k100" --out "$OUT/$sys-search-$label.json" 2>>"$LOG"
}

has dv-cap && search diskvec cap$CAP_MIB "$CAP_MIB" 1
has dv-gen && search diskvec generous "$GEN_MIB" 0

if has qd-load; then
  say "top before qd-load: $(steal)"
  step "qdrant-edge diskhnsw load" "$LOAD_LIMIT" "$V/qdrant/bin/python" "$HERE/run_qdrant_edge.py" --phase load \
    --variant diskhnsw --dataset "$DS" --out "$OUT/qdrant-load.json" 2>>"$LOG"
  du -sb "$QDDB" >> "$LOG"
fi

has qd-cap && search qdrant cap$CAP_MIB "$CAP_MIB" 1
has qd-gen && search qdrant generous "$GEN_MIB" 0
say done
