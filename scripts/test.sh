#!/usr/bin/env bash
# Runs every test: the Rust workspace, then the Python package against a fresh wheel.
# Installs what it needs (a virtualenv with maturin, numpy, pyarrow, pytest, qdrant-client) under .venv-test.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo test --release --workspace --exclude diskvec-python

echo "test.sh: $(date +%T) python package"
venv=.venv-test
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
"$venv/bin/pip" install -q --disable-pip-version-check "maturin>=1.7,<2" "numpy>=1.21" "pyarrow>=14" "pytest>=7" "qdrant-client>=1.15"
rm -rf target/wheels
"$venv/bin/maturin" build --release -q -m crates/python/Cargo.toml -o target/wheels
"$venv/bin/pip" install -q --disable-pip-version-check --force-reinstall --no-deps target/wheels/diskvec-*.whl
"$venv/bin/python" -m pytest -q crates/python/tests
echo "test.sh: $(date +%T) server through qdrant-client"
# The server through qdrant-client, against the release binary `cargo test` built for the
# CLI's tests (a separate `cargo build -p diskvec-cli` resolves features without the test
# dependencies' and compiled parts of the workspace again).
DISKVEC_BIN="$PWD/target/release/diskvec" "$venv/bin/python" -m pytest -q crates/server/python_tests
