"""The database from Python: collections, points, payloads, filters, sealing, reopening,
errors and threads, against numpy exact search."""
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import diskvec

REPO = Path(__file__).resolve().parents[3]
SAMPLE = REPO / "data" / "wordnet-minilm384-5k"

UUID = "550e8400-e29b-41d4-a716-446655440000"


def clustered(n, dim, seed):
    """Clusters with low intrinsic dimension, like real embeddings."""
    layout = np.random.default_rng(0)
    centres = layout.normal(size=(16, dim))
    basis = 0.3 * layout.normal(size=(4, dim))
    rng = np.random.default_rng(seed)
    points = centres[rng.integers(0, 16, n)] + rng.uniform(-1, 1, size=(n, 4)) @ basis
    return (points + 0.01 * rng.normal(size=(n, dim))).astype(np.float32)


def exact_ids(data, ids, queries, k, metric):
    """Top-k ids by numpy brute force (ties by id, as the database breaks them)."""
    data = data.astype(np.float64)
    queries = np.atleast_2d(queries).astype(np.float64)
    if metric == "cosine":
        data = data / np.linalg.norm(data, axis=1, keepdims=True)
        queries = queries / np.linalg.norm(queries, axis=1, keepdims=True)
        d = -queries @ data.T
    elif metric == "l2":
        d = ((queries[:, None, :] - data[None, :, :]) ** 2).sum(-1)
    else:
        d = -queries @ data.T
    ids = np.asarray(ids)
    return [list(ids[np.lexsort((ids, row))[:k]]) for row in d]


def recall(got, truth):
    return np.mean([len(set(g) & set(t)) / len(t) for g, t in zip(got, truth)])


@pytest.fixture
def db(tmp_path):
    with diskvec.open(tmp_path / "db") as db:
        yield db


def test_create_upsert_search_reads_its_writes(db):
    col = db.create_collection("docs", dim=8, metric="l2")
    assert db.collections() == ["docs"] and "docs" in db and len(col) == 0
    data = clustered(60, 8, 1)
    op1 = col.upsert(list(range(30)), data[:30])
    op2 = col.upsert(np.arange(30, 60), data[30:].tolist())
    assert op2 > op1 >= 1 and len(col) == 60
    for i in [0, 29, 30, 59]:
        hits = col.search(data[i], k=3)
        assert hits[0]["id"] == i and hits[0]["distance"] == pytest.approx(0, abs=1e-5)
        assert set(hits[0]) == {"id", "version", "score", "distance", "payload"}
        assert hits[0]["version"] == (op1 if i < 30 else op2)
    # a rewrite is seen by the next search
    col.upsert([5], data[40:41] + 100)
    assert col.search(data[40] + 100, k=1)[0]["id"] == 5
    assert col.search(data[5], k=1)[0]["id"] != 5
    # the last of a repeated id wins, as if applied in order
    col.upsert([7, 7], np.stack([data[1], data[2]]), [{"n": 1}, {"n": 2}])
    got = col.get([7], with_vectors=True)[0]
    assert got["payload"] == {"n": 2} and np.allclose(got["vector"], data[2])


def test_payloads_round_trip(db):
    col = db.create_collection("p", dim=4, metric="ip")
    payloads = [
        {"title": "naïve café ☕ 東京", "tags": ["a", "b", "ü"], "n": 3, "x": -0.25, "ok": True, "none": None},
        {"deep": {"a": {"b": {"c": [1, [2, [3, {"d": "e"}]]]}}}, "empty": {}, "list": []},
        {"big": 2**64 - 1, "small": -(2**63), "tuple": (1, "two"), "np": np.int64(7), "npf": np.float32(0.5),
         "arr": np.arange(3)},
        None,
    ]
    col.upsert([1, 2, 3, 4], np.eye(4), payloads)
    got = {r["id"]: r["payload"] for r in col.get([1, 2, 3, 4])}
    assert got[1] == payloads[0] and got[2] == payloads[1] and got[4] == {}
    assert got[3] == {"big": 2**64 - 1, "small": -(2**63), "tuple": [1, "two"], "np": 7, "npf": 0.5, "arr": [0, 1, 2]}
    assert isinstance(got[3]["np"], int) and isinstance(got[1]["x"], float)
    # and out of a search, a scroll and a sealed segment
    assert col.search([1, 0, 0, 0], k=1)[0]["payload"] == payloads[0]
    col.optimize(wait=True)
    assert col.scroll()[0][1]["payload"] == payloads[1]
    assert col.get([1], with_payload=False) == [{"id": 1, "version": 1}]
    # empty writes and reads are no-ops
    assert col.upsert([], []) == col.upsert([], np.empty((0, 4))) == col.info()["last_op"]
    assert col.get([]) == [] and col.search_batch(np.empty((0, 4))) == []


def test_uuid_and_int_ids(db):
    col = db.create_collection("ids", dim=4, metric="l2")
    upper = UUID.upper()
    other = "{12345678-1234-5678-1234-567812345678}"
    op = col.upsert([3, upper, np.uint64(2**64 - 1), other, 0], np.eye(5, 4))
    assert op == 1
    ids = [r["id"] for r in col.scroll()[0]]
    # ints ascending, then UUIDs, in canonical lowercase hyphenated form
    assert ids == [0, 3, 2**64 - 1, "12345678-1234-5678-1234-567812345678", UUID]
    assert [r["id"] for r in col.get([UUID, 3, "00000000-0000-0000-0000-000000000003"])] == [UUID, 3]
    assert col.search([0, 1, 0, 0], k=1)[0]["id"] == UUID
    assert col.count({"must": [{"has_id": [UUID, 0]}]}) == 2
    col.upsert(np.array([10, 11], dtype=np.int64), np.ones((2, 4)))
    col.upsert(np.array([12], dtype=np.uint32), np.ones((1, 4)))
    assert len(col) == 8
    col.delete([UUID, 10])
    assert len(col) == 6 and col.get([UUID]) == []


