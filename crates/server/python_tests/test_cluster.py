"""Scale-out end to end: three `diskvec serve --cluster` nodes over a 3-member etcd and a
3-server NATS JetStream cluster, all processes on free loopback ports, driven through
qdrant-client and the REST API (docs/design-scale-out.md)."""
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from qdrant_client import QdrantClient, models

ROOT = Path(__file__).resolve().parents[3]
BIN = Path(os.environ.get("DISKVEC_BIN", ROOT / "target" / "release" / "diskvec"))
HOST = "127.0.0.1"
NODES = 3
DIM = 8


# ---- small helpers -------------------------------------------------------------------------

def free_port():
    # Another process may take it between close and use; on a CI runner that is rare enough.
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def need(name):
    # Debian puts nats-server in /usr/sbin, which a non-root PATH may lack.
    path = shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")
    if path is None:
        pytest.skip(f"{name} is not installed (Debian: apt-get install etcd-server nats-server)")
    return path


class GaveUp(Exception):
    """Raised inside an `eventually` check when waiting longer cannot help (a process exited)."""


def eventually(check, timeout, interval=0.25):
    """check() until it stops raising; past the deadline its last error is the test's."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return check()
        except GaveUp:
            raise
        except Exception:
            if time.monotonic() > deadline:
                raise
        time.sleep(interval)


def alive(proc, what, log):
    if proc.poll() is not None:
        raise GaveUp(f"{what} exited with {proc.returncode}:\n{log_tail(log)}")


def http_json(url, body=None, timeout=10):
    req = urllib.request.Request(url, data=None if body is None else json.dumps(body).encode(),
                                 headers={"content-type": "application/json"},
                                 method="GET" if body is None else "POST")
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def stop(procs, sig=signal.SIGTERM):
    """`sig`, then SIGKILL whatever is still running 10 s later."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(sig)
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def log_tail(path, lines=30):
    return "".join(Path(path).read_text(errors="replace").splitlines(True)[-lines:])


# ---- etcd ----------------------------------------------------------------------------------

@pytest.fixture()
def etcd(tmp_path):
    """Client ports of a 3-member etcd cluster, every member healthy."""
    exe = need("etcd")
    peers = [free_port() for _ in range(3)]
    clients = [free_port() for _ in range(3)]
    initial = ",".join(f"e{i}=http://{HOST}:{p}" for i, p in enumerate(peers))
    procs = []
    try:
        for i in range(3):
            log = tmp_path / f"etcd{i}.log"
            procs.append(subprocess.Popen(
                [exe, "--name", f"e{i}", "--data-dir", str(tmp_path / f"etcd{i}"),
                 "--listen-peer-urls", f"http://{HOST}:{peers[i]}",
                 "--initial-advertise-peer-urls", f"http://{HOST}:{peers[i]}",
                 "--listen-client-urls", f"http://{HOST}:{clients[i]}",
                 "--advertise-client-urls", f"http://{HOST}:{clients[i]}",
                 "--initial-cluster", initial, "--initial-cluster-state", "new",
                 "--initial-cluster-token", f"diskvec-test-{os.getpid()}-{peers[0]}"],
                stdout=subprocess.DEVNULL, stderr=open(log, "w")))

        def healthy():
            for i, p in enumerate(procs):
                alive(p, f"etcd {i}", tmp_path / f"etcd{i}.log")
            for port in clients:
                health = http_json(f"http://{HOST}:{port}/health", timeout=2)
                assert health.get("health") == "true", (port, health)
        eventually(healthy, 30)
        yield clients
    finally:
        # Its data is thrown away; SIGTERM costs 7 s while the members hand leadership around.
        stop(procs, signal.SIGKILL)


# ---- NATS JetStream ------------------------------------------------------------------------

