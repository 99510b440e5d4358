"""What `on_disk_payload` costs and saves, diskvec and qdrant-edge-py each embedded in
Python, on the shipped 50k sentences with their real payloads (text, pos, lexname, synset,
chars): the same collection with payloads in DRAM or left on disk (`on_disk_payload`).
diskvec seals it into one segment (payloads parsed in DRAM, or left in points.dvp);
qdrant-edge-py optimizes its shard.

    python payload.py MODE DATA_DIR WORK_DIR OUT.json [SEARCH_MEMORY]
        # MODE: dram | ssd (diskvec), edge-dram | edge-ssd (qdrant-edge-py)
    python payload.py compare A.json B.json

Each mode runs in its own process: it loads and optimizes, closes the database, and opens
it again; memory is the resident set after that open less what it was before it (the data in
Python is loaded first), and the sealed segment's own count of its DRAM. SEARCH_MEMORY (the
database's, default 0: graph walks read the SSD, and navigation and node caches do not hide
the payloads' DRAM; `auto`: every node in DRAM here, so searches are CPU-bound, as
qdrant-edge-py's in-memory HNSW is). Queries: the 1,000 test vectors, top
10 with payloads, single-threaded (`search`), each kind timed over all of them:
- `plain`: no filter;
- `indexed`: `lexname` = the query's own lexname (a keyword index answers it);
- `unindexed`: `chars` in a range holding about 30% of the points (no index: every
  candidate's payload is read);
- `count`: count of the unindexed filter (every payload is read).
Recall@10 of each kind is against the exact top 10 among the points the filter passes.
Search lists are the default (100).
"""
import json
import shutil
import sys
import time

import numpy as np
import pyarrow.parquet as pq


def rss_kib():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1])


if sys.argv[1] == "compare":
    a, b = (json.load(open(p)) for p in sys.argv[2:4])
    same = {k: sum(x == y for x, y in zip(a["answers"][k], b["answers"][k])) / len(a["answers"][k])
            for k in a["answers"]}
    print(json.dumps({"identical_answers": same, a["mode"]: a["stats"], b["mode"]: b["stats"]}, indent=1))
    sys.exit()

mode, data, work, out = sys.argv[1:5]
search_memory = sys.argv[5] if len(sys.argv) > 5 else "0"
train = pq.read_table(f"{data}/train.parquet")
vectors = np.array(train.column("emb").to_pylist(), dtype=np.float32)
ids = train.column("id").to_pylist()
payloads = pq.read_table(f"{data}/train_payloads.parquet").to_pylist()
for p in payloads:
    del p["id"]
