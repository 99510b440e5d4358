#!/usr/bin/env bash
# VectorDBBench 2.0 (PyPI vectordb-bench==2.0.0), unchanged, against `diskvec serve` (its
# qdrantlocal client) and against Milvus 2.3.5 standalone (its milvushnsw / milvusdiskann
# clients), on the two shipped real sets, one after the other. See README.md, "vdbb".
#
#   bash benchmarks/server/vdbb_run.sh [DISKVEC_BINARY]
#
# Settings (environment):
#   VDBB_ROOT      venv, server data, results, logs      (/work/bench/vdbb)
#   DATASETS       where the sets are                    (/work/shared/datasets)
#   SETS           which sets                            ("wordnet-minilm384-50k wordnet-mpnet768-25k")
#   ENGINES        which runs, in order                  ("diskvec diskvec-ondisk milvus-hnsw milvus-diskann")
#                  diskvec: VectorDBBench's default on_disk=false (nodes in DRAM);
#                  diskvec-ondisk: --on-disk True (nodes read from the SSD, 1% cached)
#   DISKVEC_HNSW_EF   qdrantlocal --hnsw-ef: diskvec's search list (200)
#   DISKVEC_EXTRA_EF  more --hnsw-ef values searched on the same loaded collection ("")
#   DISKVEC_M / DISKVEC_EF_CONSTRUCT  qdrantlocal --m / --ef-construct (30 / 360; diskvec takes
#                  them as its HNSW settings, as it reports under config.hnsw_config)
#   MILVUS_M / MILVUS_EF_CONSTRUCTION / MILVUS_EF  HNSW (30 / 360 / 200)
#   MILVUS_SEARCH_LIST  DISKANN search_list (200)
#   VDBB_NUM_CONCURRENCY / VDBB_DURATION  empty = VectorDBBench's defaults
#                  (1,5,10,20,30,40,60,80 and 30 s); set only for smoke runs
#   RUN_TIMEOUT    seconds one VectorDBBench run may take (5400); DISKANN_TIMEOUT for DISKANN (900)
#   RUN_ID         results go to $VDBB_ROOT/results/$RUN_ID (a timestamp)
# Every process is bounded by `timeout`; servers listen on 127.0.0.1 on free ports and are
# stopped with SIGTERM (SIGKILL only if one is still there 60 s later).
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DISKVEC_BIN="${1:-${DISKVEC_BIN:-/work/bench/bin/diskvec-3df6048}}"
VDBB_ROOT="${VDBB_ROOT:-/work/bench/vdbb}"
DATASETS="${DATASETS:-/work/shared/datasets}"
SETS="${SETS:-wordnet-minilm384-50k wordnet-mpnet768-25k}"
ENGINES="${ENGINES:-diskvec diskvec-ondisk milvus-hnsw milvus-diskann}"
DISKVEC_HNSW_EF="${DISKVEC_HNSW_EF:-200}"
DISKVEC_EXTRA_EF="${DISKVEC_EXTRA_EF:-}"
DISKVEC_M="${DISKVEC_M:-30}"
DISKVEC_EF_CONSTRUCT="${DISKVEC_EF_CONSTRUCT:-360}"
MILVUS_M="${MILVUS_M:-30}"
MILVUS_EF_CONSTRUCTION="${MILVUS_EF_CONSTRUCTION:-360}"
MILVUS_EF="${MILVUS_EF:-200}"
MILVUS_SEARCH_LIST="${MILVUS_SEARCH_LIST:-200}"
VDBB_NUM_CONCURRENCY="${VDBB_NUM_CONCURRENCY:-}"
VDBB_DURATION="${VDBB_DURATION:-}"
RUN_TIMEOUT="${RUN_TIMEOUT:-5400}"
# Milvus 2.3.5 (pip build) fails every DISKANN build ("C Runtime Exception: bad_function_call",
# segcore 2001) and retries it for ever, so that run is cut short and the error recorded.
DISKANN_TIMEOUT="${DISKANN_TIMEOUT:-900}"
RUN_ID="${RUN_ID:-$(date +%Y%m%d-%H%M%S)}"

VENV="$VDBB_ROOT/venv"
PY="$VENV/bin/python"
OUT="$VDBB_ROOT/results/$RUN_ID"
LOGS="$OUT/logs"
mkdir -p "$LOGS" "$VDBB_ROOT/datasets"
export RESULTS_LOCAL_DIR="$OUT" DATASET_LOCAL_DIR="$VDBB_ROOT/datasets"

