"""qdrant-client (current PyPI release) against `diskvec serve` on a free loopback port."""
import importlib.metadata
import json
import socket
import os
import re
import subprocess
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
from qdrant_client import QdrantClient, models
from qdrant_client.http.exceptions import UnexpectedResponse

ROOT = Path(__file__).resolve().parents[3]
BIN = Path(os.environ.get("DISKVEC_BIN", ROOT / "target" / "release" / "diskvec"))


def start_server(db, *extra):
    proc = subprocess.Popen([str(BIN), "serve", "--db", str(db), "--port", "0", *extra],
                            stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 30
    lines = []
    while time.time() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line)
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        if m:
            return proc, int(m.group(1))
    proc.kill()
    raise RuntimeError("server did not start: " + "".join(lines))


@pytest.fixture()
def server(tmp_path):
    proc, port = start_server(tmp_path / "db")
    yield port
    proc.terminate()
    assert proc.wait(timeout=30) == 0


def client_of(port, **kw):
    # The client checks the server's version on a thread of its own, which can outlive a test
    # that kills the server; the version is checked in the first test instead.
    return QdrantClient(url=f"http://127.0.0.1:{port}", timeout=30, check_compatibility=False, **kw)


def vec(i):
    return [1.0, float(i), float(i % 3), 0.5]


def test_the_common_path_through_qdrant_client(server):
    # qdrant-client warns unless the major versions match and the minors differ by at most 1.
    root = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{server}/", timeout=30).read())
    server_v = [int(x) for x in root["version"].split(".")[:2]]
    client_v = [int(x) for x in importlib.metadata.version("qdrant-client").split(".")[:2]]
    assert server_v[0] == client_v[0] and abs(server_v[1] - client_v[1]) <= 1, (server_v, client_v)
    client = client_of(server)
    client.get_collections()
    assert not client.collection_exists("docs")
    client.create_collection("docs", vectors_config=models.VectorParams(size=4, distance=models.Distance.COSINE))
    assert client.collection_exists("docs")
    with pytest.raises(UnexpectedResponse) as e:
        client.create_collection("docs", vectors_config=models.VectorParams(size=4, distance=models.Distance.COSINE))
    assert e.value.status_code == 409

    uid = str(uuid.uuid4())
    points = [models.PointStruct(id=i, vector=vec(i), payload={"group": f"g{i % 3}", "n": i}) for i in range(40)]
    points.append(models.PointStruct(id=uid, vector=vec(41), payload={"group": "u"}))
    r = client.upsert("docs", points=points, wait=True)
    assert r.status == models.UpdateStatus.COMPLETED
    client.upsert("docs", points=models.Batch(ids=[100, 101], vectors=[vec(100), vec(101)],
                                              payloads=[{"group": "b"}, {"group": "b"}]), wait=False)
    # wait=false, then a read: the write is there.
    assert [p.id for p in client.retrieve("docs", ids=[100, 101])] == [100, 101]

    info = client.get_collection("docs")
    assert info.points_count == 43
    assert info.config.params.vectors.size == 4
    assert info.status in (models.CollectionStatus.GREEN, models.CollectionStatus.YELLOW)

    got = client.retrieve("docs", ids=[1, uid], with_vectors=True)
    assert {str(p.id) for p in got} == {"1", uid}
    assert all(len(p.vector) == 4 for p in got)

    flt = models.Filter(must=[models.FieldCondition(key="group", match=models.MatchValue(value="g2"))])
    hits = client.query_points("docs", query=vec(5), limit=3, query_filter=flt, with_payload=True,
                               search_params=models.SearchParams(hnsw_ef=64)).points
    assert hits[0].id == 5 and all(h.payload["group"] == "g2" for h in hits)
    hits = client.search("docs", query_vector=vec(7), limit=2) if hasattr(client, "search") else \
        client.query_points("docs", query=vec(7), limit=2).points
    assert hits[0].id == 7
    many = client.query_batch_points("docs", requests=[models.QueryRequest(query=vec(1), limit=1),
                                                       models.QueryRequest(query=vec(4), limit=1)])
    assert [m.points[0].id for m in many] == [1, 4]

    seen, offset = [], None
    while True:
        page, offset = client.scroll("docs", limit=9, offset=offset)
        seen += [p.id for p in page]
        if offset is None:
            break
    assert len(seen) == 43
    assert client.count("docs").count == 43
    assert client.count("docs", count_filter=flt).count == 13

    client.set_payload("docs", payload={"tag": "t"}, points=[1, 2])
    client.overwrite_payload("docs", payload={"only": 1}, points=[3])
    client.delete_payload("docs", keys=["tag"], points=[2])
    recs = {p.id: p.payload for p in client.retrieve("docs", ids=[1, 2, 3])}
    assert recs[1]["tag"] == "t" and "tag" not in recs[2] and recs[3] == {"only": 1}

    client.create_payload_index("docs", field_name="group", field_schema=models.PayloadSchemaType.KEYWORD)
    assert "group" in client.get_collection("docs").payload_schema
    client.delete_payload_index("docs", field_name="group")

    client.delete("docs", points_selector=models.PointIdsList(points=[0, 1]))
    client.delete("docs", points_selector=models.FilterSelector(filter=flt))
    assert client.count("docs").count == 43 - 2 - 13

    with pytest.raises(UnexpectedResponse) as e:
        client.upsert("docs", points=[models.PointStruct(id=7, vector=[1.0, 2.0])])
    assert e.value.status_code == 400
    with pytest.raises(UnexpectedResponse) as e:
        client.get_collection("missing")
    assert e.value.status_code == 404
    assert client.delete_collection("docs")
    assert not client.collection_exists("docs")


