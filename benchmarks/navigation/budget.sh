#!/usr/bin/env bash
# The DRAM-budget curve (issue 11): QPS at recall@100 >= 0.99 inside memory cgroups of 5, 10,
# 20 and 40% of the raw vector bytes, diskvec (graph search and navigation) and diskannpy 0.7.0
# on both shipped sets. The default PQ size (a sixteenth of the raw vectors) does not fit 5%,
# so the 5% point uses a second build of each set with half the PQ bytes, for both systems.
# Usage: benchmarks/navigation/budget.sh DISKVEC_BIN WORK_DIR PYTHON DAP_PYTHON [ROUNDS]
#   PYTHON: numpy (the cgroup helper); DAP_PYTHON: numpy==1.25.0, diskannpy==0.7.0, pyarrow.
# WORK_DIR gets the indexes (built once, if missing) and budget-*.json.
set -euo pipefail
bin=$1
work=$2
py=$3
dap_py=$4
rounds=${5:-2}
here=$(cd "$(dirname "$0")" && pwd)
datasets=$(cd "$here/../../.." && pwd)/shared/datasets
mkdir -p "$work"
# set, PQ bytes (the default: dim / 4), PQ bytes for the 5% point
for spec in minilm384-50k:96:48 mpnet768-25k:192:96; do
  IFS=: read -r s pq small <<< "$spec"
  d=$datasets/wordnet-$s
  for p in "$pq" "$small"; do
    [ -d "$work/idx-$s-pq$p" ] || "$bin" build --dataset "$d" --index "$work/idx-$s-pq$p" --pq-bytes "$p"
    [ -d "$work/dap-$s-pq$p/dap-index" ] || "$dap_py" "$here/../disk_vs_diskannpy.py" --mode dap-build \
      --dataset "$d" --work "$work/dap-$s-pq$p" --pq-bytes "$p" --threads 2
  done
  "$py" "$here/budget.py" --bin "$bin" --dataset "$d" --index "$work/idx-$s-pq$pq" \
    --dap-python "$dap_py" --dap-work "$work/dap-$s-pq$pq" --budgets 0.1,0.2,0.4 \
    --rounds "$rounds" --out "$work/budget-$s.json"
  "$py" "$here/budget.py" --bin "$bin" --dataset "$d" --index "$work/idx-$s-pq$small" \
    --dap-python "$dap_py" --dap-work "$work/dap-$s-pq$small" --budgets 0.05 \
    --rounds "$rounds" --out "$work/budget-$s-pq$small.json"
done