def test_get_scroll_count_with_filters(db):
    col = db.create_collection("f", dim=8, metric="cosine", seal_threshold=40)
    n = 100
    data = clustered(n, 8, 2)
    col.upsert(range(n), data, [{"group": i % 3, "tag": "even" if i % 2 == 0 else "odd", "i": i} for i in range(n)])
    assert [r["id"] for r in col.get([5, 1000, 2, 5])] == [5, 2, 5]
    seen, offset, pages = [], None, 0
    while True:
        page, offset = col.scroll(limit=7, offset=offset)
        seen += [r["id"] for r in page]
        pages += 1
        if offset is None:
            break
    assert seen == list(range(n)) and pages == 15
    even = {"must": [{"key": "tag", "match": {"value": "even"}}]}
    page, nxt = col.scroll(filter=even, limit=10, with_vectors=True)
    assert [r["id"] for r in page] == list(range(0, 20, 2)) and nxt == 20
    assert all(r["payload"]["tag"] == "even" and r["vector"].shape == (8,) for r in page)
    page, nxt = col.scroll(filter=even, limit=10, offset=nxt, with_payload=False)
    assert [r["id"] for r in page] == list(range(20, 40, 2)) and "payload" not in page[0]
    assert col.count() == n and col.count(even) == 50
    g1_not_even = {"must": [{"key": "group", "match": {"value": 1}}], "must_not": [even["must"][0]]}
    assert col.count(g1_not_even) == len([i for i in range(n) if i % 3 == 1 and i % 2 == 1])
    ranged = {"must": [{"key": "i", "range": {"gte": 10, "lt": 20}}]}
    assert col.count(ranged) == 10
    hits = col.search(data[0], k=20, filter=ranged)
    assert len(hits) == 10 and {h["id"] for h in hits} == set(range(10, 20))


def test_search_options(db):
    col = db.create_collection("s", dim=16, metric="cosine")
    data = clustered(200, 16, 3)
    col.upsert(range(200), data)
    q = clustered(5, 16, 4)
    full = col.search(q[0], k=10)
    assert [h["id"] for h in col.search(q[0], k=5, offset=5)] == [h["id"] for h in full[5:]]
    assert all(a["score"] >= b["score"] for a, b in zip(full, full[1:]))
    assert all(h["score"] == pytest.approx(1 - h["distance"], abs=1e-6) for h in full)
    t = full[4]["score"]
    assert [h["id"] for h in col.search(q[0], k=10, score_threshold=t)] == [h["id"] for h in full if h["score"] >= t]
    one = col.search(q[0], k=3, with_payload=False, with_vectors=True)[0]
    assert set(one) == {"id", "version", "score", "distance", "vector"}
    assert one["vector"].dtype == np.float32 and np.linalg.norm(one["vector"]) == pytest.approx(1, abs=1e-5)
    batch = col.search_batch(q, k=7, threads=2)
    assert len(batch) == 5
    for row, query in zip(batch, q):
        assert [h["id"] for h in row] == [h["id"] for h in col.search(query, k=7)]
    assert col.search_batch(q[:2], k=3) == col.search_batch(q[:2], k=3, threads=1)
    assert exact_ids(data, range(200), q[:1], 10, "cosine")[0] == [h["id"] for h in full]


def test_delete_by_ids_and_by_filter(db):
    col = db.create_collection("d", dim=8, metric="l2", seal_threshold=50)
    data = clustered(120, 8, 5)
    col.upsert(range(120), data, [{"kind": "a" if i < 40 else "b"} for i in range(120)])
    col.optimize(wait=True)
    op = col.delete([3, 4, 999])
    assert isinstance(op, int) and len(col) == 118
    assert col.get([3, 4, 5]) == [col.get([5])[0]]
    assert col.search(data[3], k=1)[0]["id"] != 3
    assert col.delete(filter={"must": [{"key": "kind", "match": {"value": "a"}}]}) == 38
    assert len(col) == 80 and col.count({"must": [{"key": "kind", "match": {"value": "a"}}]}) == 0
    assert all(h["id"] >= 40 for h in col.search(data[0], k=20))
    assert col.delete(filter={"must": [{"key": "kind", "match": {"value": "zzz"}}]}) == 0
    with pytest.raises(ValueError, match="either ids or filter"):
        col.delete()
    with pytest.raises(ValueError, match="either ids or filter"):
        col.delete([1], filter={})
    # deleted ids can be written again
    col.upsert([3], data[3:4])
    assert col.search(data[3], k=1)[0]["id"] == 3


