import sys
import pyarrow.parquet as pq, requests, qdrant_edge as q, numpy as np
url=sys.argv[1]; data=sys.argv[2]
test = pq.read_table(f"{data}/test.parquet").to_pydict(); train = pq.read_table(f"{data}/train.parquet").to_pydict()
X=np.array(train["emb"],dtype=np.float32); X/=np.linalg.norm(X,axis=1,keepdims=True); ids=np.array(train["id"])
shard=q.EdgeShard.load(sys.argv[3]); s=requests.Session()
dv=ed=0
for i in range(100):
    qd=np.array(test["emb"][i],dtype=np.float32); qn=qd/np.linalg.norm(qd)
    truth=set(ids[np.argsort(-(X@qn))[:50]].tolist())
    a=s.post(f"{url}/collections/h/points/query",json={"query":qd.tolist(),"using":"d","limit":50,"params":{"exact":True}}).json()["result"]["points"]
    b=shard.query(q.QueryRequest(limit=50,query=q.Query.Nearest(qd.tolist(),using="d"),params=q.SearchParams(exact=True)))
    dv+=len(truth & {p["id"] for p in a}); ed+=len(truth & {p.id for p in b})
print("recall@50 vs numpy: diskvec", dv/5000, "edge", ed/5000)