def nats_request(port, subject, payload=b"", timeout=3):
    """One request-reply over NATS's text protocol (the test venv has no NATS client)."""
    with socket.create_connection((HOST, port), timeout=timeout) as s:
        f = s.makefile("rb")
        assert f.readline().startswith(b"INFO ")
        s.sendall(b'CONNECT {"verbose":false,"pedantic":false}\r\nSUB _INBOX.test 1\r\n'
                  + f"PUB {subject} _INBOX.test {len(payload)}\r\n".encode() + payload + b"\r\n")
        while True:
            line = f.readline()
            if line.startswith(b"PING"):
                s.sendall(b"PONG\r\n")
            elif line.startswith(b"MSG "):
                size = int(line.split()[-1])
                return json.loads(f.read(size + 2)[:size])
            else:
                raise RuntimeError(f"nats: {line!r}")


def jetstream_takes_r3_streams(port):
    """Create and delete a 3-replica stream: what the nodes do first, so it is the readiness test."""
    name = f"ready_{port}"
    config = {"name": name, "subjects": [f"{name}.>"], "num_replicas": 3, "storage": "file"}
    created = nats_request(port, f"$JS.API.STREAM.CREATE.{name}", json.dumps(config).encode())
    assert "error" not in created, created
    assert created["config"]["num_replicas"] == 3 and len(created["cluster"]["replicas"]) == 2, created
    deleted = nats_request(port, f"$JS.API.STREAM.DELETE.{name}")
    assert deleted.get("success"), deleted
    return created


@pytest.fixture()
def nats(tmp_path):
    """Client ports of a 3-server NATS cluster whose JetStream takes 3-replica streams."""
    exe = need("nats-server")
    clients = [free_port() for _ in range(3)]
    routes = [free_port() for _ in range(3)]
    monitors = [free_port() for _ in range(3)]
    procs = []
    try:
        for i in range(3):
            others = ", ".join(f"nats-route://{HOST}:{r}" for j, r in enumerate(routes) if j != i)
            conf = tmp_path / f"nats{i}.conf"
            conf.write_text(
                f"server_name: n{i}\nlisten: {HOST}:{clients[i]}\nhttp: {HOST}:{monitors[i]}\n"
                f"jetstream {{ store_dir: \"{tmp_path / f'nats{i}'}\" }}\n"
                f"cluster {{ name: diskvec, listen: {HOST}:{routes[i]}, routes: [{others}] }}\n")
            procs.append(subprocess.Popen([exe, "-c", str(conf)], stdout=subprocess.DEVNULL,
                                          stderr=open(tmp_path / f"nats{i}.log", "w")))

        def ready():
            for i, p in enumerate(procs):
                alive(p, f"nats-server {i}", tmp_path / f"nats{i}.log")
            for port in monitors:
                meta = http_json(f"http://{HOST}:{port}/jsz", timeout=2).get("meta_cluster", {})
                assert meta.get("leader") and meta.get("cluster_size") == 3, meta
            jetstream_takes_r3_streams(clients[0])
        eventually(ready, 30)
        yield clients
    finally:
        stop(procs, signal.SIGKILL)  # its data is thrown away too


# ---- diskvec nodes -------------------------------------------------------------------------