def test_payload_updates(db):
    col = db.create_collection("u", dim=4, metric="l2")
    col.upsert([1, 2, UUID], np.eye(3, 4), [{"a": 1, "b": {"c": 2}}, {"a": 5}, {"z": 0}])
    col.set_payload([1, UUID], {"b": "new", "d": [1, 2]})
    assert col.get([1])[0]["payload"] == {"a": 1, "b": "new", "d": [1, 2]}
    assert col.get([UUID])[0]["payload"] == {"z": 0, "b": "new", "d": [1, 2]}
    col.overwrite_payload([2], {"only": "this"})
    assert col.get([2])[0]["payload"] == {"only": "this"}
    col.delete_payload([1], ["a", "missing"])
    assert col.get([1])[0]["payload"] == {"b": "new", "d": [1, 2]}
    col.clear_payload([1, 2])
    assert [r["payload"] for r in col.get([1, 2])] == [{}, {}]
    # vectors are untouched, and the update is a new version
    got = col.get([UUID], with_vectors=True)[0]
    assert np.allclose(got["vector"], [0, 0, 1, 0]) and got["version"] > 1
    with pytest.raises(KeyError, match="no point with id 77"):
        col.set_payload([UUID, 77], {"x": 1})
    assert "x" not in col.get([UUID])[0]["payload"]
    with pytest.raises(KeyError, match="77"):
        col.clear_payload([77])
    with pytest.raises(ValueError, match="must be a dict"):
        col.set_payload([1], [1, 2])


def test_payload_index(db):
    col = db.create_collection("i", dim=8, metric="cosine", seal_threshold=60)
    data = clustered(150, 8, 6)
    col.upsert(range(150), data, [{"lexname": f"noun.{i % 5}", "chars": i % 40} for i in range(150)])
    f = {"must": [{"key": "lexname", "match": {"value": "noun.2"}}, {"key": "chars", "range": {"lt": 30}}]}
    before = col.search(data[0], k=10, filter=f)
    col.create_payload_index("lexname", "keyword")
    col.create_payload_index("chars", "integer")
    assert col.payload_indexes() == {"lexname": "keyword", "chars": "integer"}
    assert col.info()["payload_indexes"] == {"lexname": "keyword", "chars": "integer"}
    assert col.search(data[0], k=10, filter=f) == before
    col.optimize(wait=True)
    after = col.search(data[0], k=10, filter=f)
    assert after and all(h["payload"]["lexname"] == "noun.2" and h["payload"]["chars"] < 30 for h in after)
    assert col.count(f) == len([i for i in range(150) if i % 5 == 2 and i % 40 < 30])
    col.delete_payload_index("lexname")
    col.delete_payload_index("never-indexed")
    assert col.payload_indexes() == {"chars": "integer"}
    with pytest.raises(ValueError, match="keyword"):
        col.create_payload_index("x", "fulltext")


def test_text_index_with_options(db):
    col = db.create_collection("t", dim=2, metric="l2")
    titles = ["Little Lost Robot", "Robot Dreams", "The Last Question", "Star Light"]
    col.upsert(range(4), np.ones((4, 2)), [{"t": t} for t in titles])
    robot = {"must": [{"key": "t", "match": {"text": "ROBO"}}]}
    assert col.count(robot) == 0  # no index: a substring, case and all
    col.create_payload_index("t", "text", {"tokenizer": "prefix"})
    assert col.payload_indexes() == {"t": "text"}
    assert col.count(robot) == 2
    col.create_payload_index("t", "text", {"stopwords": "english", "phrase_matching": True})
    assert col.count({"must": [{"key": "t", "match": {"phrase": "last question"}}]}) == 1
    assert col.count({"must": [{"key": "t", "match": {"text_any": "the star of robot"}}]}) == 3
    with pytest.raises(ValueError, match="multilingual"):
        col.create_payload_index("u", "text", {"tokenizer": "multilingual"})
    with pytest.raises(ValueError, match="dict"):
        col.create_payload_index("u", "text", ["prefix"])


def test_indexing_off_for_a_bulk_load_then_on_seals(db):
    dim, n = 16, 1200
    col = db.create_collection("bulk", dim=dim, metric="l2", seal_threshold=300)
    col.set_indexing(False)
    data = clustered(n, dim, 9)
    for start in range(0, n, 100):
        col.upsert(range(start, start + 100), data[start:start + 100])
    info = col.info()
    assert info["indexing_paused"] and [s["kind"] for s in info["segments"]] == ["growing"]
    queries = clustered(10, dim, 10)
    got = [[h["id"] for h in row] for row in col.search_batch(queries, k=5)]
    assert got == [list(t) for t in exact_ids(data, range(n), queries, 5, "l2")]
    col.set_indexing(True)
    deadline = time.time() + 120
    while col.info()["status"] != "green" and time.time() < deadline:
        time.sleep(0.05)
    info = col.info()
    assert not info["indexing_paused"] and info["indexed_points"] == n, info


def test_optimize_seals_and_search_stays_correct(db):
    dim, n = 32, 1000
    col = db.create_collection("o", dim=dim, metric="l2", seal_threshold=300, max_degree=24, build_list=50)
    data = clustered(n, dim, 7)
    payloads = [{"cluster": int(i % 4), "i": i} for i in range(n)]
    for start in range(0, n, 100):  # a segment freezes after the write that fills it
        col.upsert(range(start, start + 100), data[start:start + 100], payloads[start:start + 100])
    col.optimize(wait=True)
    info = col.info()
    kinds = [s["kind"] for s in info["segments"]]
    assert info["status"] == "green" and info["points"] == n and info["indexed_points"] == n
    # optimize leaves one sealed segment: whatever was sealed and frozen, built together
    assert kinds.count("sealed") == 1 and "frozen" not in kinds
    assert info["seals_done"] + info["rebuilds_done"] >= 1
    queries = clustered(50, dim, 8)
    truth = exact_ids(data, range(n), queries, 10, "l2")
    got = [[h["id"] for h in row] for row in col.search_batch(queries, k=10, search_list=64)]
    assert recall(got, truth) >= 0.9
    # filtered: every result passes, and they are the right ones
    flt = {"must": [{"key": "cluster", "match": {"value": 2}}]}
    keep = [i for i in range(n) if i % 4 == 2]
    truth_f = exact_ids(data[keep], keep, queries, 10, "l2")
    got_f = [[h["id"] for h in row] for row in col.search_batch(queries, k=10, filter=flt, search_list=64)]
    assert all(i % 4 == 2 for row in got_f for i in row)
    assert recall(got_f, truth_f) >= 0.9
    # writes after the seal are seen next to the sealed points
    col.upsert([5], data[900:901] * 3)
    assert col.search(data[900] * 3, k=1)[0]["id"] == 5
    col.delete([int(truth[0][0])])
    assert int(truth[0][0]) not in [h["id"] for h in col.search(queries[0], k=10, search_list=64)]


