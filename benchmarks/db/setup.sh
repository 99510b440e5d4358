#!/usr/bin/env bash
# Creates one virtualenv per system under benchmarks/db/.venvs/ (not committed) and records
# the exact versions in .venvs/versions.txt.
#   bash benchmarks/db/setup.sh            # all three
#   bash benchmarks/db/setup.sh diskvec    # only diskvec (rebuilds the wheel from the repo)
# diskvec's wheel is built from this checkout's crates/python (or $DISKVEC_REPO's) with maturin.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="${DISKVEC_REPO:-$(cd "$HERE/../.." && pwd)}"
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
  [ -x "$V/diskvec/bin/python" ] || "$PY" -m venv "$V/diskvec"
  "$V/diskvec/bin/pip" install -q --upgrade pip
  "$V/diskvec/bin/pip" install -q $COMMON maturin
  WHEELS="${DISKVEC_WHEELS:-/tmp/dvwheels}"
  rm -rf "$WHEELS"
  "$V/diskvec/bin/maturin" build --release -m "$REPO/crates/python/Cargo.toml" -o "$WHEELS"
  "$V/diskvec/bin/pip" install -q --force-reinstall --no-deps "$WHEELS"/diskvec-*.whl
  git -C "$REPO" rev-parse HEAD > "$V/diskvec/COMMIT"
fi

: > "$V/versions.txt"
for s in diskvec qdrant lancedb; do
  [ -x "$V/$s/bin/python" ] || continue
  echo "== $s ($("$V/$s/bin/python" --version))" >> "$V/versions.txt"
  "$V/$s/bin/pip" freeze | grep -iE '^(diskvec|qdrant|lancedb|pylance|lance|numpy|pyarrow|psutil)' >> "$V/versions.txt" || true
  [ -f "$V/$s/COMMIT" ] && echo "diskvec commit $(cat "$V/$s/COMMIT")" >> "$V/versions.txt"
done
cat "$V/versions.txt"
