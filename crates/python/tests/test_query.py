"""The universal query from Python: the same bodies as the server's `points/query`, checked
against numpy (dense, exact), a hand-computed sparse dot product and reciprocal rank fusion
written out here, through a seal."""
import numpy as np
import pytest

import diskvec

N, DIM = 1200, 8


@pytest.fixture
def col(tmp_path):
    rng = np.random.default_rng(7)
    dense = rng.normal(size=(N, DIM)).astype(np.float32)
    words = [{"indices": [i % 11, 20 + i % 3], "values": [1.0 + (i % 5), 0.5]} for i in range(N)]
    with diskvec.open(tmp_path / "db") as db:
        c = db.create_collection("h", vectors={"d": {"dim": DIM, "metric": "cosine"}},
                                 sparse_vectors={"w": {}}, seal_threshold=1000)
        c.upsert(range(N), {"d": dense, "w": words},
                 payloads=[{"even": i % 2 == 0} for i in range(N)])
        c.optimize()
        yield c, dense, words


def cosine_order(dense, q):
    unit = dense / np.linalg.norm(dense, axis=1, keepdims=True)
    return np.argsort(-(unit @ (q / np.linalg.norm(q))), kind="stable")


def test_exact_nearest_matches_numpy(col):
    c, dense, _ = col
    q = dense[3] + 0.1
    hits = c.query({"query": q, "using": "d", "limit": 20, "params": {"exact": True}})
    assert [h["id"] for h in hits] == cosine_order(dense, q)[:20].tolist()
    # search() takes the same switch.
    assert [h["id"] for h in c.search(q, k=20, using="d", exact=True)] == [h["id"] for h in hits]


def test_hybrid_rrf_fuses_dense_and_sparse_prefetches(col):
    c, dense, words = col
    q = dense[10] * 0.5 + dense[11]
    sq = {"indices": [4, 21], "values": [1.0, 2.0]}
    body = {"prefetch": [{"query": q, "using": "d", "limit": 30, "params": {"exact": True}},
                         {"query": sq, "using": "w", "limit": 30}],
            "query": {"fusion": "rrf"}, "limit": 10,
            "filter": {"must": [{"key": "even", "match": {"value": True}}]}}
    hits = c.query(body, with_payload=True)
    assert all(h["payload"]["even"] for h in hits)

    even = np.arange(N) % 2 == 0
    dense_rank = [i for i in cosine_order(dense, q) if even[i]][:30]
    weight = dict(zip(sq["indices"], sq["values"]))
    sparse_score = np.array([sum(weight.get(t, 0.0) * v for t, v in zip(w["indices"], w["values"]))
                             for w in words])
    sparse_rank = [i for i in np.argsort(-sparse_score, kind="stable")
                   if even[i] and sparse_score[i] > 0][:30]
    fused = {}
    for ranking in (dense_rank, sparse_rank):
        for pos, i in enumerate(ranking):
            fused[int(i)] = fused.get(int(i), 0.0) + 1.0 / (pos + 2)
    scores = sorted(fused.values(), reverse=True)[:10]
    assert [round(h["score"], 5) for h in hits] == [round(s, 5) for s in scores]
    # Points strictly above the tenth score are the same ones (ties at it are either's).
    above = {i for i, s in fused.items() if s > scores[-1] + 1e-9}
    assert above <= {h["id"] for h in hits}


def test_by_id_recommend_and_bad_bodies(col):
    c, dense, _ = col
    hits = c.query({"query": {"recommend": {"positive": [5]}}, "using": "d", "limit": 5,
                    "params": {"exact": True}})
    assert 5 not in [h["id"] for h in hits]
    assert [h["id"] for h in hits] == [i for i in cosine_order(dense, dense[5]) if i != 5][:5]
    with pytest.raises(ValueError, match="query kind"):
        c.query({"query": {"teleport": 1}, "using": "d"})
    with pytest.raises(ValueError, match="params.exact"):
        c.query({"query": dense[0], "using": "d", "params": {"exact": "yes"}})
    with pytest.raises(ValueError, match="dimension|dim"):
        c.query({"query": [1.0, 2.0], "using": "d"})
    with pytest.raises(TypeError):
        c.query([1.0] * DIM)