def test_payloads_left_on_ssd_answer_as_in_dram(db):
    dim, n = 16, 600
    data = clustered(n, dim, 5)
    payloads = [{"cluster": int(i % 4), "i": i, "text": f"point {i}"} for i in range(n)]
    cols = {}
    for on_ssd in (False, True):
        col = db.create_collection(f"p{int(on_ssd)}", dim=dim, metric="l2", seal_threshold=1000,
                                   on_disk_payload=on_ssd)
        col.upsert(range(n), data, payloads)
        col.optimize(wait=True)
        sealed = [s for s in col.info()["segments"] if s["kind"] == "sealed"]
        assert [s["payloads_on_ssd"] for s in sealed] == [on_ssd]
        cols[on_ssd] = col
    assert cols[True].info()["config"]["on_disk_payload"] is True
    flt = {"must": [{"key": "i", "range": {"gte": 100, "lt": 350}}]}
    for col in cols.values():
        assert col.count(flt) == 250
    answers = [[(h["id"], h["payload"]) for h in col.search(data[7], k=10, filter=flt, exact=True)]
               for col in cols.values()]
    assert answers[0] == answers[1] and len(answers[0]) == 10
    assert all(100 <= p["i"] < 350 for _, p in answers[1])
    assert cols[True].get([5])[0]["payload"] == payloads[5]


def test_info_and_settings(tmp_path):
    with diskvec.open(tmp_path / "db") as db:
        col = db.create_collection("cfg", dim=16, metric="ip", paths=[tmp_path / "ns1", tmp_path / "ns2"],
                                   wal_path=tmp_path / "wal", durability="interval", interval_ms=50,
                                   seal_threshold=123, vacuum_threshold=0.5, max_degree=20, build_list=40,
                                   pq_bytes=4, search_list=33, max_payload_bytes=1000, navigation=False)
        info = col.info()
        c = info["config"]
        assert c["dim"] == 16 and c["metric"] == "ip" and c["durability"] == "interval" and c["interval_ms"] == 50
        assert c["paths"] == [str(tmp_path / "ns1"), str(tmp_path / "ns2")] and c["wal_path"] == str(tmp_path / "wal")
        assert (c["seal_threshold"], c["vacuum_threshold"], c["max_degree"], c["build_list"], c["pq_bytes"],
                c["search_list"], c["max_payload_bytes"], c["navigation"]) == (123, 0.5, 20, 40, 4, 33, 1000, False)
        assert info["name"] == "cfg" and info["points"] == 0 and info["status"] == "green" and info["error"] is None
        col.upsert(range(200), clustered(200, 16, 9))
        info = col.info()
        assert info["points"] == 200 and info["last_op"] == 1 and info["wal_bytes"] > 200 * 16 * 4
        col.optimize()
        info = col.info()
        assert info["indexed_points"] == 123 + 77 and {s["kind"] for s in info["segments"]} == {"sealed", "growing"}
        assert any((tmp_path / "ns2" / "cfg").iterdir()) and any((tmp_path / "wal" / "cfg").iterdir())
        with pytest.raises(ValueError, match="payload is .* bytes; at most 1000"):
            col.upsert([1], np.ones((1, 16)), [{"text": "x" * 2000}])
        assert col.recovery()["replayed_ops"] == 0
        default = db.create_collection("default", dim=3)
        assert default.info()["config"]["metric"] == "cosine" and default.info()["config"]["durability"] == "sync"
        assert default.info()["config"]["navigation"] is True


def test_reopen_finds_everything(tmp_path):
    path, data = tmp_path / "db", clustered(500, 16, 10)
    db = diskvec.open(path)
    col = db.create_collection("keep", dim=16, metric="cosine", seal_threshold=200, wal_path=tmp_path / "wal",
                               paths=[tmp_path / "ns"])
    col.upsert(range(500), data, [{"i": i, "s": str(i)} for i in range(500)])
    col.upsert([UUID], data[:1], [{"uuid": True}])
    col.upsert([2000], data[:1], [{"deep": nested(60)}])  # the log's JSON reader must take it back
    col.create_payload_index("s", "keyword")
    col.optimize(wait=True)
    col.upsert(range(500, 510), data[:10])  # left in the log, not sealed
    col.delete([7, 8])
    col.set_payload([9], {"new": 1})
    db.create_collection("gone", dim=2)
    db.drop_collection("gone")
    expected = col.search(data[100], k=10)
    db.close()
    assert db.closed
    with pytest.raises(ValueError, match="closed"):
        col.count()
    with pytest.raises(ValueError, match="closed"):
        db.collections()
    db.close()  # twice is harmless

    with diskvec.open(path) as db:
        assert db.collections() == ["keep"]
        col = db.collection("keep")
        rec = col.recovery()
        assert rec["sealed_segments"] == 1 and rec["replayed_ops"] >= 3 and rec["torn_tail"] is None
        assert len(col) == 500 + 2 + 10 - 2
        assert col.get([2000])[0]["payload"] == {"deep": nested(60)}
        assert col.get([7, 8]) == [] and col.get([9])[0]["payload"] == {"i": 9, "s": "9", "new": 1}
        assert col.get([UUID])[0]["payload"] == {"uuid": True}
        assert col.payload_indexes() == {"s": "keyword"}
        assert col.search(data[100], k=10) == expected
        assert col.count({"must": [{"key": "s", "match": {"value": "42"}}]}) == 1
        col.upsert([1000], data[:1])
    with diskvec.open(path) as db:
        assert len(db.collection("keep")) == 511


