#!/usr/bin/env bash
# Runs every test: the Rust workspace, then the Python package against a fresh wheel.
# Installs what it needs (a virtualenv with maturin, numpy, pyarrow, pytest, qdrant-client) under .venv-test.
set -euo pipefail
cd "$(dirname "$0")/.."

# The cluster tests start etcd and NATS JetStream: installed here from Debian's packages when
# missing (as root, where apt-get is), else those tests skip with a message.
# The cluster's TLS tests make their certificates with the openssl command.
if ! command -v etcd >/dev/null || ! command -v openssl >/dev/null \
  || ! { command -v nats-server || [ -x /usr/sbin/nats-server ]; } >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "test.sh: $(date +%T) installing etcd-server, nats-server and openssl"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server nats-server openssl >/dev/null
  else
    echo "test.sh: etcd, nats-server or openssl missing and not root with apt-get: the cluster tests will skip"
  fi
fi
# Debian's nats-server (2.9.10) can keep, on a stream leader cut off by a partition, a message
# no quorum stored (docs/architecture.md, "Partitions"): the partition tests want a newer one,
# built from the Go module proxy where Go is installed (~35 s the first time, then cached).
go=$(command -v go || echo /usr/local/go/bin/go)
if [ -x "$go" ]; then
  if [ ! -x target/nats/nats-server ]; then
    echo "test.sh: $(date +%T) building nats-server 2.15.2"
    GOBIN="$PWD/target/nats" GOFLAGS=-mod=mod "$go" install github.com/nats-io/nats-server/v2@v2.15.2 \
      || echo "test.sh: nats-server 2.15.2 did not build: the partition tests use the installed one or skip"
  fi
  export PATH="$PWD/target/nats:$PATH"
else
  echo "test.sh: no Go toolchain: the partition tests run on Debian's nats-server, or skip if it is older than 2.10"
fi

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
