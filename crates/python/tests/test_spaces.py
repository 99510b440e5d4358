"""Named and sparse vector spaces from Python: one model of a collection with the server's.
Points hold any subset of the spaces; each space is searched on its own, through a seal and
a reopen, and checked against numpy brute force."""
import numpy as np
import pytest

import diskvec


@pytest.fixture
def db(tmp_path):
    with diskvec.open(tmp_path / "db") as db:
        yield db


def create(db):
    return db.create_collection(
        "s", vectors={"text": {"dim": 8, "metric": "cosine"}, "image": {"dim": 4, "metric": "l2"}},
        sparse_vectors={"words": {"modifier": "idf"}}, seal_threshold=1000)


def columns(n, seed):
    rng = np.random.default_rng(seed)
    text = rng.normal(size=(n, 8)).astype(np.float32)
    image = [rng.normal(size=4).astype(np.float32) if i % 3 else None for i in range(n)]
    words = [{"indices": [i % 7, 10 + i % 5], "values": [1.0, 0.5]} if i % 2 == 0 else None
             for i in range(n)]
    return text, image, words


def test_named_spaces_through_a_seal_and_a_reopen(tmp_path):
    n = 1500
    text, image, words = columns(n, 1)
    with diskvec.open(tmp_path / "db") as db:
        col = create(db)
        col.upsert(range(n), {"text": text, "image": image, "words": words})
        col.optimize()
    with diskvec.open(tmp_path / "db") as db:
        col = db.collection("s")
        assert len(col) == n
        q = np.random.default_rng(9).normal(size=8).astype(np.float32)
        hits = col.search(q, k=5, using="text", search_list=200)
        unit = text / np.linalg.norm(text, axis=1, keepdims=True)
        want = np.argsort(-(unit @ (q / np.linalg.norm(q))), kind="stable")[:5]
        assert [h["id"] for h in hits] == want.tolist()
        # Only points with an image vector are found in that space.
        hits = col.search(np.zeros(4, np.float32), k=50, using="image")
        assert hits and all(h["id"] % 3 for h in hits)
        # Sparse: exact dot products times IDF, over points sharing a term.
        hits = col.search({"indices": [3], "values": [2.0]}, k=500, using="words")
        holders = [i for i in range(0, n, 2) if i % 7 == 3]
        assert sorted(h["id"] for h in hits) == holders
        with_words = (n + 1) // 2
        idf = np.log(1 + (with_words - len(holders) + 0.5) / (len(holders) + 0.5))
        assert hits[0]["score"] == pytest.approx(2.0 * idf, rel=1e-5)
        got = col.get([0, 1], with_vectors=True)
        assert set(got[0]["vectors"]) == {"text", "words"}
        assert list(got[0]["vectors"]["words"]["indices"]) == [0, 10]
        assert set(got[1]["vectors"]) == {"text", "image"}
        assert "vector" not in got[0], "no unnamed space"


def test_vectors_are_set_and_removed_one_space_at_a_time(db):
    col = create(db)
    text, image, words = columns(3, 2)
    col.upsert([1, 2, 3], {"text": text, "image": image, "words": words}, [{"a": 1}, None, None])
    col.update_vectors([1], {"image": [[1, 2, 3, 4]]})
    col.delete_vectors([1, 2], ["text"])
    one = col.get([1], with_vectors=True)[0]
    assert set(one["vectors"]) == {"image", "words"}
    assert one["vectors"]["image"].tolist() == [1, 2, 3, 4]
    assert one["payload"] == {"a": 1}
    with pytest.raises(ValueError, match="Not existing vector name error: nope"):
        col.delete_vectors([1], ["nope"])
    with pytest.raises(KeyError):
        col.update_vectors([42], {"image": [[1, 2, 3, 4]]})


def test_mistakes_name_the_space(db):
    col = create(db)
    with pytest.raises(ValueError, match="no vector space named \"photo\""):
        col.upsert([1], {"photo": [[1.0, 2.0]]})
    with pytest.raises(ValueError, match="expected dim: 4, got 3"):
        col.upsert([1], {"image": [[1.0, 2.0, 3.0]]})
    with pytest.raises(ValueError, match="repeats index 4"):
        col.upsert([1], {"words": [{"indices": [4, 4], "values": [1.0, 1.0]}]})
    with pytest.raises(ValueError, match="sparse space"):
        col.search(np.zeros(4, np.float32), using="words")
    with pytest.raises(ValueError, match="dense space"):
        col.search({"indices": [1], "values": [1.0]}, using="image")
    with pytest.raises(ValueError, match="not both"):
        db.create_collection("x", dim=4, vectors={"a": {"dim": 4}})
    with pytest.raises(ValueError, match="give dim"):
        db.create_collection("x")
    assert len(col) == 0