def test_errors_have_the_right_types_and_messages(db, tmp_path):
    col = db.create_collection("e", dim=4, metric="cosine")
    col.upsert([1], np.ones((1, 4)))
    v = np.ones((1, 4))
    cases = [
        # ids
        (ValueError, "point id -1 is out of range", lambda: col.upsert([-1], v)),
        (ValueError, "non-negative", lambda: col.upsert(np.array([-5]), v)),
        (ValueError, "of type bool", lambda: col.upsert([True], v)),
        (ValueError, "bool array", lambda: col.upsert(np.array([True]), v)),
        (ValueError, "of type float", lambda: col.upsert([1.0], v)),
        (ValueError, "float array", lambda: col.upsert(np.array([1.0]), v)),
        (ValueError, "is not a UUID", lambda: col.upsert(["not-a-uuid"], v)),
        (ValueError, "out of range", lambda: col.get([2**64])),
        (ValueError, "of type NoneType", lambda: col.get([None])),
        (ValueError, "of type bool", lambda: col.get([np.True_])),
        (ValueError, "of type float64", lambda: col.get([np.float64(1)])),
        (ValueError, "must be a list of ids", lambda: col.get(5)),
        (ValueError, "must be a list of ids", lambda: col.delete(UUID)),
        # vectors and queries
        (ValueError, "expected dim: 4, got 3 \\(point 2, collection \"e\"", lambda: col.upsert([2], np.ones((1, 3)))),
        (ValueError, "non-finite", lambda: col.upsert([2], [[1, np.nan, 0, 0]])),
        (ValueError, "non-finite", lambda: col.upsert([2], [[1, np.inf, 0, 0]])),
        (ValueError, "2 ids but 1 vectors", lambda: col.upsert([2, 3], v)),
        (ValueError, "2-D", lambda: col.upsert([2], np.ones(4))),
        (ValueError, "1 ids but 2 payloads", lambda: col.upsert([2], v, [{}, {}])),
        (ValueError, "expected dim: 4, got 5 \\(query", lambda: col.search(np.ones(5))),
        (ValueError, "non-finite", lambda: col.search([np.nan, 0, 0, 0])),
        (ValueError, "1-D", lambda: col.search(np.ones((2, 4)))),
        (ValueError, "2-D", lambda: col.search_batch(np.ones(4))),
        (ValueError, "expected dim: 4, got 0 \\(query", lambda: col.search_batch(np.ones((2, 0)))),
        # payloads: what JSON cannot hold, naming the point and where
        (ValueError, r"point 2: payload\[\"s\"\]: a value of type set", lambda: col.upsert([2], v, [{"s": {1}}])),
        (ValueError, r"point 2: payload\[\"b\"\]\[1\]: a value of type bytes", lambda: col.upsert([2], v, [{"b": [1, b"x"]}])),
        (ValueError, r'point 2: payload\["x"\]: NaN is not a JSON number', lambda: col.upsert([2], v, [{"x": float("nan")}])),
        (ValueError, "inf is not a JSON number", lambda: col.upsert([2], v, [{"x": float("inf")}])),
        (ValueError, "key 1 is of type int", lambda: col.upsert([2], v, [{1: "x"}])),
        (ValueError, "does not fit in 64 bits", lambda: col.upsert([2], v, [{"x": 2**64}])),
        (ValueError, "must be a dict", lambda: col.upsert([2], v, ["text"])),
        (ValueError, "one dict per point", lambda: col.upsert([2], v, {"a": 1})),
        (ValueError, "lone surrogate", lambda: col.upsert([2], v, [{"x": "\ud800"}])),
        (ValueError, "nested more than 64 levels", lambda: col.upsert([2], v, [{"x": nested(100)}])),
        (ValueError, "holds itself", lambda: col.upsert([2], v, [{"x": cyclic()}])),
        # filters
        (ValueError, "unknown filter key", lambda: col.search(v[0], filter={"bogus": []})),
        (ValueError, "bad filter", lambda: col.count({"must": [{"key": "a", "match": {"phrase": 1}}]})),
        (ValueError, "a filter must be a JSON object", lambda: col.delete(filter="x")),
        (ValueError, "bad filter: filter.*set", lambda: col.count({"must": [{"has_id": {1, 2}}]})),
        # sizes
        (ValueError, "k must be between 1 and 10000, got 0", lambda: col.search(v[0], k=0)),
        (ValueError, "k must be between 1 and 10000, got -1", lambda: col.search(v[0], k=-1)),
        (ValueError, "k must be an integer", lambda: col.search(v[0], k=1.5)),
        (ValueError, "k is out of range", lambda: col.search(v[0], k=2**100)),
        (ValueError, "offset \\+ limit must be at most 10000", lambda: col.search(v[0], k=10, offset=9999)),
        (ValueError, "offset must be non-negative", lambda: col.search(v[0], offset=-1)),
        (ValueError, "search list must be between 1 and 10000", lambda: col.search(v[0], search_list=0)),
        (ValueError, "threads must be between 1 and 1024, got 0", lambda: col.search_batch(v, threads=0)),
        (ValueError, "limit must be between 1 and 10000, got 0", lambda: col.scroll(limit=0)),
        (ValueError, "limit must be between 1 and 10000, got -2", lambda: col.scroll(limit=-2)),
        (ValueError, "offset: point id -1", lambda: col.scroll(offset=-1)),
        (ValueError, "score_threshold must be a number", lambda: col.search(v[0], score_threshold=float("nan"))),
        # collections
        (KeyError, 'collection "nope" does not exist', lambda: db.collection("nope")),
        (KeyError, 'collection "nope" does not exist', lambda: db.drop_collection("nope")),
        (ValueError, 'collection "e" already exists', lambda: db.create_collection("e", dim=4)),
        (ValueError, "collection name", lambda: db.create_collection("../x", dim=4)),
        (ValueError, "dim must be between 1 and 65536, got 0", lambda: db.create_collection("z", dim=0)),
        (ValueError, "dim must be positive, got -4", lambda: db.create_collection("z", dim=-4)),
        (ValueError, "unknown metric", lambda: db.create_collection("z", dim=4, metric="hamming")),
        (ValueError, "durability must be", lambda: db.create_collection("z", dim=4, durability="never")),
        (ValueError, "interval_ms applies", lambda: db.create_collection("z", dim=4, interval_ms=5)),
        (ValueError, "flush interval must be 1 to 60000", lambda: db.create_collection("z", dim=4,
                                                                                       durability="interval",
                                                                                       interval_ms=0)),
        (ValueError, "seal_threshold must be between 1", lambda: db.create_collection("z", dim=4, seal_threshold=0)),
        (ValueError, "seal_threshold must be positive", lambda: db.create_collection("z", dim=4, seal_threshold=-1)),
        (ValueError, "vacuum_threshold must be in", lambda: db.create_collection("z", dim=4, vacuum_threshold=2.0)),
        (ValueError, "max degree must be between 1 and 1024", lambda: db.create_collection("z", dim=4, max_degree=0)),
        (ValueError, "PQ bytes must be between 1 and", lambda: db.create_collection("z", dim=4, pq_bytes=-1)),
        # points
        (KeyError, "no point with id 5", lambda: col.set_payload([5], {"a": 1})),
        (KeyError, f"no point with id {UUID}", lambda: col.overwrite_payload([UUID], {})),
        (KeyError, "no point with id 5", lambda: col.delete_payload([5], ["a"])),
    ]
    for exc, message, call in cases:
        with pytest.raises(exc, match=message):
            call()
    assert "z" not in db and db.collections() == ["e"]
    # nothing refused above was written
    assert len(col) == 1 and col.get([1])[0]["version"] == 1


