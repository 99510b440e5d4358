#!/usr/bin/env bash
# Stands in for the diskvec binary in ../shared/conformance/qdrant-openapi/run.sh, so that
# Qdrant's suite runs against a cluster: `serve --db D --host H --port P` is answered by node 0
# of three `diskvec serve --cluster` nodes over 3 etcd members and 3 NATS servers
# (cluster_as_bin.py). Usage: bash run.sh docs/results/cluster-2026-11-27/cluster_as_bin.sh WORK
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
exec "$root/.venv-test/bin/python" "$here/cluster_as_bin.py" "$@"