class Cluster:
    """`diskvec serve --cluster` nodes 0..n-1, each with its own database directory."""

    def __init__(self, work, etcd_ports, nats_ports, n=NODES):
        self.work = work
        self.flags = ["--cluster", "etcd://" + ",".join(f"{HOST}:{p}" for p in etcd_ports),
                      "--log", ",".join(f"nats://{HOST}:{p}" for p in nats_ports)]
        self.procs = [None] * n
        self.ports = [None] * n
        self.logs = [None] * n
        self.starts = [0] * n

    def _spawn(self, k):
        # One log per incarnation: a restart must not find its predecessor's "listening" line.
        self.logs[k] = self.work / f"node{k}.{self.starts[k]}.log"
        self.starts[k] += 1
        self.procs[k] = subprocess.Popen(
            [str(BIN), "serve", "--db", str(self.work / f"node{k}"), "--port", "0",
             *self.flags, "--node-id", f"node{k}"],
            stdout=subprocess.DEVNULL, stderr=open(self.logs[k], "w"))

    def _wait_listening(self, k):
        def listening():
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", self.logs[k].read_text(errors="replace"))
            alive(self.procs[k], f"node {k}", self.logs[k])
            assert m, f"node {k} did not print 'listening on' within 30 s:\n{log_tail(self.logs[k])}"
            self.ports[k] = int(m.group(1))
        eventually(listening, 30, interval=0.05)

    def start_all(self):
        for k in range(len(self.procs)):
            self._spawn(k)
        for k in range(len(self.procs)):
            self._wait_listening(k)

    def node_url(self, k):
        return f"http://{HOST}:{self.ports[k]}"

    def client(self, k, timeout=30):
        # The version check runs on a thread of its own that can outlive a killed node.
        return QdrantClient(url=self.node_url(k), timeout=timeout, check_compatibility=False)

    def get(self, k, path, body=None):
        return http_json(self.node_url(k) + path, body)["result"]

    def kill(self, k):
        self.procs[k].kill()
        self.procs[k].wait()

    def restart(self, k):
        """Same database and node id; the port may change (the node re-registers)."""
        self._spawn(k)
        self._wait_listening(k)

    def stop_all(self):
        stop([p for p in self.procs if p is not None])


@pytest.fixture()
def cluster(tmp_path, etcd, nats):
    c = Cluster(tmp_path, etcd, nats)
    print(f"etcd, nats and node logs: {tmp_path}")  # shown when the test fails
    try:
        c.start_all()
        # Every node registered and seen by every other before a test places shards.
        wait_members(c, list(range(NODES)), 15)
        yield c
    finally:
        c.stop_all()


# ---- cluster views -------------------------------------------------------------------------

def members(cluster, k):
    """{peer id: uri without trailing slash} as node k's GET /cluster lists them."""
    info = cluster.get(k, "/cluster")
    assert info["status"] == "enabled", info
    assert str(info["peer_id"]) in info["peers"], info
    return {int(p): v["uri"].rstrip("/") for p, v in info["peers"].items()}


def wait_members(cluster, nodes, timeout):
    """Until every node in `nodes` lists exactly those nodes (by their current URLs)."""
    want = {cluster.node_url(k) for k in nodes}

    def agree():
        views = {k: members(cluster, k) for k in nodes}
        for k, view in views.items():
            assert set(view.values()) == want and len(view) == len(want), (k, view, want)
        return views
    return eventually(agree, timeout)


def placement(cluster, k, name):
    """{shard: {peer id: state}} as node k's GET /collections/{name}/cluster describes it."""
    info = cluster.get(k, f"/collections/{name}/cluster")
    shards = {}
    for s in info["local_shards"]:
        shards.setdefault(s["shard_id"], {})[info["peer_id"]] = s["state"]
    for s in info["remote_shards"]:
        shards.setdefault(s["shard_id"], {})[s["peer_id"]] = s["state"]
    return info, shards


def create_and_wait(cluster, name, shards=3, replicas=2, write_consistency=1):
    cluster.client(0).create_collection(
        name, vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE),
        shard_number=shards, replication_factor=replicas, write_consistency_factor=write_consistency)

    # Other nodes learn of it through etcd: give them a bounded moment, as Qdrant's own
    # consensus tests wait for a collection to be active on every peer.
    def active_everywhere():
        views = []
        for k in range(NODES):
            info, view = placement(cluster, k, name)
            assert info["shard_count"] == shards and sorted(view) == list(range(shards)), info
            for s, held in view.items():
                assert len(held) == replicas and set(held.values()) == {"Active"}, (k, s, held)
            views.append(view)
        assert all(v == views[0] for v in views), views
    eventually(active_everywhere, 30)


def read_replicas(cluster, name):
    """{shard: {node: {id: (payload, vector)}}}: every replica read directly as `name@shard`."""
    out = {}
    for k in range(NODES):
        info, _ = placement(cluster, k, name)
        for s in info["local_shards"]:
            points, offset = {}, None
            while True:
                body = {"limit": 1000, "with_payload": True, "with_vector": True}
                if offset is not None:
                    body["offset"] = offset
                page = cluster.get(k, f"/collections/{name}@{s['shard_id']}/points/scroll", body)
                for p in page["points"]:
                    points[p["id"]] = (p["payload"], p["vector"])
                offset = page.get("next_page_offset")
                if offset is None:
                    break
            out.setdefault(s["shard_id"], {})[k] = points
    return out