def test_acknowledged_writes_survive_sigkill(tmp_path):
    db = tmp_path / "db"
    proc, port = start_server(db)
    client = client_of(port)
    client.create_collection("c", vectors_config=models.VectorParams(size=4, distance=models.Distance.EUCLID))
    for lo in range(0, 200, 50):
        client.upsert("c", points=[models.PointStruct(id=i, vector=vec(i), payload={"i": i}) for i in range(lo, lo + 50)])
    proc.kill()
    proc.wait(timeout=30)
    proc, port = start_server(db)
    try:
        client = client_of(port)
        assert client.count("c").count == 200
        p = client.retrieve("c", ids=[123], with_vectors=True)[0]
        assert p.payload == {"i": 123} and p.vector == vec(123)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_api_key_is_required_when_set(tmp_path):
    proc, port = start_server(tmp_path / "db", "--api-key", "s3cret")
    try:
        with pytest.raises(UnexpectedResponse) as e:
            client_of(port).get_collections()
        assert e.value.status_code == 401
        ok = client_of(port, api_key="s3cret", https=False)
        assert ok.get_collections().collections == []
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def raw(port, method, path, body=b"", headers=None):
    """(status, body) of one HTTP request, errors included."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body or None, method=method,
                                 headers={"content-type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_the_rest_of_the_api_and_its_errors(server):
    client = client_of(server)
    client.create_collection("c", vectors_config=models.VectorParams(size=4, distance=models.Distance.DOT))
    client.upsert("c", points=[models.PointStruct(id=i, vector=vec(i), payload={"i": i, "odd": i % 2 == 1})
                               for i in range(60)])
    assert client.update_collection("c", optimizers_config=models.OptimizersConfigDiff(indexing_threshold=0))

    # Search pages: offset skips the best hits, in order.
    q = vec(30)
    first = [h.id for h in client.query_points("c", query=q, limit=10).points]
    second = [h.id for h in client.query_points("c", query=q, limit=5, offset=5).points]
    assert second == first[5:]
    odd = models.Filter(must=[models.FieldCondition(key="odd", match=models.MatchValue(value=True))])
    assert all(h.id % 2 == 1 for h in client.query_points("c", query=q, limit=8, query_filter=odd).points)
    rng = models.Filter(must=[models.FieldCondition(key="i", range=models.Range(gte=10, lt=20))])
    assert client.count("c", count_filter=rng).count == 10

    client.clear_payload("c", points_selector=models.PointIdsList(points=[4]))
    assert client.retrieve("c", ids=[4])[0].payload == {}

    status, body = raw(server, "POST", "/collections/c/points/search", b'{"vector": [1, 2,')
    assert status == 400 and "error" in json.loads(body)["status"], body
    # A body declared larger than allowed is refused before it is read (the answer comes
    # first, then the server closes: a client sending it whole would meet a closed socket).
    with socket.create_connection(("127.0.0.1", server), timeout=30) as s:
        s.sendall(b"PUT /collections/c/points HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % (32 * 1024 * 1024 + 1))
        assert s.recv(64).startswith(b"HTTP/1.1 413"), "no 413 for an oversized body"
    status, body = raw(server, "POST", "/collections/c/points/search?timeout=none", b'{"vector": [1,2,3,4]}')
    assert status == 400, body
    status, body = raw(server, "POST", "/collections/nope/points/search", b'{"vector": [1,2,3,4]}')
    assert status == 404 and "doesn't exist" in json.loads(body)["status"]["error"], body

    status, page = raw(server, "GET", "/metrics")
    page = page.decode()
    assert status == 200
    assert 'diskvec_collection_points{collection="c"} 60' in page, page
    assert re.search(r'diskvec_http_requests_total\{method="POST",route="/collections/\{name\}/points/query",'
                     r'status="200"\} [1-9]', page), page
    status, body = raw(server, "GET", "/telemetry")
    telemetry = json.loads(body)["result"]
    assert telemetry["collections"]["collections"][0]["points"] == 60
