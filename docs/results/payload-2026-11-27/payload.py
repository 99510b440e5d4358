"""What `on_disk_payload` costs and saves, diskvec embedded in Python, on the shipped 50k
sentences with their real payloads (text, pos, lexname, synset, chars): the same collection
sealed into one segment with payloads parsed in DRAM (`dram`) or left in points.dvp (`ssd`).

    python payload.py MODE DATA_DIR WORK_DIR OUT.json     # MODE: dram | ssd
    python payload.py compare A.json B.json

Each mode runs in its own process. Memory is the process's resident set after loading and
optimizing less what it was before the database was opened (the data in Python is loaded
first), and the sealed segment's own count of its DRAM. Queries: the 1,000 test vectors, top
10 with payloads, single-threaded (`search`), each kind timed over all of them:
- `plain`: no filter;
- `indexed`: `lexname` = the query's own lexname (a keyword index answers it);
- `unindexed`: `chars` in a range holding about 30% of the points (no index: every
  candidate's payload is read);
- `count`: count of the unindexed filter (every payload is read).
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

import diskvec  # noqa: E402  (after the data, so that the base RSS holds it)

shutil.rmtree(work, ignore_errors=True)
base = rss_kib()
db = diskvec.open(work)
col = db.create_collection("c", dim=vectors.shape[1], metric="cosine", seal_threshold=100_000,
                           on_disk_payload=(mode == "ssd"))
col.create_payload_index("lexname", "keyword")
started = time.time()
for at in range(0, len(ids), 5000):
    col.upsert(ids[at:at + 5000], vectors[at:at + 5000], payloads[at:at + 5000])
col.optimize(wait=True)
load_s = time.time() - started
info = col.info()
sealed = [s for s in info["segments"] if s["kind"] == "sealed"]
assert len(sealed) == 1 and sealed[0]["payloads_on_ssd"] == (mode == "ssd"), info["segments"]
stats = {"load_s": round(load_s, 1), "rss_mib": round((rss_kib() - base) / 1024, 1),
         "segment_dram_mib": round(sealed[0]["dram_bytes"] / 2**20, 1)}
unindexed = {"must": [{"key": "chars", "range": {"gte": low, "lte": high}}]}
answers = {}
for kind in ("plain", "indexed", "unindexed"):
    got = []
    started = time.time()
    for q, p in zip(test, test_payloads):
        flt = {"plain": None, "indexed": {"must": [{"key": "lexname", "match": {"value": p["lexname"]}}]},
               "unindexed": unindexed}[kind]
        hits = col.search(q, k=10, filter=flt)
        got.append([(h["id"], h["payload"]["synset"]) for h in hits])
    stats[f"{kind}_qps"] = round(len(test) / (time.time() - started), 1)
    answers[kind] = got
started = time.time()
counts = [col.count(unindexed) for _ in range(20)]
stats["count_per_s"] = round(20 / (time.time() - started), 2)
answers["count"] = counts[:1]
json.dump({"mode": mode, "stats": stats, "answers": answers}, open(out, "w"))
print(mode, json.dumps(stats))
