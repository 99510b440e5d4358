"""Search QPS of the database on the bundled 5k set: one sealed segment, k=10, L=100,
single queries on one thread, then search_batch; prints JSON."""
import json, tempfile, time
import numpy as np, pyarrow.parquet as pq
import diskvec

data = "/work/main/data/wordnet-minilm384-5k"
train = pq.read_table(f"{data}/train.parquet")
ids = train.column("id").to_numpy()
emb = np.stack(train.column("emb").to_numpy(zero_copy_only=False)).astype(np.float32)
test = np.stack(pq.read_table(f"{data}/test.parquet").column("emb").to_numpy(zero_copy_only=False)).astype(np.float32)
queries = np.concatenate([test] * (2000 // len(test) + 1))[:2000]
out = {}
with diskvec.open(tempfile.mkdtemp()) as db:
    col = db.create_collection("c", dim=emb.shape[1], metric="cosine")
    t = time.perf_counter(); col.upsert(ids.tolist(), emb); col.optimize(); out["load_s"] = time.perf_counter() - t
    for q in queries[:200]:
        col.search(q, k=10, search_list=100)
    for rnd in range(3):
        t = time.perf_counter()
        for q in queries:
            col.search(q, k=10, search_list=100, with_payload=False)
        out.setdefault("single_qps", []).append(len(queries) / (time.perf_counter() - t))
        t = time.perf_counter()
        col.search_batch(queries, k=10, search_list=100, with_payload=False)
        out.setdefault("batch_qps", []).append(len(queries) / (time.perf_counter() - t))
print(json.dumps({k: (v if isinstance(v, float) else [round(x) for x in v]) for k, v in out.items()}))
