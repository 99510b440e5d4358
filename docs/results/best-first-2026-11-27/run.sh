#!/bin/bash
# Before/after of the one best-first search: same machine, same run, alternating binaries.
set -u
B=/tmp/w/before/target/release/diskvec
A=/work/main/target/release/diskvec
OUT=/tmp/w/bench/out
mkdir -p $OUT
DS=/work/shared/datasets
for d in wordnet-minilm384-50k wordnet-mpnet768-25k; do
  for round in 1 2; do
    for v in before after; do
      bin=$B; [ $v = after ] && bin=$A
      rm -rf /tmp/w/bench/idx-$v-$d
      $bin build --dataset $DS/$d --index /tmp/w/bench/idx-$v-$d --metric cosine --json 2>/dev/null | tail -1 > $OUT/build-$v-$d-$round.json
      $bin hnsw --dataset $DS/$d --m 16 --ef-construction 200 --ef 20,50,100 --k 10 --json 2>/dev/null | grep '^{' > $OUT/hnsw-$v-$d-$round.json
    done
  done
  # Searches of one index (the "before" build) by both binaries, alternating.
  for round in 1 2 3; do
    for v in before after; do
      bin=$B; [ $v = after ] && bin=$A
      $bin search --index /tmp/w/bench/idx-before-$d --dataset $DS/$d --k 10 --search-list 20,50,100 --cache-nodes 0 --json 2>/dev/null | grep '^{' > $OUT/search-$v-$d-$round.json
      $bin search --index /tmp/w/bench/idx-before-$d --dataset $DS/$d --k 10 --search-list 20,50,100 --cache-nodes 0 --navigation --json 2>/dev/null | grep '^{' > $OUT/nav-$v-$d-$round.json
    done
  done
done
echo done > $OUT/DONE
