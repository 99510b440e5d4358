#!/usr/bin/env bash
# The database-layer benchmark of issue 9: diskvec vs qdrant-edge-py (vectors in RAM and on
# disk) vs lancedb, one system at a time, every step bounded by `timeout`.
#
#   bash benchmarks/db/setup.sh                      # once: the three virtualenvs
#   bash benchmarks/db/run.sh [OUTDIR]               # default OUTDIR results/$(date +%F)
#
# Environment: DATASETS (default both WordNet sets), PHASES (default "load search filter mem
# batch durability"), SYSTEMS (default "diskvec qdrant-mem qdrant-disk lancedb lancedb-ivfpq"),
# MIN_SECONDS (10), MAX_SECONDS (40), GENEROUS_MIB (8192; 0 leaves it out), ALLOWANCE_MIB (150),
# EXTRA_CAPS (more caps, "label=MiB,..."; default none), MEM_DATASETS (default: minilm
# only), DB_BENCH_WORK (databases and caches, default /work/bench/dbbench).
# Filtered search runs on wordnet-minilm384-50k only. Failures are logged to OUTDIR/failures.txt
# and the run goes on.
set -u
HERE="$(cd "$(dirname "$0")" && pwd)"
V="$HERE/.venvs"
OUT="${1:-$HERE/results/$(date +%F)}"
DATASETS="${DATASETS:-wordnet-minilm384-50k wordnet-mpnet768-25k}"
MEM_DATASETS="${MEM_DATASETS:-wordnet-minilm384-50k}"
PHASES="${PHASES:-load search filter mem batch durability}"
SYSTEMS="${SYSTEMS:-diskvec qdrant-mem qdrant-disk lancedb lancedb-ivfpq}"
MIN_SECONDS="${MIN_SECONDS:-10}"
MAX_SECONDS="${MAX_SECONDS:-40}"
GENEROUS_MIB="${GENEROUS_MIB:-8192}"
ALLOWANCE_MIB="${ALLOWANCE_MIB:-150}"
mkdir -p "$OUT"
LOG="$OUT/run.log"

has() { [[ " $2 " == *" $1 "* ]]; }
say() { echo "[$(date +%T)] $*" | tee -a "$LOG" >&2; }
# step LABEL SECONDS CMD...: runs CMD bounded by SECONDS (then SIGKILL 10 s later)
step() {
  local label="$1" t="$2"; shift 2
  say "start $label (limit ${t}s)"
  local s=$SECONDS
  timeout --kill-after=10 "$t" "$@" 2>>"$LOG"
  local rc=$?
  say "end $label rc=$rc in $((SECONDS - s))s"
  [ $rc -eq 0 ] || echo "$label: exit $rc after $((SECONDS - s)) s" >> "$OUT/failures.txt"
}
# system -> "python driver variant"
sys_of() {
  case "$1" in
    diskvec) echo "$V/diskvec/bin/python $HERE/run_diskvec.py sync" ;;
    diskvec-interval) echo "$V/diskvec/bin/python $HERE/run_diskvec.py interval" ;;
    qdrant-mem) echo "$V/qdrant/bin/python $HERE/run_qdrant_edge.py mem" ;;
    qdrant-disk) echo "$V/qdrant/bin/python $HERE/run_qdrant_edge.py disk" ;;
    qdrant-diskhnsw) echo "$V/qdrant/bin/python $HERE/run_qdrant_edge.py diskhnsw" ;;
    lancedb) echo "$V/lancedb/bin/python $HERE/run_lancedb.py hnsw_sq" ;;
    lancedb-ivfpq) echo "$V/lancedb/bin/python $HERE/run_lancedb.py ivf_pq" ;;
  esac
}
drive() {  # drive SYSTEM PHASE DATASET LIMIT [extra args]
  local sysname="$1" phase="$2" ds="$3" limit="$4"; shift 4
  read -r py drv variant <<<"$(sys_of "$sysname")"
  step "$sysname $phase $ds" "$limit" "$py" "$drv" --phase "$phase" --variant "$variant" --dataset "$ds" \
    --out "$OUT/$sysname-$phase-$ds.json" "$@"
}

