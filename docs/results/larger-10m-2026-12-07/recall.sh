#!/bin/bash
# usage: recall.sh INDEX DATASET  -> recall@10 and @100 at L=50,100,200 (mean reads)
B=${BIN:-/work/main/target/release/diskvec}
for k in 10 100; do
L="50,100,200"; [ $k = 100 ] && L="100,200"
$B search --index $1 --dataset $2 --k $k --search-list $L --json 2>/dev/null | python3 -c "
import sys,json
out=[]
for l in sys.stdin:
  try: o=json.loads(l)
  except: continue
  rs=o if isinstance(o,list) else o.get('results',[o])
  for r in rs:
    if isinstance(r,dict) and 'recall' in r: out.append('L%d %.4f/%.1f reads %.0f qps' % (r['search_list'], r['recall'], r['mean_ios'], r.get('qps',0)))
print('k=$k', ' | '.join(out))"
done
