import json, glob, statistics, collections
out = "/tmp/w/bench/out"
def rows(path):
    return [json.loads(l) for l in open(path) if l.strip().startswith("{")]
res = collections.defaultdict(list)
for f in sorted(glob.glob(f"{out}/*.json")):
    name = f.split("/")[-1][:-5]
    kind, ver, rest = name.split("-", 2)
    ds, rnd = rest.rsplit("-", 1)
    for r in rows(f):
        if kind == "build":
            res[(ds, "diskann build s", "", ver)].append(r["build_seconds"])
            res[(ds, "  graph s", "", ver)].append(r["graph_seconds"])
        elif kind == "hnsw":
            res[(ds, "hnsw build s", "", ver)].append(r["build_seconds"])
            res[(ds, "hnsw QPS", f"ef={r['ef']}", ver)].append(r["qps"])
            res[(ds, "hnsw recall", f"ef={r['ef']}", ver)].append(r["recall"])
        else:
            L = r.get("search_list")
            res[(ds, f"{kind} QPS", f"L={L}", ver)].append(r["qps"])
            res[(ds, f"{kind} recall", f"L={L}", ver)].append(r["recall"])
keys = sorted({k[:3] for k in res})
print("| set | measure | param | before | after | after/before |")
print("|---|---|---|---|---|---|")
for k in keys:
    b, a = res.get(k + ("before",), []), res.get(k + ("after",), [])
    if not b or not a: continue
    mb, ma = statistics.median(b), statistics.median(a)
    fmt = (lambda x: f"{x:.4f}") if "recall" in k[1] else (lambda x: f"{x:,.1f}" if x < 100 else f"{x:,.0f}")
    print(f"| {k[0]} | {k[1]} | {k[2]} | {fmt(mb)} ({', '.join(fmt(x) for x in b)}) | {fmt(ma)} ({', '.join(fmt(x) for x in a)}) | {ma/mb:.3f} |")