def test_spaces_are_added_and_deleted_on_a_collection_with_points(db):
    col = create(db)
    n = 1200
    text, image, words = columns(n, 3)
    col.upsert(range(n), {"text": text, "image": image, "words": words})
    col.optimize()
    col.create_space("title", dim=3, metric="dot")
    col.create_space("tags", sparse=True, modifier="idf")
    with pytest.raises(ValueError, match="already exists"):
        col.create_space("title", dim=3)
    col.update_vectors([1, 2], {"title": np.ones((2, 3), dtype=np.float32),
                                "tags": [{"indices": [5], "values": [1.0]}] * 2})
    assert [h["id"] for h in col.search(np.ones(3, dtype=np.float32), k=10, using="title")] == [1, 2]
    col.delete_space("text")
    with pytest.raises(KeyError):
        col.delete_space("text")
    with pytest.raises(ValueError):
        col.search(np.ones(8, dtype=np.float32), using="text")
    assert "text" not in col.get([1], with_vectors=True)[0]["vectors"]
    col.create_space("text", dim=2, metric="l2")
    assert "text" not in col.get([1], with_vectors=True)[0]["vectors"]
    spaces = {s["name"]: s["dim"] for s in col.info()["config"]["dense"]}
    assert spaces == {"image": 4, "title": 3, "text": 2}


def test_sparse_posting_lists_on_disk_answer_as_in_dram(tmp_path):
    n = 1200
    _, _, words = columns(n, 5)
    words = [w or {"indices": [3], "values": [0.25]} for w in words]
    results = []
    for on_disk in (False, True):
        with diskvec.open(tmp_path / f"db{on_disk}") as db:
            col = db.create_collection("s", sparse_vectors={"w": {"modifier": "idf", "on_disk": on_disk}},
                                       seal_threshold=2000)
            col.upsert(range(n), {"w": words})
            col.optimize()
            results.append([[(h["id"], round(h["score"], 5)) for h in
                             col.search({"indices": [t, 10 + t % 5], "values": [1.0, 0.5]}, k=10, using="w")]
                            for t in range(7)])
    assert results[0] == results[1]
    assert all(len(r) == 10 for r in results[1])
    files = list((tmp_path / "dbTrue").rglob("sparse.0.dvi"))
    assert len(files) == 1


def test_float16_and_uint8_spaces_keep_the_rounded_values_and_refuse_what_they_cannot_hold(db):
    col = db.create_collection("t", vectors={"half": {"dim": 4, "metric": "l2", "datatype": "float16"},
                                             "bytes": {"dim": 4, "metric": "dot", "datatype": "uint8"}},
                               seal_threshold=100)
    half = np.array([[0.1, 1000.3, -2.5e-3, 7.0]] * 150, dtype=np.float32)
    whole = np.array([[0, 3, 255, 17]] * 150, dtype=np.float32)
    col.upsert(range(150), {"half": half, "bytes": whole})
    col.optimize()
    got = col.get([0, 149], with_vectors=True)
    for p in got:
        assert list(p["vectors"]["half"]) == half[0].astype(np.float16).astype(np.float32).tolist()
        assert list(p["vectors"]["bytes"]) == [0, 3, 255, 17]
    with pytest.raises(ValueError, match="65504"):
        col.upsert([200], {"half": np.array([[7e4, 0, 0, 0]], dtype=np.float32)})
    with pytest.raises(ValueError, match="0 to 255"):
        col.upsert([200], {"bytes": np.array([[256, 0, 0, 0]], dtype=np.float32)})
    with pytest.raises(ValueError, match="float32, float16 or uint8"):
        db.create_collection("bad", dim=4, datatype="turbo4")
    with pytest.raises(ValueError, match="unknown graph builder"):
        db.create_collection("bad", dim=4, graph_builder="hnsw")
    assert db.create_collection("v", dim=4, graph_builder="vamana").info()["config"]["graph_builder"] == "vamana"
    assert "graph_builder" not in db.create_collection("auto", dim=4).info()["config"]
    one = db.create_collection("one", dim=4, metric="l2", datatype="float16")
    one.upsert([1], np.array([[0.1, 0.2, 0.3, 0.4]], dtype=np.float32))
    assert list(one.get([1], with_vectors=True)[0]["vector"]) == \
        np.array([0.1, 0.2, 0.3, 0.4], dtype=np.float16).astype(np.float32).tolist()
