#!/usr/bin/env bash
# Creates one virtualenv per system under benchmarks/db/.venvs/ (not committed) and records
# the exact versions in .venvs/versions.txt.
#   bash benchmarks/db/setup.sh            # all three
#   bash benchmarks/db/setup.sh diskvec    # only diskvec (rebuilds the wheel from the repo)
# diskvec's wheel: maturin, from DISKVEC_REPO (default /work/main) at DISKVEC_COMMIT (default HEAD).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="${DISKVEC_REPO:-/work/main}"
V="$HERE/.venvs"
PY="${PYTHON:-python3}"
mkdir -p "$V"
COMMON="numpy pyarrow psutil"
sel=("$@")
has() { [ ${#sel[@]} -eq 0 ] || [[ " ${sel[*]} " == *" $1 "* ]]; }

if has qdrant; then
  [ -x "$V/qdrant/bin/python" ] || "$PY" -m venv "$V/qdrant"
  "$V/qdrant/bin/pip" install -q --upgrade pip
  "$V/qdrant/bin/pip" install -q $COMMON "qdrant-edge-py==${QDRANT_EDGE_VERSION:-0.9.0}"
fi
if has lancedb; then
  [ -x "$V/lancedb/bin/python" ] || "$PY" -m venv "$V/lancedb"
  "$V/lancedb/bin/pip" install -q --upgrade pip
  "$V/lancedb/bin/pip" install -q $COMMON pylance "lancedb==${LANCEDB_VERSION:-0.40.0}"
fi
if has diskvec; then
  # The wheel is built from a committed tree (git archive of DISKVEC_COMMIT, default HEAD of
  # DISKVEC_REPO), not from a work tree someone may be editing, with its own cargo target dir.
  [ -x "$V/diskvec/bin/python" ] || "$PY" -m venv "$V/diskvec"
  "$V/diskvec/bin/pip" install -q --upgrade pip
  "$V/diskvec/bin/pip" install -q $COMMON maturin
  COMMIT="$(git -C "$REPO" rev-parse "${DISKVEC_COMMIT:-HEAD}")"
  BUILD="${DB_BENCH_WORK:-/work/bench/dbbench}"
  SRC="$BUILD/dv-src"
  WHEELS="${DISKVEC_WHEELS:-/tmp/dvwheels}"
  rm -rf "$SRC" "$WHEELS" && mkdir -p "$SRC"
  git -C "$REPO" archive "$COMMIT" | tar -x -C "$SRC"
  CARGO_TARGET_DIR="$BUILD/target" nice -n 19 "$V/diskvec/bin/maturin" build --release \
    -m "$SRC/crates/python/Cargo.toml" -o "$WHEELS"
  "$V/diskvec/bin/pip" install -q --force-reinstall --no-deps "$WHEELS"/diskvec-*.whl
  echo "$COMMIT" > "$V/diskvec/COMMIT"
fi

: > "$V/versions.txt"
for s in diskvec qdrant lancedb; do
  [ -x "$V/$s/bin/python" ] || continue
  echo "== $s ($("$V/$s/bin/python" --version))" >> "$V/versions.txt"
  "$V/$s/bin/pip" freeze | grep -iE '^(diskvec|qdrant|lancedb|pylance|lance|numpy|pyarrow|psutil)' >> "$V/versions.txt" || true
  [ -f "$V/$s/COMMIT" ] && echo "diskvec commit $(cat "$V/$s/COMMIT")" >> "$V/versions.txt"
done
cat "$V/versions.txt"
