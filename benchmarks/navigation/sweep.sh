#!/usr/bin/env bash
# Today's search (graph) against navigation (exact distances, the default) and navigation
# with estimated distances for the surely-in candidates, in alternating rounds, k=100 and
# k=10, on both shipped sets. Each run writes its JSON lines (one per search list) to OUT.
# Usage: benchmarks/navigation/sweep.sh DISKVEC_BIN WORK_DIR [ROUNDS]
# WORK_DIR gets the indexes (built once, if missing) and runs/.
set -euo pipefail
bin=$1
work=$2
rounds=${3:-3}
datasets=$(cd "$(dirname "$0")/../../.." && pwd)/shared/datasets
mkdir -p "$work/runs"
for s in minilm384-50k mpnet768-25k; do
  [ -d "$work/idx-$s" ] || "$bin" build --dataset "$datasets/wordnet-$s" --index "$work/idx-$s"
done
for r in $(seq 1 "$rounds"); do
  for s in minilm384-50k mpnet768-25k; do
    d=$datasets/wordnet-$s
    for k in 100 10; do
      if [ "$k" = 100 ]; then graph=150,200,250; nav=120,150,200; else graph=20,30,50,80; nav=20,30,50,80; fi
      "$bin" search --index "$work/idx-$s" --dataset "$d" --k $k --search-list $graph --json 2>/dev/null \
        | grep '^{' > "$work/runs/$s-k$k-graph-r$r.json"
      "$bin" search --index "$work/idx-$s" --dataset "$d" --k $k --search-list $nav --navigation --json 2>/dev/null \
        | grep '^{' > "$work/runs/$s-k$k-nav-r$r.json"
      "$bin" search --index "$work/idx-$s" --dataset "$d" --k $k --search-list $nav --navigation \
        --estimated-distances --json 2>/dev/null | grep '^{' > "$work/runs/$s-k$k-navest-r$r.json"
    done
  done
done
python3 "$(dirname "$0")/summarize.py" "$work/runs"
