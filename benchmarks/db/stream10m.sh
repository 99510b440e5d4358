#!/usr/bin/env bash
# The streaming case at 10M (issue 47): the synthetic 10M x 768 float16 set loaded to green
# through the Python API in a 4 GiB memory cgroup, then searched at k=100 while points arrive
# at the given rates (`stream_large.py`), in the same cgroup.
#
#   bash benchmarks/db/stream10m.sh load  WORK DATASET
#   bash benchmarks/db/stream10m.sh stream WORK DATASET MORE TAG RATES [stream_large.py args]
#
# WORK: a directory outside the repository (the database goes to WORK/db, each output to
# WORK/TAG.*); DATASET: `diskvec dataset synth --n 10000000 --dim 768 --dtype float16`;
# MORE: the rows written during the stream (`dataset synth` with another seed). RATES as
# `stream_large.py --rates` ("500,5000"; "," searches only). The diskvec venv of `setup.sh`
# runs both; CGROUP (default /sys/fs/cgroup/memory/imp4g, cgroup v1) is made with a 4 GiB
# limit if missing. Sessions 43-45 ran it as
#   stream10m.sh stream /work/data/s10m /work/data/synth10m-f16 /work/data/more10m s45 \
#       "500,5000" --warmup-s 60 --idle-after-s 120
set -eu
HERE="$(cd "$(dirname "$0")" && pwd)"
PY="$HERE/.venvs/diskvec/bin/python"
CG="${CGROUP:-/sys/fs/cgroup/memory/imp4g}"
STEP="$1"
WORK="$2"
DATA="$3"
mkdir -p "$WORK"
cd "$WORK"
if [ ! -d "$CG" ]; then
    mkdir -p "$CG"
    echo $((4 << 30)) > "$CG/memory.limit_in_bytes"
fi
echo 0 > "$CG/memory.max_usage_in_bytes"
echo $$ > "$CG/cgroup.procs"
case "$STEP" in
load)
    rm -rf db
    sync
    echo 3 > /proc/sys/vm/drop_caches
    /usr/bin/time -v "$PY" "$HERE/import_large.py" --api python --dataset "$DATA" --db db \
        --out import.json > import.out 2> import.err
    cat "$CG/memory.max_usage_in_bytes" > import.cgmax
    ;;
stream)
    MORE="$4"
    TAG="$5"
    RATES="$6"
    shift 6
    "$PY" "$HERE/stream_large.py" --db db --dataset "$DATA" --rates "$RATES" --idle-s 120 \
        --duration-s 600 --green-timeout 1200 --monitor-s 15 --new-from "$MORE" \
        --out "stream-$TAG.json" "$@" > "stream-$TAG.out" 2> "stream-$TAG.err"
    cat "$CG/memory.max_usage_in_bytes" > "$TAG.cgmax"
    ;;
*)
    echo "usage: $0 load WORK DATASET | stream WORK DATASET MORE TAG RATES [args]" >&2
    exit 2
    ;;
esac