log() { echo "[vdbb $(date +%H:%M:%S)] $*" | tee -a "$LOGS/run.log"; }

[ -x "$DISKVEC_BIN" ] || { echo "no diskvec binary at $DISKVEC_BIN" >&2; exit 2; }

# --- the venv: VectorDBBench 2.0 requires pymilvus>=2.6.15, so pymilvus 2.3.5 cannot be
# installed beside it; the 2.6 client talks to the 2.3.5 server (see vdbb_milvus_compat.py).
if [ ! -x "$VENV/bin/vectordbbench" ]; then
  log "creating $VENV"
  timeout 300 python3.11 -m venv "$VENV" || exit 2
  timeout 900 "$VENV/bin/pip" install -q 'vectordb-bench[qdrant]==2.0.0' 'milvus==2.3.5' \
    'marshmallow<4' || exit 2
fi
SITE="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
printf '%s\nimport vdbb_milvus_compat\n' "$HERE" >"$SITE/vdbb_milvus_compat.pth"
"$VENV/bin/pip" freeze 2>/dev/null | grep -i -E '^(vectordb-bench|qdrant-client|pymilvus|milvus)==' \
  >"$OUT/versions.txt"
echo "diskvec $DISKVEC_BIN" >>"$OUT/versions.txt"
cat "$OUT/versions.txt" | tee -a "$LOGS/run.log"

SERVER_PID=""
stop_server() {
  [ -n "$SERVER_PID" ] || return 0
  kill -TERM "$SERVER_PID" 2>/dev/null
  for _ in $(seq 60); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 1; done
  kill -0 "$SERVER_PID" 2>/dev/null && { log "server $SERVER_PID ignored SIGTERM: SIGKILL"; kill -KILL "$SERVER_PID"; }
  wait "$SERVER_PID" 2>/dev/null
  SERVER_PID=""
}
trap 'stop_server' EXIT
trap 'stop_server; exit 130' INT TERM

start_diskvec() { # $1 db dir, $2 log -> sets PORT
  rm -rf "$1"
  timeout $((RUN_TIMEOUT + 600)) "$DISKVEC_BIN" serve --db "$1" --host 127.0.0.1 --port 0 \
    >"$2.out" 2>"$2.err" &
  SERVER_PID=$!
  PORT=""
  for _ in $(seq 60); do
    PORT="$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$2.err" | grep -o '[0-9]*$')"
    [ -n "$PORT" ] && return 0
    sleep 1
  done
  log "diskvec did not come up: $(tail -3 "$2.err")"; return 1
}

start_milvus() { # $1 data dir, $2 log -> sets PORT
  rm -rf "$1"; mkdir -p "$1"
  rm -f "$1.port"
  timeout $((RUN_TIMEOUT + 900)) "$PY" "$HERE/vdbb_milvus.py" "$1" "$1.port" >"$2.out" 2>"$2.err" &
  SERVER_PID=$!
  for _ in $(seq 240); do
    [ -s "$1.port" ] && { PORT="$(cat "$1.port")"; return 0; }
    kill -0 "$SERVER_PID" 2>/dev/null || break
    sleep 1
  done
  log "milvus did not come up: $(tail -3 "$2.err")"; return 1
}

dims() { case "$1" in *384*) echo 384 ;; *768*) echo 768 ;; *) "$PY" -c "
import pyarrow.parquet as pq, sys; print(len(pq.read_table(sys.argv[1]).column('emb')[0]))" "$DATASETS/$1/test.parquet" ;; esac; }
rows() { "$PY" -c "import pyarrow.parquet as pq, sys; print(pq.ParquetFile(sys.argv[1]).metadata.num_rows)" "$DATASETS/$1/train.parquet"; }

common_args() { # $1 set, $2 label
  local a=(--case-type PerformanceCustomDataset
    --custom-case-name "$1" --custom-dataset-name "$1" --custom-dataset-dir "$DATASETS/$1"
    --custom-dataset-size "$(rows "$1")" --custom-dataset-dim "$(dims "$1")"
    --custom-dataset-metric-type COSINE --custom-dataset-file-count 1
    --custom-case-load-timeout "$RUN_TIMEOUT" --custom-case-optimize-timeout "$RUN_TIMEOUT"
    --k 100 --db-label "$2" --task-label "$2")
  [ -n "$VDBB_NUM_CONCURRENCY" ] && a+=(--num-concurrency "$VDBB_NUM_CONCURRENCY")
  [ -n "$VDBB_DURATION" ] && a+=(--concurrency-duration "$VDBB_DURATION")
  printf '%s\n' "${a[@]}"
}