def check_replicas(reps, shards=3, replicas=2):
    """Replicas of a shard agree (ids, payloads, vectors), shards are disjoint; returns {id: shard}."""
    assert sorted(reps) == list(range(shards)), sorted(reps)
    owner = {}
    for s, held in reps.items():
        assert len(held) == replicas, (s, sorted(held))
        first = next(iter(held.values()))
        for k, other in held.items():
            assert set(other) == set(first), (s, k, len(other), len(first), sorted(set(other) ^ set(first))[:10])
            assert other == first, (s, k, "same ids, different payloads or vectors")
        for i in first:
            assert i not in owner, (i, "in shards", owner[i], s)
            owner[i] = s
    return owner


def normalized(x):
    x = np.asarray(x, dtype=np.float32)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


# ---- tests ---------------------------------------------------------------------------------

def test_cluster_membership(cluster):
    views = wait_members(cluster, range(NODES), 15)
    ids = {k: cluster.get(k, "/cluster")["peer_id"] for k in range(NODES)}
    assert len(set(ids.values())) == NODES, ids
    for k in range(NODES):
        assert views[k][ids[k]] == cluster.node_url(k), (k, views[k])

    cluster.kill(2)
    # Its etcd lease (TTL 5 s) lapses; the survivors stop listing it.
    wait_members(cluster, [0, 1], 10)

    cluster.restart(2)
    views = wait_members(cluster, range(NODES), 15)
    assert len(set(views[0])) == NODES


def test_sharded_collection_answers_from_every_node(cluster):
    # Every replica acknowledges each write (2 of 2), so a read through any node right after
    # an acknowledged write must see it; with 1 of 2 a lagging replica may answer.
    create_and_wait(cluster, "docs", write_consistency=2)
    clients = [cluster.client(k) for k in range(NODES)]
    rng = np.random.default_rng(25)
    vectors = normalized(rng.standard_normal((600, DIM)))
    for lo in range(0, 600, 100):
        r = clients[1].upsert("docs", wait=True, points=[
            models.PointStruct(id=i, vector=vectors[i].tolist(), payload={"group": i % 5, "n": i})
            for i in range(lo, lo + 100)])
        assert r.status == models.UpdateStatus.COMPLETED

    group2 = models.Filter(must=[models.FieldCondition(key="group", match=models.MatchValue(value=2))])
    queries = normalized(rng.standard_normal((20, DIM)))
    exact = [set(np.argsort(-(vectors @ q))[:10].tolist()) for q in queries]
    for k, client in enumerate(clients):
        assert client.collection_exists("docs")
        assert client.get_collection("docs").points_count == 600, k
        assert client.count("docs", exact=True).count == 600, k
        assert client.count("docs", count_filter=group2, exact=True).count == 120, k
        found = 0
        for q, want in zip(queries, exact):
            hits = client.query_points("docs", query=q.tolist(), limit=10).points
            assert len(hits) == 10, (k, hits)
            found += len({h.id for h in hits} & want)
        assert found / (10 * len(queries)) >= 0.95, (k, found)
        got = client.retrieve("docs", ids=[0, 5, 599], with_payload=True, with_vectors=True)
        assert sorted(p.id for p in got) == [0, 5, 599], (k, got)
        for p in got:
            assert p.payload == {"group": p.id % 5, "n": p.id}, (k, p)
            np.testing.assert_allclose(p.vector, vectors[p.id], atol=1e-5)

    seen, offset = [], None
    for _ in range(20):  # 600 / 128 pages, with room; a loop that never ends is a failure
        page, offset = clients[2].scroll("docs", limit=128, offset=offset)
        seen += [p.id for p in page]
        if offset is None:
            break
    assert seen == list(range(600)), (len(seen), offset)

    clients[2].delete("docs", points_selector=models.PointIdsList(points=list(range(100))), wait=True)
    clients[0].set_payload("docs", payload={"tag": "x"}, points=list(range(100, 110)), wait=True)
    for k, client in enumerate(clients):
        assert client.count("docs", exact=True).count == 500, k
        assert client.get_collection("docs").points_count == 500, k
        assert client.retrieve("docs", ids=[0, 50, 99]) == [], k
        got = {p.id: p.payload for p in client.retrieve("docs", ids=[100, 109, 110])}
        assert got == {100: {"group": 0, "n": 100, "tag": "x"}, 109: {"group": 4, "n": 109, "tag": "x"},
                       110: {"group": 0, "n": 110}}, (k, got)

    reps = read_replicas(cluster, "docs")
    owner = check_replicas(reps)
    assert sorted(owner) == list(range(100, 600))
    for s, held in reps.items():
        for i, (payload, vector) in next(iter(held.values())).items():
            want = {"group": i % 5, "n": i, **({"tag": "x"} if i < 110 else {})}
            assert payload == want, (s, i, payload)
            np.testing.assert_allclose(vector, vectors[i], atol=1e-5)


