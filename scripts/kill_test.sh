#!/usr/bin/env bash
# kill -9 loop over the database layer: a child ingests, rewrites, deletes and seals while the
# parent kills it at random moments (and at failpoints around a seal's manifest switch), then
# reopens and checks every acknowledged write. Usage: scripts/kill_test.sh [ROUNDS] [SEED]
set -euo pipefail
cd "$(dirname "$0")/.."
export DISKVEC_KILL_ROUNDS="${1:-100}"
export DISKVEC_KILL_SEED="${2:-$RANDOM}"
echo "rounds $DISKVEC_KILL_ROUNDS, seed $DISKVEC_KILL_SEED"
cargo test --release -q -p diskvec-db --test kill -- --nocapture 2>&1 | grep -E "kill test|panicked|round|FAILED|test result"
