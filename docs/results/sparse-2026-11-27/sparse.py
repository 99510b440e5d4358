"""Sparse search alone, diskvec against qdrant-edge-py (both embedded in Python), on the
shipped sentences: BM25 term weights per document (k1 = 1.2, b = 0.75, each document's
weights scaled by a fixed factor in [1, 1.01) from its id so that scores do not tie), IDF at
query time (`modifier: idf`), top 10 of each test sentence's words.

    python sparse.py ENGINE DATA_DIR WORK_DIR OUT.json     # ENGINE: diskvec | diskvec-ssd | edge
    python sparse.py compare A.json B.json

Each engine runs in its own process. Memory is the process's resident set after loading
and optimizing, less what it was before the engine was opened (the data in Python is built
first); peak is the high-water mark less the same base. `diskvec-ssd` keeps the sealed
segment's posting lists on SSD (`on_disk`: the term dictionary in DRAM, lists read per query).
"""
import json
import re
import shutil
import sys
import time
from collections import Counter

def rss_kib(field):
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1])

if sys.argv[1] == "compare":
    a, b = (json.load(open(p)) for p in sys.argv[2:4])
    same_ids = sum(x == y for x, y in zip(a["ids"], b["ids"])) / len(a["ids"])
    same_scores = sum(all(abs(s - t) <= 1e-4 * max(1.0, abs(s)) for s, t in zip(x, y)) and len(x) == len(y)
                      for x, y in zip(a["scores"], b["scores"])) / len(a["scores"])
    print(json.dumps({"identical_top10_ids": same_ids, "identical_top10_scores": same_scores,
                      a["engine"]: a["stats"], b["engine"]: b["stats"]}))
    sys.exit()

engine, data, work, out = sys.argv[1:5]
vocab = {}
def terms(text):
    return [vocab.setdefault(w, len(vocab)) for w in re.findall(r"[a-z0-9]+", text.lower())]
train_text = open(f"{data}/train.txt").read().splitlines()
test_text = open(f"{data}/test.txt").read().splitlines()
docs = [Counter(terms(t)) for t in train_text]
avgdl = sum(sum(d.values()) for d in docs) / len(docs)
def bm25_doc(i, c):
    dl = sum(c.values())
    idx = sorted(c)
    scale = 1.0 + 0.01 * ((i * 2654435761) % 2**32) / 2**32
    return idx, [scale * c[t] * 2.2 / (c[t] + 1.2 * (0.25 + 0.75 * dl / avgdl)) for t in idx]
sparse = [bm25_doc(i, c) for i, c in enumerate(docs)]
queries = [sorted(set(terms(t))) for t in test_text]
LIMIT = 10

shutil.rmtree(work, ignore_errors=True)
base = rss_kib("VmRSS:")
t0 = time.perf_counter()
if engine.startswith("diskvec"):
    import diskvec
    db = diskvec.open(work)
    col = db.create_collection("s", sparse_vectors={"w": {"modifier": "idf", "on_disk": engine == "diskvec-ssd"}})
    for at in range(0, len(sparse), 5000):
        part = range(at, min(at + 5000, len(sparse)))
        col.upsert(list(part), {"w": [{"indices": sparse[i][0], "values": sparse[i][1]} for i in part]})
    col.optimize()
    def search(idx):
        hits = col.search({"indices": idx, "values": [1.0] * len(idx)}, k=LIMIT, using="w", with_payload=False)
        return [h["id"] for h in hits], [h["score"] for h in hits]
else:
    import qdrant_edge as q
    shard = q.EdgeShard.create(work, q.EdgeConfig(
        vectors={}, sparse_vectors={"w": q.EdgeSparseVectorParams(modifier=q.Modifier.Idf)}))
    for at in range(0, len(sparse), 5000):
        shard.update(q.UpdateOperation.upsert_points(
            [q.Point(i, {"w": q.SparseVector(*sparse[i])}, None) for i in range(at, min(at + 5000, len(sparse)))]))
    shard.optimize()
    def search(idx):
        hits = shard.query(q.QueryRequest(limit=LIMIT, query=q.Query.Nearest(
            q.SparseVector(idx, [1.0] * len(idx)), using="w")))
        return [h.id for h in hits], [h.score for h in hits]
load_s = time.perf_counter() - t0
rss = rss_kib("VmRSS:") - base
search(queries[0])
best = 0.0
for _ in range(3):
    t = time.perf_counter()
    results = [search(qi) for qi in queries]
    best = max(best, len(queries) / (time.perf_counter() - t))
peak = rss_kib("VmHWM:") - base
json.dump({"engine": engine, "ids": [r[0] for r in results], "scores": [r[1] for r in results],
           "stats": {"points": len(sparse), "queries": len(queries), "load_s": round(load_s, 2),
                     "qps": round(best, 1), "rss_mib": round(rss / 1024, 1),
                     "peak_mib": round(peak / 1024, 1)}}, open(out, "w"))