def nested(depth):
    v = "leaf"
    for _ in range(depth):
        v = [v]
    return v


def cyclic():
    a = []
    a.append(a)
    return a


def test_random_bad_input_raises_value_errors_never_panics(db):
    """Random filters, payloads and ids: each call answers or raises ValueError / KeyError;
    a Rust panic would surface as PanicException (a BaseException) or RuntimeError."""
    import random

    rng = random.Random(5)
    col = db.create_collection("fuzz", dim=4, metric="l2", seal_threshold=50)
    col.upsert(range(120), clustered(120, 4, 14), [{"a": i % 3, "s": str(i), "l": [i, "x"], "o": {"k": i}}
                                                  for i in range(120)])
    col.create_payload_index("a", "integer")
    col.create_payload_index("s", "keyword")
    col.optimize(wait=True)
    atoms = [None, True, 0, -1, 2**63, -(2**63), 2**64 - 1, 2**64, 1.5, -0.0, 1e308, float("nan"), "", "a", UUID,
             [], {}, [1, "a"], {"value": 1}, {"any": [1, 2]}, {"except": ["a"]}, {"gte": 1}, {"lt": "x"}, {1, 2},
             b"x", (1,)]
    keys = ["must", "should", "must_not", "min_should", "key", "match", "range", "has_id", "is_empty", "is_null",
            "value", "any", "except", "gt", "lte", "min_count", "conditions", "nested", "filter", "text", "a", "s",
            "l[]", "o.k", "l[0]", "a..b", "[]", "values_count", "geo_radius", 1]

    def value(depth):
        r = rng.random()
        if depth > 4 or r < 0.3:
            return rng.choice(atoms)
        if r < 0.5:
            return [value(depth + 1) for _ in range(rng.randint(0, 3))]
        return {rng.choice(keys): value(depth + 1) for _ in range(rng.randint(1, 3))}

    def condition():
        r = rng.random()
        if r < 0.5:
            return {"key": rng.choice(["a", "s", "l", "l[]", "o.k", "o", "zz", "l[1]", "a.", ""]),
                    rng.choice(["match", "range", "is_empty", "is_null"]): value(3)}
        return {"has_id": value(3)} if r < 0.6 else value(1)

    outcomes = {"ok": 0, "error": 0}
    for _ in range(1500):
        f = {rng.choice(["must", "should", "must_not", "min_should"]): [condition() for _ in range(rng.randint(0, 3))]}
        if rng.random() < 0.2:
            f = value(0)
        payload = value(0)
        ids = [rng.choice([0, 5, -3, 2**64, "x", UUID, 1.0, True, None, 119])]
        calls = [lambda: col.count(f), lambda: col.search([0.5] * 4, k=5, filter=f),
                 lambda: col.scroll(filter=f, limit=3), lambda: col.get(ids),
                 lambda: col.upsert([rng.randrange(1000, 2000)], [[1, 2, 3, 4]], [payload]),
                 lambda: col.set_payload([rng.randrange(0, 125)], payload)]
        for call in calls:
            try:
                call()
                outcomes["ok"] += 1
            except (ValueError, KeyError):
                outcomes["error"] += 1
    assert outcomes["ok"] > 1000 and outcomes["error"] > 1000, outcomes
    assert col.delete(filter={"must": [{"key": "a", "match": {"value": 1}}]}) >= 1