bench() { # $1 label, rest: vectordbbench args
  local label="$1"; shift
  log "run $label: vectordbbench $*"
  local t0=$SECONDS
  timeout --signal=TERM --kill-after=60 "$RUN_TIMEOUT" "$VENV/bin/vectordbbench" "$@" \
    >"$LOGS/$label.log" 2>&1
  local rc=$?
  log "run $label: exit $rc after $((SECONDS - t0)) s"
  grep -E 'Failed to run|failed to run|Traceback' "$LOGS/$label.log" | head -3 | tee -a "$LOGS/run.log"
}

qdrantlocal() { # $1 label, $2 hnsw_ef, rest: more vectordbbench flags; uses $set $PORT $on_disk
  local label="$1" ef="$2"; shift 2
  local args; mapfile -t args < <(common_args "$set" "$label")
  VDBB_MILVUS235_COMPAT=0 bench "$label" qdrantlocal --url "http://127.0.0.1:$PORT" \
    --m "$DISKVEC_M" --ef-construct "$DISKVEC_EF_CONSTRUCT" --hnsw-ef "$ef" \
    --on-disk "$on_disk" "$@" "${args[@]}"
}

for set in $SETS; do
  for engine in $ENGINES; do
    label="$engine-$set"
    mapfile -t common < <(common_args "$set" "$label")
    case "$engine" in
      diskvec|diskvec-ondisk)
        # qdrantlocal sends on_disk=false unless --on-disk True: sealed segments in DRAM
        # (diskvec) or read from the SSD with 1% cached (diskvec-ondisk).
        on_disk=False; [ "$engine" = diskvec-ondisk ] && on_disk=True
        start_diskvec "$VDBB_ROOT/db-$RUN_ID-$label" "$LOGS/server-$label" || continue
        log "diskvec on 127.0.0.1:$PORT"
        qdrantlocal "$label" "$DISKVEC_HNSW_EF"
        # More search lists on the same loaded collection (search stages only).
        for ef in $DISKVEC_EXTRA_EF; do
          qdrantlocal "$label-ef$ef" "$ef" --skip-drop-old --skip-load
        done
        curl -s --max-time 30 "http://127.0.0.1:$PORT/collections/QdrantLocalCollection" \
          >"$LOGS/$label.collection.json" || true
        ;;
      milvus-hnsw)
        start_milvus "$VDBB_ROOT/milvus/$RUN_ID-$label" "$LOGS/server-$label" || { stop_server; continue; }
        log "milvus on 127.0.0.1:$PORT"
        VDBB_MILVUS235_COMPAT=1 bench "$label" milvushnsw --uri "http://127.0.0.1:$PORT" \
          --m "$MILVUS_M" --ef-construction "$MILVUS_EF_CONSTRUCTION" --ef-search "$MILVUS_EF" \
          "${common[@]}"
        ;;
      milvus-diskann)
        start_milvus "$VDBB_ROOT/milvus/$RUN_ID-$label" "$LOGS/server-$label" || { stop_server; continue; }
        log "milvus on 127.0.0.1:$PORT"
        RUN_TIMEOUT="$DISKANN_TIMEOUT" VDBB_MILVUS235_COMPAT=1 bench "$label" milvusdiskann \
          --uri "http://127.0.0.1:$PORT" --search-list "$MILVUS_SEARCH_LIST" "${common[@]}"
        grep -h -o 'failed to build index.\{0,160\}' "$VDBB_ROOT/milvus/$RUN_ID-$label"/logs/*.log \
          2>/dev/null | sort | uniq -c | head -3 | tee -a "$LOGS/run.log"
        ;;
      *) log "unknown engine $engine"; continue ;;
    esac
    stop_server
  done
done

timeout 120 "$PY" "$HERE/vdbb_report.py" "$OUT" | tee "$OUT/report.md"
log "results: $OUT (report.md, VectorDBBench's result JSON under $OUT/<DB>/, logs under $LOGS)"