{ cat "$V/versions.txt"; echo; nproc; free -m; uptime; } > "$OUT/machine.txt" 2>&1
say "results in $OUT"
step "prepare" 900 "$V/qdrant/bin/python" "$HERE/common.py" prepare $DATASETS

for ds in $DATASETS; do
  if has load "$PHASES"; then
    for s in $SYSTEMS; do drive "$s" load "$ds" 1800; done
    has diskvec "$SYSTEMS" && drive diskvec-interval load "$ds" 1800
  fi
  if has search "$PHASES"; then
    for s in $SYSTEMS; do drive "$s" search "$ds" 1500 --min-seconds "$MIN_SECONDS" --max-seconds "$MAX_SECONDS"; done
  fi
  if has filter "$PHASES" && [[ "$ds" == *minilm* ]]; then
    for s in $SYSTEMS; do
      [ "$s" = lancedb-ivfpq ] && continue
      drive "$s" filter "$ds" 1500 --min-seconds 5 --max-seconds 30
    done
  fi
  if has mem "$PHASES" && has "$ds" "$MEM_DATASETS"; then
    # tight cap: diskvec's own index DRAM (sum of its segments' dram_bytes) + the allowance
    tight=$("$V/qdrant/bin/python" - "$OUT/diskvec-load-$ds.json" "$ALLOWANCE_MIB" <<'EOF'
import json, sys
try:
    d = json.load(open(sys.argv[1]))["info"]["index_dram_bytes"]
    print(round(d / 2**20 + float(sys.argv[2]), 1))
except Exception:
    print("")
EOF
)
    caps=""
    [ "$GENEROUS_MIB" != 0 ] && caps="generous=$GENEROUS_MIB"
    if [ -z "$tight" ]; then
      say "no diskvec index DRAM figure for $ds: tight cap skipped"
    else
      say "tight cap for $ds: $tight MiB"
      caps="${caps:+$caps,}tight=$tight"
    fi
    [ -n "${EXTRA_CAPS:-}" ] && caps="${caps:+$caps,}$EXTRA_CAPS"
    for s in $SYSTEMS; do
      [ "$s" = lancedb-ivfpq ] && continue
      drive "$s" mem "$ds" 900 --caps-mib "$caps" --min-seconds "$MIN_SECONDS" --max-seconds 30 --mem-timeout 240
    done
  fi
  if has batch "$PHASES"; then
    # supplementary: the bindings' own batch calls (diskvec search_batch, qdrant query_batch)
    for s in $SYSTEMS; do
      case "$s" in diskvec|qdrant-mem|qdrant-disk) drive "$s" batch "$ds" 900 --min-seconds 5 --max-seconds 30 ;; esac
    done
  fi
done

if has durability "$PHASES"; then
  # sync calls made while one client writes N points in batches of 100 (no indexing step), at
  # two sizes: a count that does not grow with N is not per write
  ds="${DATASETS%% *}"
  for s in diskvec diskvec-interval qdrant-mem lancedb; do
    read -r py drv variant <<<"$(sys_of "$s")"
    for n in 2000 10000; do
      step "$s durability n=$n" 600 strace -f -c -o "$OUT/durability-$s-$n.strace.txt" \
        -e trace=fsync,fdatasync,msync,sync_file_range,syncfs,io_uring_enter \
        "$py" "$drv" --phase ingest-only --n "$n" --variant "$variant" --dataset "$ds" --out "$OUT/$s-ingest$n-$ds.json"
    done
  done
fi

"$V/qdrant/bin/python" "$HERE/report.py" "$OUT" > "$OUT/report.md" 2>>"$LOG" && say "report: $OUT/report.md"