def test_storage_errors_are_os_errors(tmp_path):
    path = tmp_path / "db"
    db = diskvec.open(path)
    db.create_collection("c", dim=4).upsert([1], np.ones((1, 4)))
    with pytest.raises(OSError, match="open in another process"):
        diskvec.open(path)
    db.close()
    manifest = path / "collections" / "c" / "manifest.dvc"
    raw = bytearray(manifest.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    manifest.write_bytes(bytes(raw))
    with pytest.raises(OSError, match="manifest"):
        diskvec.open(path)
    (tmp_path / "file").write_text("x")
    with pytest.raises(OSError):
        diskvec.open(tmp_path / "file")


def test_dropped_collection_handles_and_names(db):
    col = db.create_collection("a", dim=2)
    db.create_collection("b", dim=2)
    assert db.collections() == ["a", "b"]
    db.drop_collection("a")
    assert db.collections() == ["b"]
    with pytest.raises(KeyError, match='collection "a" was dropped'):
        col.upsert([1], [[1, 2]])
    again = db.create_collection("a", dim=3)
    with pytest.raises(KeyError, match="was dropped"):
        len(col)  # a new collection of the same name is another one
    again.upsert([1], [[1, 2, 3]])
    assert len(db.collection("a")) == 1


def test_every_public_method_is_documented():
    for cls in (diskvec.Database, diskvec.Collection):
        for name, member in vars(cls).items():
            if not name.startswith("_") and callable(member):
                assert member.__doc__ and len(member.__doc__) > 20, f"{cls.__name__}.{name}"
    assert "filter" in diskvec.Collection.search.__doc__ and "score_threshold" in diskvec.Collection.search.__doc__
    assert diskvec.open.__doc__


def test_large_upsert_is_split_below_the_log_record_limit(db):
    # 4,200 x 2,048 float32 is 34 MiB: over one log record's half, so written in parts
    dim, n = 2048, 4200
    col = db.create_collection("big", dim=dim, metric="l2", seal_threshold=100_000)
    data = np.random.default_rng(11).random((n, dim), dtype=np.float32)
    bad = data.copy()
    bad[-1, -1] = np.nan
    with pytest.raises(ValueError, match=f"point {n - 1}: vector holds a non-finite value"):
        col.upsert(range(n), bad)
    assert len(col) == 0  # refused up front: no part was written
    op = col.upsert(range(n), data)
    assert op >= 2 and len(col) == n and col.info()["last_op"] == op
    assert col.search(data[n - 1], k=1)[0]["id"] == n - 1


def test_threads_search_while_one_writes(db):
    dim = 16
    col = db.create_collection("t", dim=dim, metric="l2", seal_threshold=400, max_degree=16, build_list=32,
                               durability="interval", interval_ms=20)
    data = clustered(2000, dim, 12)
    col.upsert(range(500), data[:500])
    errors, searches, stop = [], [0], threading.Event()

    def reader(seed):
        rng = np.random.default_rng(seed)
        try:
            while not stop.is_set():
                i = int(rng.integers(0, 500))
                hits = col.search(data[i], k=5, search_list=32)
                assert hits and hits[0]["distance"] <= 1e-3, (i, hits[:1])
                col.get([i])
                searches[0] += 1
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    threads = [threading.Thread(target=reader, args=(s,)) for s in range(3)]
    for t in threads:
        t.start()
    started = time.time()
    for start in range(500, 2000, 100):
        col.upsert(range(start, start + 100), data[start:start + 100])
    col.optimize(wait=True)
    stop.set()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads)
    assert not errors, errors[0]
    assert searches[0] > 10 and time.time() - started < 30
    assert len(col) == 2000 and col.info()["indexed_points"] == 2000


def test_long_calls_release_the_gil(db):
    col = db.create_collection("g", dim=32, metric="l2", seal_threshold=100_000, max_degree=32, build_list=64)
    col.upsert(range(3000), clustered(3000, 32, 13))
    ticks, stop = [0], threading.Event()

    def ticker():
        while not stop.is_set():
            ticks[0] += 1
            time.sleep(0.001)

    t = threading.Thread(target=ticker)
    t.start()
    time.sleep(0.01)
    before, started = ticks[0], time.time()
    col.optimize(wait=True)
    elapsed, during = time.time() - started, ticks[0] - before
    stop.set()
    t.join()
    # Holding the GIL for the whole seal would leave the ticker one or two ticks.
    assert elapsed < 0.05 or during >= 10, (elapsed, during)
    assert col.info()["indexed_points"] == 3000


def load(name, column="emb"):
    pq = pytest.importorskip("pyarrow.parquet")
    col = pq.read_table(SAMPLE / f"{name}.parquet").column(column).combine_chunks()
    return np.asarray(col.flatten()).reshape(len(col), -1)