def vectors_of(ids):
    """A fixed vector per point id, so any id can be checked without remembering what was sent."""
    i = np.asarray(ids, dtype=np.float64)[:, None]
    return normalized(np.sin(i * np.arange(1, DIM + 1) * 0.618 + np.arange(DIM)))


class Load:
    """A writer and a reader thread, each request to a node currently marked up."""

    def __init__(self, cluster, name, round_, next_id):
        self.cluster, self.name, self.round = cluster, name, round_
        self.next_id = next_id
        self.lock = threading.Lock()
        self.up = set(range(NODES))
        self.downs = [0] * NODES  # a read is excused only if its node went down during it
        self.acked, self.maybe = {}, set()
        self.write_errors = self.reads = self.excused = 0
        self.failed_reads = []
        self.crashes = []
        self.stopping = threading.Event()
        # Daemons: a thread stuck past its join timeout must not keep pytest from exiting.
        self.threads = [threading.Thread(target=self._guard, args=(f,), daemon=True)
                        for f in (self._write, self._read)]

    def mark_down(self, k):
        with self.lock:
            self.up.discard(k)
            self.downs[k] += 1

    def mark_up(self, k):
        with self.lock:
            self.up.add(k)

    def _pick(self, rnd):
        with self.lock:
            k = rnd.choice(sorted(self.up))
            return k, self.downs[k], self.cluster.ports[k]

    def _client(self, cache, port):
        if port not in cache:
            cache[port] = QdrantClient(url=f"http://{HOST}:{port}", timeout=10, check_compatibility=False)
        return cache[port]

    def _write(self):
        rnd, clients = random.Random(self.round), {}
        while not self.stopping.is_set():
            ids = list(range(self.next_id, self.next_id + 20))
            self.next_id += 20
            k, _, port = self._pick(rnd)
            payloads = {i: {"n": i, "round": self.round} for i in ids}
            try:
                self._client(clients, port).upsert(self.name, wait=True, points=[
                    models.PointStruct(id=i, vector=v.tolist(), payload=payloads[i])
                    for i, v in zip(ids, vectors_of(ids))])
                self.acked.update(payloads)
            except Exception:
                self.maybe.update(ids)
                self.write_errors += 1
            time.sleep(0.02)  # at most 50 batches a second: the checks after a round stay quick

    def _read(self):
        rnd, clients = random.Random(-self.round), {}
        queries = vectors_of(range(-1, -101, -1))
        while not self.stopping.is_set():
            k, downs, port = self._pick(rnd)
            try:
                client = self._client(clients, port)
                if self.reads % 2:
                    client.count(self.name, exact=True)
                else:
                    client.query_points(self.name, query=queries[self.reads % 100].tolist(), limit=5)
            except Exception as e:
                with self.lock:
                    if k in self.up and self.downs[k] == downs:
                        self.failed_reads.append((k, repr(e)[:300]))
                    else:
                        self.excused += 1
            self.reads += 1
            time.sleep(0.01)

    def _guard(self, loop):
        try:
            loop()
        except BaseException as e:  # a bug in the loop itself, not a failed request
            self.crashes.append(repr(e))

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, exc_type, *_):
        self.stopping.set()
        for t in self.threads:
            t.join(timeout=30)
        if exc_type is None:  # else the test's own error is the one to see
            assert not any(t.is_alive() for t in self.threads), "load threads did not stop in 30 s"
            assert not self.crashes, self.crashes