test = np.array(pq.read_table(f"{data}/test.parquet").column("emb").to_pylist(), dtype=np.float32)
test_payloads = pq.read_table(f"{data}/test_payloads.parquet").to_pylist()
chars = sorted(p["chars"] for p in payloads)
low, high = chars[len(chars) // 3], chars[2 * len(chars) // 3] - 1

on_ssd = mode.endswith("ssd")
shutil.rmtree(work, ignore_errors=True)
if mode.startswith("edge"):
    import qdrant_edge as q

    def to_filter(f):
        if f is None:
            return None
        (c,) = f["must"]
        if "match" in c:
            return q.Filter(must=[q.FieldCondition(key=c["key"], match=q.MatchValue(c["match"]["value"]))])
        r = c["range"]
        return q.Filter(must=[q.FieldCondition(key=c["key"], range=q.RangeFloat(gte=r["gte"], lte=r["lte"]))])

    config = q.EdgeConfig(vectors=q.EdgeVectorParams(size=vectors.shape[1], distance=q.Distance.Cosine),
                          on_disk_payload=on_ssd)
    started = time.time()
    shard = q.EdgeShard.create(work, config)
    shard.update(q.UpdateOperation.create_field_index("lexname", q.PayloadSchemaType.Keyword))
    for at in range(0, len(ids), 5000):
        shard.update(q.UpdateOperation.upsert_points(
            [q.Point(ids[i], vectors[i].tolist(), payloads[i]) for i in range(at, min(at + 5000, len(ids)))]))
    shard.optimize()
    load_s = time.time() - started
    shard.close()
    base = rss_kib()
    shard = q.EdgeShard.load(work)
    stats = {"load_s": round(load_s, 1), "open_rss_mib": round((rss_kib() - base) / 1024, 1)}

    def search(query, flt):
        hits = shard.query(q.QueryRequest(limit=10, query=q.Query.Nearest(query.tolist()),
                                          filter=to_filter(flt), with_payload=True))
        return [(h.id, h.payload["synset"]) for h in hits]

    def count(flt):
        return shard.count(q.CountRequest(exact=True, filter=to_filter(flt)))
else:
    import diskvec  # noqa: E402  (after the data, so that the base RSS holds it)

    base = rss_kib()
    db = diskvec.open(work)
    col = db.create_collection("c", dim=vectors.shape[1], metric="cosine", seal_threshold=100_000,
                               on_disk_payload=on_ssd)
    col.create_payload_index("lexname", "keyword")
    started = time.time()
    for at in range(0, len(ids), 5000):
        col.upsert(ids[at:at + 5000], vectors[at:at + 5000], payloads[at:at + 5000])
    col.optimize(wait=True)
    load_s = time.time() - started
    db.close()
    base = rss_kib()
    db = diskvec.open(work, search_memory=None if search_memory == "auto" else search_memory)
    col = db.collection("c")
    info = col.info()
    sealed = [s for s in info["segments"] if s["kind"] == "sealed"]
    assert len(sealed) == 1 and sealed[0]["payloads_on_ssd"] == on_ssd, info["segments"]
    stats = {"load_s": round(load_s, 1), "open_rss_mib": round((rss_kib() - base) / 1024, 1),
             "segment_dram_mib": round(sealed[0]["dram_bytes"] / 2**20, 1)}

    def search(query, flt):
        return [(h["id"], h["payload"]["synset"]) for h in col.search(query, k=10, filter=flt)]

    def count(flt):
        return col.count(flt)
unindexed = {"must": [{"key": "chars", "range": {"gte": low, "lte": high}}]}
answers = {}
# One untimed pass of every kind first: node caches fill in the background after an open.
for timed in (False, True):
    for kind in ("plain", "indexed", "unindexed"):
        got = []
        started = time.time()
        for query, p in zip(test, test_payloads):
            flt = {"plain": None, "indexed": {"must": [{"key": "lexname", "match": {"value": p["lexname"]}}]},
                   "unindexed": unindexed}[kind]
            got.append(search(query, flt))
        stats[f"{kind}_qps"] = round(len(test) / (time.time() - started), 1)
        answers[kind] = got
# Recall@10 of each kind against the exact top 10 among the points the filter passes.
scores = test @ vectors.T
lexnames = np.array([p["lexname"] for p in payloads])
in_range = np.array([low <= p["chars"] <= high for p in payloads])
for kind in ("plain", "indexed", "unindexed"):
    found = 0
    for row, (got, p) in enumerate(zip(answers[kind], test_payloads)):
        passes = {"plain": np.ones(len(ids), bool), "indexed": lexnames == p["lexname"],
                  "unindexed": in_range}[kind]
        allowed = np.where(passes, scores[row], -np.inf)
        truth = set(np.argsort(-allowed, kind="stable")[:min(10, int(passes.sum()))].tolist())
        found += len(truth & {i for i, _ in got}) / max(1, len(truth))
    stats[f"{kind}_recall"] = round(found / len(test), 4)
started = time.time()
counts = [count(unindexed) for _ in range(20)]
stats["count_per_s"] = round(20 / (time.time() - started), 2)
answers["count"] = counts[:1]
stats["search_memory"] = search_memory
json.dump({"mode": mode, "stats": stats, "answers": answers}, open(out, "w"))
print(mode, json.dumps(stats))