def test_wordnet_sample_in_a_collection(db):
    if not SAMPLE.exists():
        pytest.skip("bundled sample missing")
    train, test = load("train"), load("test")[:50]
    n = len(train)
    col = db.create_collection("wordnet", dim=train.shape[1], metric="cosine", max_degree=32, build_list=64)
    col.upsert(np.arange(n), train, [{"row": i, "even": i % 2 == 0} for i in range(n)])
    col.create_payload_index("row", "integer")
    col.optimize(wait=True)
    assert col.info()["indexed_points"] == n == 5000
    truth = exact_ids(train, range(n), test, 10, "cosine")
    got = [[h["id"] for h in row] for row in col.search_batch(test, k=10, search_list=64)]
    assert recall(got, truth) >= 0.9
    evens = list(range(0, n, 2))
    truth_e = exact_ids(train[evens], evens, test, 10, "cosine")
    hits = col.search_batch(test, k=10, filter={"must": [{"key": "even", "match": {"value": True}}]})
    assert all(h["id"] % 2 == 0 and h["payload"] == {"row": h["id"], "even": True} for row in hits for h in row)
    assert recall([[h["id"] for h in row] for row in hits], truth_e) >= 0.9
    assert col.count({"must": [{"key": "row", "range": {"gte": 100, "lt": 200}}]}) == 100


def test_build_memory_bounds_seals_and_bad_budgets_are_refused(tmp_path):
    with diskvec.open(tmp_path / "db", build_memory="1GiB") as db:
        col = db.create_collection("b", dim=16, metric="l2", seal_threshold=500, build_memory="64MiB")
        assert col.info()["config"]["build_memory"] == str(64 << 20)
        data = clustered(1000, 16, 3)
        col.upsert(range(1000), data)
        col.optimize(wait=True)
        last = col.info()["last_task"]
        assert last["kind"] in ("seal", "merge") and last["points"] >= 500, last
        assert 0 < last["estimated_peak"] <= last["memory_budget"] <= 64 << 20, last
        assert last["shards"] >= 1
        # A share of a seal's raw vectors (32 KB here) is below what any build works in.
        with pytest.raises(ValueError, match="at least"):
            db.create_collection("share", dim=16, build_memory="50%", seal_threshold=500)
        with pytest.raises(ValueError, match="at least"):
            db.create_collection("tiny", dim=16, build_memory=1 << 20)
        with pytest.raises(ValueError, match="memory budget"):
            db.create_collection("bad", dim=16, build_memory="lots")
        with pytest.raises(ValueError, match="at least one byte"):
            db.create_collection("neg", dim=16, build_memory=-5)
        assert db.collections() == ["b"]
    with pytest.raises(ValueError, match="bytes or auto"):
        diskvec.open(tmp_path / "db2", build_memory="25%")


def test_pq_codes_compact_holds_a_quarter_of_the_code_bytes(tmp_path):
    data = clustered(2000, 32, 6)
    with diskvec.open(tmp_path / "db", search_memory=0, pq_codes="full") as db:
        col = db.create_collection("s", dim=32, metric="l2", seal_threshold=2000, pq_bytes=16)
        col.upsert(range(2000), data)
        col.optimize(wait=True)
        m = col.info()["search_memory"]
        assert (m["code_bytes"], m["compact_code_segments"]) == (2000 * 16, 0), m
        full = [[h["id"] for h in row] for row in col.search_batch(data[:20], k=5)]
    with diskvec.open(tmp_path / "db", search_memory=0, pq_codes="compact") as db:
        col = db.collection("s")
        m = col.info()["search_memory"]
        assert (m["code_bytes"], m["compact_code_segments"]) == (2000 * 4, 1), m
        compact = [[h["id"] for h in row] for row in col.search_batch(data[:20], k=5)]
        kept = sum(len(set(a) & set(b)) for a, b in zip(full, compact))
        assert kept >= 0.9 * 5 * 20, kept
    with pytest.raises(ValueError, match="auto, full or compact"):
        diskvec.open(tmp_path / "db", pq_codes="tiny")
    with pytest.raises(TypeError, match="pq_codes"):
        diskvec.open(tmp_path / "db", pq_codes=4)


def test_search_memory_sets_what_the_node_caches_hold(tmp_path):
    data = clustered(2000, 16, 4)
    with diskvec.open(tmp_path / "db", search_memory=0) as db:
        col = db.create_collection("s", dim=16, metric="l2", seal_threshold=2000)
        col.upsert(range(2000), data)
        col.optimize(wait=True)
        m = col.info()["search_memory"]
        assert (m["setting"], m["cached_nodes"], m["nodes"]) == ("shared", 0, 2000), m
        before = [[h["id"] for h in row] for row in col.search_batch(data[:20], k=5)]
        assert col.info()["search_memory"]["reads_per_search"] > 0
        own = db.create_collection("own", dim=16, metric="l2", search_memory="25%")
        assert own.info()["search_memory"]["setting"] == "25%"
        with pytest.raises(ValueError, match="search_memory"):
            db.create_collection("bad", dim=16, search_memory="lots")
        with pytest.raises(ValueError, match="search_memory must be at least 0"):
            db.create_collection("neg", dim=16, search_memory=-1)
    # Reopened with the automatic budget (plenty here): every node held, nothing read.
    with diskvec.open(tmp_path / "db") as db:
        col = db.collection("s")
        m = col.info()["search_memory"]
        assert m["cached_nodes"] == 2000 and m["node_share"] == 1.0, m
        after = [[h["id"] for h in row] for row in col.search_batch(data[:20], k=5)]
        # A cached node is expanded at once, a read one when its read lands: the walk's order
        # (and now and then a last result) depends on what is held.
        kept = sum(len(set(a) & set(b)) for a, b in zip(after, before))
        assert kept >= 0.95 * 5 * 20, kept
        m = col.info()["search_memory"]
        assert m["reads_per_search"] == 0 and m["cache_hit_rate"] == 1.0, m
    with pytest.raises(ValueError, match="bytes or auto"):
        diskvec.open(tmp_path / "db2", search_memory="25%")