def test_node_killed_under_load_loses_nothing(cluster):
    name = "load"
    create_and_wait(cluster, name, write_consistency=1)
    started = time.monotonic()
    acked, maybe = {}, set()
    next_id, kills, failed_reads, reads, write_errors = 0, 0, [], 0, 0
    rounds = 3
    for round_ in range(rounds):
        victim = round_ % NODES
        with Load(cluster, name, round_, next_id) as load:
            time.sleep(2)
            load.mark_down(victim)  # before the kill: no new request is sent to it from here
            cluster.kill(victim)
            kills += 1
            time.sleep(3)
            cluster.restart(victim)
            wait_members(cluster, range(NODES), 20)
            load.mark_up(victim)
            time.sleep(1)
        next_id = load.next_id
        acked.update(load.acked)
        maybe |= load.maybe
        failed_reads += load.failed_reads
        reads += load.reads
        write_errors += load.write_errors
        assert load.acked, f"round {round_}: no write was acknowledged ({load.write_errors} failed)"

        # Writes stopped: the replicas converge, holding every acknowledged point and nothing
        # that was never sent.
        def converged():
            for k in range(NODES):  # the restarted node's replicas caught up and are routable again
                _, view = placement(cluster, k, name)
                assert all(set(held.values()) == {"Active"} for held in view.values()), (k, view)
            owner = check_replicas(read_replicas(cluster, name))
            missing = acked.keys() - owner.keys()
            assert not missing, (len(missing), sorted(missing)[:10])
            return owner
        try:
            owner = eventually(converged, 30, interval=0.5)
        except AssertionError as e:
            raise AssertionError(f"round {round_}: replicas did not converge in 30 s: {e}") from None
        assert owner.keys() <= acked.keys() | maybe, sorted(owner.keys() - acked.keys() - maybe)[:10]
        for s, held in read_replicas(cluster, name).items():
            for points in held.values():
                for i, (payload, vector) in points.items():
                    assert payload == {"n": i, "round": payload.get("round")}, (s, i, payload)
                    if i in acked:
                        assert payload == acked[i], (s, i, payload, acked[i])
                if points:
                    np.testing.assert_allclose([v for _, v in points.values()], vectors_of(list(points)), atol=1e-5)

        # Every acknowledged point so far, through every node, exactly as written.
        ids = sorted(acked)
        for k in range(NODES):
            client = cluster.client(k)
            for lo in range(0, len(ids), 500):
                chunk = ids[lo:lo + 500]
                got = {p.id: p.payload for p in client.retrieve(name, ids=chunk)}
                lost = [i for i in chunk if got.get(i) != acked[i]]
                assert not lost, (f"round {round_}, node {k}: {len(lost)} acknowledged points missing or wrong",
                                  lost[:10])
        print(f"round {round_}: killed node {victim}; {len(load.acked)} acknowledged, "
              f"{len(load.maybe)} unacknowledged ids, {load.reads} reads, {len(load.failed_reads)} failed, "
              f"{load.excused} excused (node killed mid-request)")

    print(f"fault loop: {rounds} rounds, {kills} kills, {len(acked)} acknowledged ids checked, 0 lost, "
          f"{len(maybe)} maybe ({write_errors} failed writes), {reads} reads, {len(failed_reads)} failed "
          f"reads, {time.monotonic() - started:.0f} s")
    assert not failed_reads, failed_reads[:10]
