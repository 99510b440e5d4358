#!/bin/bash
# usage: pgrid.sh KNOBS [dataset] [metric]
B=/work/main/target/release/diskvec; D=${2:-/work/shared/datasets/wordnet-mpnet768-25k}; M=${3:-cosine}
I=/work/data/t-grid
rm -rf $I
g=$(DISKVEC_PIPNN="$1" $B build --dataset $D --index $I --metric $M --graph-builder pipnn --json 2>/dev/null | tail -1 | python3 -c "import sys,json; print(json.loads(sys.stdin.read())['graph_seconds'])")
for k in 10 100; do
$B search --index $I --dataset $D --k $k --search-list 50,100,200 --json 2>/dev/null | python3 -c "
import sys,json
out=[]
for l in sys.stdin:
  try: o=json.loads(l)
  except: continue
  rs=o if isinstance(o,list) else o.get('results',[o])
  for r in rs:
    if isinstance(r,dict) and 'recall' in r: out.append('L%d %.4f/%.0f' % (r['search_list'], r['recall'], r['mean_ios']))
print('$1 graph ${g}s k=$k', ' '.join(out))
"
done
