"""Scale-out end to end: three `diskvec serve --cluster` nodes over a 3-member etcd and a
3-server NATS JetStream cluster, all processes on free loopback ports, driven through
qdrant-client and the REST API (docs/design-scale-out.md)."""
import base64
import hashlib
import json
import os
import random
import re
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from qdrant_client import QdrantClient, models
from qdrant_client.http.exceptions import UnexpectedResponse

from cluster_helpers import GaveUp, eventually, log_tail, nats_reply, need, normalized

ROOT = Path(__file__).resolve().parents[3]
BIN = Path(os.environ.get("DISKVEC_BIN", ROOT / "target" / "release" / "diskvec"))
HOST = "127.0.0.1"
NODES = 3
DIM = 8
# Nodes started with --shared-storage (every node's directory is on one file system here):
# a replica made on one of them from the other links its sealed segments; to or from node 0
# it is copied, so both ways of seeding run.
SHARED_STORAGE = {1, 2}
# Messages a shard's log keeps below its slowest live replica: few, so that tests trim logs
# and rebuild replicas from snapshots (the default is 100,000).
LOG_RETAIN = 20
# The cluster's secret: through the environment to nodes 0 and 1, through a file to node 2 (a
# command line would show it in `ps`).
SECRET = "the cluster secret of these tests, 48 bytes long"
SECRET_BY_FILE = {2}


# ---- small helpers -------------------------------------------------------------------------

def free_port():
    # Another process may take it between close and use; on a CI runner that is rare enough.
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


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


# ---- etcd and NATS JetStream -----------------------------------------------------------------

class Members:
    """Three processes of an etcd or NATS cluster, each killable and started again on its own
    data directory; a member's log is appended to across its restarts."""

    kind = ""

    def __init__(self, work):
        self.work = work
        self.procs = [None] * 3

    def argv(self, i, first):
        raise NotImplementedError

    def ready(self):
        raise NotImplementedError

    def log(self, i):
        return self.work / f"{self.kind}{i}.log"

    def start(self, i, first=False):
        self.procs[i] = subprocess.Popen(self.argv(i, first), stdout=subprocess.DEVNULL,
                                         stderr=open(self.log(i), "a"))

    def kill(self, i):
        self.procs[i].kill()
        self.procs[i].wait()

    def wait_ready(self, timeout=30):
        def check():
            for i, p in enumerate(self.procs):
                alive(p, f"{self.kind} {i}", self.log(i))
            self.ready()
        eventually(check, timeout)

    def start_all(self):
        for i in range(3):
            self.start(i, first=True)
        self.wait_ready()

    def stop_all(self):
        # Its data is thrown away; SIGTERM costs etcd 7 s while the members hand leadership around.
        stop([p for p in self.procs if p is not None], signal.SIGKILL)


class Etcd(Members):
    """A 3-member etcd cluster; `clients` are the members' client ports."""

    kind = "etcd"

    def __init__(self, work):
        super().__init__(work)
        self.exe = need("etcd")
        self.peers = [free_port() for _ in range(3)]
        self.clients = [free_port() for _ in range(3)]

    def argv(self, i, first):
        initial = ",".join(f"e{j}=http://{HOST}:{p}" for j, p in enumerate(self.peers))
        return [self.exe, "--name", f"e{i}", "--data-dir", str(self.work / f"etcd{i}"),
                "--listen-peer-urls", f"http://{HOST}:{self.peers[i]}",
                "--initial-advertise-peer-urls", f"http://{HOST}:{self.peers[i]}",
                "--listen-client-urls", f"http://{HOST}:{self.clients[i]}",
                "--advertise-client-urls", f"http://{HOST}:{self.clients[i]}",
                "--initial-cluster", initial, "--initial-cluster-state", "new" if first else "existing",
                "--initial-cluster-token", f"diskvec-test-{os.getpid()}-{self.peers[0]}"]

    def ready(self):
        for port in self.clients:
            health = http_json(f"http://{HOST}:{port}/health", timeout=2)
            assert health.get("health") == "true", (port, health)


def nats_request(port, subject, payload=b"", timeout=3):
    """One request-reply over NATS's text protocol (the test venv has no NATS client)."""
    with socket.create_connection((HOST, port), timeout=timeout) as s:
        f = s.makefile("rb")
        assert f.readline().startswith(b"INFO ")
        s.sendall(b'CONNECT {"verbose":false,"pedantic":false}\r\nSUB _INBOX.test 1\r\n'
                  + f"PUB {subject} _INBOX.test {len(payload)}\r\n".encode() + payload + b"\r\n")
        return nats_reply(s, f)


def jetstream_publish(port, subject, payload, headers=None, timeout=3):
    """A publish into a stream over NATS's text protocol, as anyone who reaches NATS can:
    JetStream's acknowledgement."""
    with socket.create_connection((HOST, port), timeout=timeout) as s:
        f = s.makefile("rb")
        assert f.readline().startswith(b"INFO ")
        s.sendall(b'CONNECT {"verbose":false,"pedantic":false,"headers":true}\r\nSUB _INBOX.pub 1\r\n')
        if headers is None:
            s.sendall(f"PUB {subject} _INBOX.pub {len(payload)}\r\n".encode() + payload + b"\r\n")
        else:
            head = ("NATS/1.0\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n").encode()
            s.sendall(f"HPUB {subject} _INBOX.pub {len(head)} {len(head) + len(payload)}\r\n".encode()
                      + head + payload + b"\r\n")
        return nats_reply(s, f)


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


class Nats(Members):
    """A 3-server NATS cluster whose JetStream takes 3-replica streams; `clients` are its ports."""

    kind = "nats"

    def __init__(self, work):
        super().__init__(work)
        self.exe = need("nats-server")
        self.clients = [free_port() for _ in range(3)]
        routes = [free_port() for _ in range(3)]
        self.monitors = [free_port() for _ in range(3)]
        for i in range(3):
            others = ", ".join(f"nats-route://{HOST}:{r}" for j, r in enumerate(routes) if j != i)
            (work / f"nats{i}.conf").write_text(
                f"server_name: n{i}\nlisten: {HOST}:{self.clients[i]}\nhttp: {HOST}:{self.monitors[i]}\n"
                f"jetstream {{ store_dir: \"{work / f'nats{i}'}\" }}\n"
                f"cluster {{ name: diskvec, listen: {HOST}:{routes[i]}, routes: [{others}] }}\n")

    def argv(self, i, first):
        return [self.exe, "-c", str(self.work / f"nats{i}.conf")]

    def ready(self):
        for port in self.monitors:
            meta = http_json(f"http://{HOST}:{port}/jsz", timeout=2).get("meta_cluster", {})
            assert meta.get("leader") and meta.get("cluster_size") == 3, meta
        jetstream_takes_r3_streams(self.clients[0])


# ---- diskvec nodes -------------------------------------------------------------------------

class Cluster:
    """`diskvec serve --cluster` nodes 0..n-1, each with its own database directory, over the
    etcd and NATS clusters it was given."""

    def __init__(self, work, etcd, nats, n=NODES):
        self.work, self.etcd, self.nats = work, etcd, nats
        self.flags = ["--cluster", "etcd://" + ",".join(f"{HOST}:{p}" for p in etcd.clients),
                      "--log", ",".join(f"nats://{HOST}:{p}" for p in nats.clients)]
        self.procs = [None] * n
        self.ports = [None] * n
        self.logs = [None] * n
        self.starts = [0] * n

    def _spawn(self, k):
        # One log per incarnation: a restart must not find its predecessor's "listening" line.
        self.logs[k] = self.work / f"node{k}.{self.starts[k]}.log"
        self.starts[k] += 1
        env = {**os.environ, "RUST_LOG": "warn,diskvec_server::cluster=info"}
        secret = []
        if k in SECRET_BY_FILE:
            (self.work / "secret").write_text(SECRET + "\n")
            secret = ["--cluster-secret-file", str(self.work / "secret")]
        else:
            env["DISKVEC_CLUSTER_SECRET"] = SECRET
        self.procs[k] = subprocess.Popen(
            [str(BIN), "serve", "--db", str(self.work / f"node{k}"), "--port", "0",
             *self.flags, "--node-id", f"node{k}", "--log-retain", str(LOG_RETAIN), *secret,
             *(["--shared-storage"] if k in SHARED_STORAGE else [])],
            stdout=subprocess.DEVNULL, stderr=open(self.logs[k], "w"), env=env)

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

    def heal(self):
        """Every process running again (a failed test may leave one killed or stopped) and
        every node listed by every node: the next test starts from a whole cluster."""
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
        for members in (self.etcd, self.nats):
            dead = [i for i, p in enumerate(members.procs) if p.poll() is not None]
            for i in dead:
                members.start(i)
            if dead:
                members.wait_ready()
        for k, p in enumerate(self.procs):
            if p.poll() is not None:
                self.restart(k)
        wait_members(self, range(NODES), 30)


@pytest.fixture(scope="module")
def whole_cluster(tmp_path_factory):
    """One cluster for the whole file: starting 9 processes costs more than most tests."""
    work = tmp_path_factory.mktemp("cluster")
    etcd, nats = Etcd(work), Nats(work)
    c = Cluster(work, etcd, nats)
    try:
        etcd.start_all()
        nats.start_all()
        c.start_all()
        # Every node registered and seen by every other before a test places shards.
        wait_members(c, list(range(NODES)), 15)
        yield c
    finally:
        c.stop_all()
        nats.stop_all()
        etcd.stop_all()


@pytest.fixture()
def cluster(whole_cluster):
    print(f"etcd, nats and node logs: {whole_cluster.work}")  # shown when the test fails
    yield whole_cluster
    whole_cluster.heal()


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


def create_and_wait(cluster, name, shards=3, replicas=2, write_consistency=1, via=0, dim=DIM):
    cluster.client(via).create_collection(
        name, vectors_config=models.VectorParams(size=dim, distance=models.Distance.COSINE),
        shard_number=shards, replication_factor=replicas, write_consistency_factor=write_consistency)
    wait_active(cluster, name, shards, replicas)


def wait_active(cluster, name, shards=3, replicas=2, timeout=30):
    """Until every node describes the same placement of `name`, every replica active."""
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
        return views[0]
    return eventually(active_everywhere, timeout)


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


def said(e):
    """A failed request in a line: qdrant-client's UnexpectedResponse shows neither by itself."""
    if isinstance(e, UnexpectedResponse):
        return f"HTTP {e.status_code}: {e.content[:300].decode(errors='replace')}"
    return repr(e)[:300]


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
        self.read_times = []  # (started, seconds, node) of every read
        self.write_failures = []  # (when, node, error)
        self.acked_times = []  # (sent, acknowledged, node) of every acknowledged write
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
            sent = time.monotonic()
            try:
                self._client(clients, port).upsert(self.name, wait=True, points=[
                    models.PointStruct(id=i, vector=v.tolist(), payload=payloads[i])
                    for i, v in zip(ids, vectors_of(ids))])
                self.acked.update(payloads)
                self.acked_times.append((sent, time.monotonic(), k))
            except Exception as e:
                self.maybe.update(ids)
                self.write_errors += 1
                self.write_failures.append((time.monotonic(), k, said(e)))
            time.sleep(0.02)  # at most 50 batches a second: the checks after a round stay quick

    def _read(self):
        rnd, clients = random.Random(-self.round), {}
        queries = vectors_of(range(-1, -101, -1))
        while not self.stopping.is_set():
            k, downs, port = self._pick(rnd)
            started = time.monotonic()
            try:
                client = self._client(clients, port)
                if self.reads % 2:
                    client.count(self.name, exact=True)
                else:
                    client.query_points(self.name, query=queries[self.reads % 100].tolist(), limit=5)
                self.read_times.append((started, time.monotonic() - started, k))
            except Exception as e:
                with self.lock:
                    if k in self.up and self.downs[k] == downs:
                        self.failed_reads.append((k, said(e)))
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
        self.started = time.monotonic()
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


# The faults of the loop: each runs under load and returns what it did, in words.

def kill_node(cluster, load, k):
    load.mark_down(k)  # before the kill: no new request is sent to it from here
    cluster.kill(k)
    time.sleep(3)
    cluster.restart(k)
    wait_members(cluster, range(NODES), 20)
    load.mark_up(k)
    return f"killed node {k}"


def hang_node(cluster, load, k):
    """SIGSTOP for longer than the lease TTL (5 s): the others must drop it and answer without it."""
    others = [j for j in range(NODES) if j != k]
    load.mark_down(k)  # the test sends it nothing while it hangs; the other nodes may
    hung = time.monotonic()
    cluster.procs[k].send_signal(signal.SIGSTOP)
    try:
        wait_members(cluster, others, 12)  # its lease lapsed
        gone = time.monotonic() - hung
        time.sleep(max(0.0, hung + 7 - time.monotonic()))
    finally:
        cluster.procs[k].send_signal(signal.SIGCONT)
    resumed = time.monotonic()
    wait_members(cluster, range(NODES), 20)
    back = time.monotonic() - resumed
    load.mark_up(k)
    slowest = max((t for started, t, j in list(load.read_times) if j != k and started >= hung), default=0)
    return (f"hung node {k} for {resumed - hung:.1f} s (others dropped it after {gone:.1f} s, "
            f"listed again {back:.1f} s after SIGCONT; slowest read through a live node "
            f"during and after the hang: {slowest:.2f} s)")


def kill_etcd_and_nats(cluster, load, _):
    """Member 0 of each: every node starts with etcd member 0, and some nodes' NATS connections
    are to server 0, so the nodes must move to the others. Down for 8 s, past the election of
    new leaders for the streams server 0 led (about 6 s here)."""
    killed = time.monotonic()
    cluster.etcd.kill(0)
    cluster.nats.kill(0)
    time.sleep(8)
    cluster.etcd.start(0)
    cluster.nats.start(0)
    cluster.etcd.wait_ready()
    cluster.nats.wait_ready()
    ready = time.monotonic()

    # Writes that failed are only "maybe"; but writes must be acknowledged again once both
    # clusters are whole, or the round would prove nothing about the log. The bound is loose:
    # a replica whose log consumer went through server 0 has been seen to stop applying for
    # 20-30 s, until its ordered consumer misses heartbeats, slowing every write to its shard.
    def resumed():
        assert any(sent >= ready for sent, _, _ in list(load.acked_times)), "no write acknowledged since"
    eventually(resumed, 60)
    first = min(done for sent, done, _ in list(load.acked_times) if sent >= killed) - killed
    return (f"killed etcd member 0 and NATS server 0 for 8 s, restarted on their data, both clusters "
            f"ready {ready - killed:.1f} s after the kill; first write sent after the kill acknowledged "
            f"{first:.1f} s after it")


def test_faults_under_load_lose_nothing(cluster):
    name = "load"
    create_and_wait(cluster, name, write_consistency=1)
    started = time.monotonic()
    acked, maybe = {}, set()
    next_id, failed_reads, reads, write_errors = 0, [], 0, 0
    rounds = [(kill_node, 0), (kill_node, 1), (kill_node, 2), (hang_node, 0), (kill_etcd_and_nats, None)]
    for round_, (fault, victim) in enumerate(rounds):
        with Load(cluster, name, round_, next_id) as load:
            time.sleep(2)
            what = fault(cluster, load, victim)
            time.sleep(1)
        next_id = load.next_id
        acked.update(load.acked)
        maybe |= load.maybe
        failed_reads += [(round_, *f) for f in load.failed_reads]
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
        # Loose, as for writes resuming after the NATS kill: a replica whose log consumer went
        # through the killed server has been seen to stay behind for 30 s.
        stopped = time.monotonic()
        try:
            owner = eventually(converged, 60, interval=0.5)
        except AssertionError as e:
            raise AssertionError(f"round {round_}: replicas did not converge in 60 s: {e}") from None
        converged_after = time.monotonic() - stopped
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
        print(f"round {round_} ({time.monotonic() - load.started:.0f} s): {what}; {len(load.acked)} acknowledged, "
              f"{len(load.maybe)} unacknowledged ids, {load.reads} reads, {len(load.failed_reads)} failed, "
              f"{load.excused} excused (node down mid-request); replicas converged {converged_after:.1f} s "
              f"after the writes stopped")
        kinds = {}  # the failed writes by error, numbers left out: when and how often
        for when, _, error in load.write_failures:
            kinds.setdefault(re.sub(r"\d+", "N", error)[:160], []).append(when - load.started)
        for error, times in kinds.items():
            print(f"  {len(times)} writes failed from {times[0]:.1f} s to {times[-1]:.1f} s into the round: {error}")

    print(f"fault loop: {len(rounds)} rounds, {len(acked)} acknowledged ids checked, 0 lost, "
          f"{len(maybe)} maybe ({write_errors} failed writes), {reads} reads, {len(failed_reads)} failed "
          f"reads, {time.monotonic() - started:.0f} s")
    assert not failed_reads, failed_reads[:10]


def point(i, payload, vector=None):
    return models.PointStruct(id=i, vector=(vectors_of([i])[0] if vector is None else vector).tolist(),
                              payload=payload)


def assert_replicas_hold(cluster, name, want, **layout):
    """Every replica pair identical, and together exactly `want` ({id: (payload, vector)})."""
    reps = read_replicas(cluster, name)
    owner = check_replicas(reps, **layout)
    assert sorted(owner) == sorted(want), sorted(set(owner) ^ set(want))[:10]
    for s, held in reps.items():
        for i, (payload, vector) in next(iter(held.values())).items():
            assert payload == want[i][0], (s, i, payload, want[i][0])
            np.testing.assert_allclose(vector, want[i][1], atol=1e-5, err_msg=f"shard {s}, point {i}")


def test_writes_of_every_kind_reach_every_replica(cluster):
    name = "kinds"
    # Every replica applies a write before it is acknowledged: any node reads it right after.
    create_and_wait(cluster, name, write_consistency=2)
    clients = [cluster.client(k) for k in range(NODES)]
    vec = lambda i: vectors_of([i])[0]  # noqa: E731
    # What the replicas must hold, {id: (payload, vector)}, changed beside every write.
    want = {i: ({"n": i, "group": i % 3}, vec(i)) for i in range(60)}
    clients[0].upsert(name, wait=True, points=[point(i, p) for i, (p, _) in want.items()])

    # One batch of every kind; several touch ids an earlier operation of the batch wrote, so
    # the order within each shard's log matters.
    moved = {i: vec(1000 + i) for i in (5, 6, 64)}
    batch = models.UpdateOperations(operations=[
        models.UpsertOperation(upsert=models.PointsList(
            points=[point(i, {"n": i, "group": i % 3}) for i in range(60, 70)])),
        models.DeleteOperation(delete=models.PointIdsList(points=[0, 1, 2, 61])),
        models.SetPayloadOperation(set_payload=models.SetPayload(payload={"tag": "b"}, points=[3, 4, 5, 62])),
        models.OverwritePayloadOperation(overwrite_payload=models.SetPayload(payload={"only": 1}, points=[7, 8, 63])),
        models.DeletePayloadOperation(delete_payload=models.DeletePayload(keys=["n"], points=[9, 10, 64])),
        models.ClearPayloadOperation(clear_payload=models.PointIdsList(points=[11, 12, 65])),
        models.UpdateVectorsOperation(update_vectors=models.UpdateVectors(
            points=[models.PointVectors(id=i, vector=v.tolist()) for i, v in moved.items()])),
    ])
    results = cluster.client(1).batch_update_points(name, wait=True, update_operations=batch.operations)
    assert [r.status for r in results] == [models.UpdateStatus.COMPLETED] * len(batch.operations), results
    for i in range(60, 70):
        want[i] = ({"n": i, "group": i % 3}, vec(i))
    for i in (0, 1, 2, 61):
        del want[i]
    for i in (3, 4, 5, 62):
        want[i][0]["tag"] = "b"
    for i in (7, 8, 63):
        want[i] = ({"only": 1}, want[i][1])
    for i in (9, 10, 64):
        del want[i][0]["n"]
    for i in (11, 12, 65):
        want[i] = ({}, want[i][1])
    for i, v in moved.items():
        want[i] = (want[i][0], v)
    for k, client in enumerate(clients):
        got = {p.id: p.payload for p in client.retrieve(name, ids=list(range(70)))}
        assert got == {i: p for i, (p, _) in want.items()}, (k, got)

    # Without wait: answered once in the log, visible once applied (bounded wait). One node's
    # writes to a shard enter its log in the order sent, so the payload lands on the points.
    clients[1].upsert(name, wait=False, points=[point(i, {"n": i, "group": i % 3}) for i in range(100, 140)])
    clients[1].set_payload(name, payload={"late": True}, points=list(range(100, 110)), wait=False)
    for i in range(100, 140):
        want[i] = ({"n": i, "group": i % 3, **({"late": True} if i < 110 else {})}, vec(i))

    def visible():
        for k, client in enumerate(clients):
            got = {p.id: p.payload for p in client.retrieve(name, ids=list(range(100, 140)))}
            assert got == {i: want[i][0] for i in range(100, 140)}, (k, len(got))
    eventually(visible, 10)

    group1 = models.Filter(must=[models.FieldCondition(key="group", match=models.MatchValue(value=1))])
    clients[2].delete(name, points_selector=models.FilterSelector(filter=group1), wait=True)
    want = {i: pv for i, pv in want.items() if pv[0].get("group") != 1}

    clients[2].create_payload_index(name, "group", field_schema=models.PayloadSchemaType.INTEGER, wait=True)
    group2 = models.Filter(must=[models.FieldCondition(key="group", match=models.MatchValue(value=2))])
    for k, client in enumerate(clients):
        info = client.get_collection(name)
        assert "group" in info.payload_schema, (k, info.payload_schema)
        assert info.payload_schema["group"].data_type == models.PayloadSchemaType.INTEGER, (k, info.payload_schema)
        assert info.points_count == len(want), (k, info.points_count, len(want))
        assert client.count(name, count_filter=group1, exact=True).count == 0, k
        assert client.count(name, count_filter=group2, exact=True).count == \
            sum(p.get("group") == 2 for p, _ in want.values()), k

    assert_replicas_hold(cluster, name, want)


def test_batch_answers_one_result_per_operation(cluster):
    name = "batch_answer"
    create_and_wait(cluster, name, shards=2, replicas=1)
    ops = [
        models.UpsertOperation(upsert=models.PointsList(points=[point(i, {"n": i}) for i in range(10)])),
        models.ClearPayloadOperation(clear_payload=models.PointIdsList(points=[1, 2])),
    ]
    results = cluster.client(2).batch_update_points(name, wait=True, update_operations=ops)
    assert [r.status for r in results] == [models.UpdateStatus.COMPLETED] * 2, results
    results = cluster.client(0).batch_update_points(name, wait=False, update_operations=ops)
    assert len(results) == 2, results
    # A write every replica refuses (decided as each applies it) is answered with the refusal.
    with pytest.raises(UnexpectedResponse) as e:
        cluster.client(1).upsert(name, wait=True, points=[models.PointStruct(id=99, vector=[1.0, 2.0])])
    assert e.value.status_code == 400 and "dimension" in said(e.value).lower(), said(e.value)


def test_custom_sharding_keeps_each_key_on_its_own_shards(cluster):
    name = "tenants"
    clients = [cluster.client(k) for k in range(NODES)]
    clients[0].create_collection(
        name, vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE),
        sharding_method=models.ShardingMethod.CUSTOM, shard_number=2, replication_factor=2,
        write_consistency_factor=2)
    # A change of the collection before any key: the shards of keys made later take it.
    clients[1].create_payload_index(name, "n", field_schema=models.PayloadSchemaType.INTEGER, wait=True)
    assert cluster.get(2, f"/collections/{name}/shards")["shard_keys"] == []
    assert clients[2].count(name).count == 0
    assert clients[1].create_shard_key(name, "eu")
    assert clients[2].create_shard_key(name, 7, shards_number=1)
    keys = cluster.get(0, f"/collections/{name}/shards")["shard_keys"]
    assert sorted(map(str, (k["key"] for k in keys))) == ["7", "eu"], keys
    with pytest.raises(UnexpectedResponse) as e:
        clients[0].create_shard_key(name, "eu")
    assert e.value.status_code == 400 and "already exists" in said(e.value)

    # Ids 30..39 are written under both keys: each key's points are its own.
    clients[0].upsert(name, wait=True, shard_key_selector="eu",
                      points=[point(i, {"n": i, "key": "eu"}) for i in range(40)])
    clients[1].upsert(name, wait=True, shard_key_selector=7,
                      points=[point(i, {"n": i, "key": 7}) for i in range(30, 50)])
    for bad, why in [(None, "shard key not specified"), ("us", "not found")]:
        with pytest.raises(UnexpectedResponse) as e:
            clients[2].upsert(name, wait=True, shard_key_selector=bad, points=[point(1, {})])
        assert e.value.status_code == 400 and why in said(e.value), said(e.value)

    _, layout = placement(cluster, 0, name)
    info = cluster.get(0, f"/collections/{name}/cluster")
    key_of = {s["shard_id"]: s["shard_key"] for s in info["local_shards"] + info["remote_shards"]}
    assert sorted(map(str, key_of.values())) == ["7", "eu", "eu"], key_of
    assert all(len(held) == 2 for held in layout.values()), layout
    for k, client in enumerate(clients):
        assert client.count(name, exact=True).count == 60, k
        assert client.count(name, exact=True, shard_key_selector="eu").count == 40, k
        assert client.count(name, exact=True, shard_key_selector=[7]).count == 20, k
        hits = client.query_points(name, query=vectors_of([35])[0].tolist(), limit=50,
                                   shard_key_selector=7, with_payload=True).points
        assert sorted(h.id for h in hits) == list(range(30, 50)) and {h.payload["key"] for h in hits} == {7}, k
        got = client.retrieve(name, ids=[0, 45], shard_key_selector="eu")
        assert [p.id for p in got] == [0], (k, got)
        n_over_44 = models.Filter(must=[models.FieldCondition(key="n", range=models.Range(gt=44))])
        assert client.count(name, count_filter=n_over_44, exact=True).count == 5, k
    # Key 7's shard was made after the payload index: its replicas have it too.
    seven = next(s for s, key in key_of.items() if key == 7)
    for k in range(NODES):
        if cluster.get(k, f"/collections/{name}@{seven}/exists")["exists"]:
            schema = cluster.get(k, f"/collections/{name}@{seven}")["payload_schema"]
            assert "n" in schema, (k, schema)

    # A change of the collection made after a key's shards: a replica of one built later from
    # the log applies it in its place, after the writes before it (strict mode applied first
    # would refuse the second upsert there, and only there).
    clients[0].upsert(name, wait=True, shard_key_selector="eu",
                      points=[point(i, {"n": i, "key": "eu"}) for i in range(100, 110)])
    clients[0].update_collection(name, strict_mode_config=models.StrictModeConfig(
        enabled=True, max_points_count=1))
    peer_of = {cluster.get(k, "/cluster")["peer_id"]: k for k in range(NODES)}
    eu0 = min(s for s, key in key_of.items() if key == "eu")
    held = [peer_of[p] for p in placement(cluster, 0, name)[1][eu0]]
    new = next(k for k in range(NODES) if k not in held)
    assert shard_op(cluster, name, {"replicate_shard": {
        "shard_id": eu0, "from_peer_id": cluster.get(held[0], "/cluster")["peer_id"],
        "to_peer_id": cluster.get(new, "/cluster")["peer_id"]}}) is True

    def three_active_alike():
        view = placement(cluster, 0, name)[1][eu0]
        assert len(view) == 3 and set(view.values()) == {"Active"}, view
        counts = {k: cluster.get(k, f"/collections/{name}@{eu0}/points/count", {"exact": True})["count"]
                  for k in range(NODES)}
        assert len(set(counts.values())) == 1 and counts[new] > 0, counts
    eventually(three_active_alike, 30)
    with pytest.raises(UnexpectedResponse) as e:
        clients[1].upsert(name, wait=True, shard_key_selector="eu", points=[point(200, {"n": 200})])
    assert e.value.status_code == 400 and "limit" in said(e.value), said(e.value)

    assert clients[2].delete_shard_key(name, "eu")
    for k, client in enumerate(clients):
        assert client.count(name, exact=True).count == 20, k
    gone = {s for s, key in key_of.items() if key == "eu"}

    def dropped_everywhere():
        for k in range(NODES):
            assert not replicas_on_disk(cluster, k, name, max(key_of) + 1) & gone, k
    eventually(dropped_everywhere, 15)
    clients[0].delete_collection(name)


def replicas_on_disk(cluster, k, name, shards):
    """The shards of `name` node k keeps a local collection `name@shard` for."""
    return {s for s in range(shards) if cluster.get(k, f"/collections/{name}@{s}/exists")["exists"]}


def test_collection_dropped_and_created_again(cluster):
    name, dim = "again", 4
    create_and_wait(cluster, name, via=1)
    old = {i: ({"gen": 1}, vectors_of([i])[0]) for i in range(100)}
    cluster.client(1).upsert(name, wait=True, points=[point(i, p, v) for i, (p, v) in old.items()])

    # Node 0 misses the drop and the creation: it comes back holding the old collection's
    # replicas, under the names the new one's replicas have.
    cluster.kill(0)
    assert cluster.client(1).delete_collection(name)
    # Ids 50..149: half of them ids the old collection had, in a space of another dimension.
    new = {i: ({"gen": 2}, normalized(vectors_of([i])[0][:dim])) for i in range(50, 150)}
    cluster.client(2).create_collection(
        name, vectors_config=models.VectorParams(size=dim, distance=models.Distance.COSINE),
        shard_number=3, replication_factor=2)
    cluster.client(2).upsert(name, wait=True, points=[point(i, p, v) for i, (p, v) in new.items()])

    def answers_new_only(k):
        client = cluster.client(k)
        info = client.get_collection(name)
        assert info.config.params.vectors.size == dim and info.points_count == len(new), (k, info)
        assert client.count(name, exact=True).count == len(new), k
        assert client.retrieve(name, ids=list(range(50))) == [], k
        got = client.retrieve(name, ids=list(new), with_vectors=True)
        assert {p.id: p.payload for p in got} == {i: p for i, (p, _) in new.items()}, k
        assert all(len(p.vector) == dim for p in got), k
        assert [c.name for c in client.get_collections().collections].count(name) == 1, k

    for k in (1, 2):
        answers_new_only(k)

    cluster.restart(0)
    wait_members(cluster, range(NODES), 20)
    views = wait_active(cluster, name)
    for k in range(NODES):
        answers_new_only(k)
        # No replica left over from the old collection: a node keeps exactly the shards the
        # new map gives it.
        mine = {s for s, held in views.items() if cluster.get(k, "/cluster")["peer_id"] in held}
        assert replicas_on_disk(cluster, k, name, 3) == mine, (k, mine)
        if k == 0:  # placed on it only when it was still listed (its lease had not lapsed yet)
            print(f"node 0, back after the re-creation, holds shards {sorted(mine)} of the new collection")
    assert_replicas_hold(cluster, name, new)


def test_whole_cluster_restart_keeps_data(cluster):
    name = "durable"
    create_and_wait(cluster, name)
    want = {i: ({"n": i}, vectors_of([i])[0]) for i in range(300)}
    client = cluster.client(0)
    for lo in range(0, 300, 100):
        client.upsert(name, wait=True, points=[point(i, want[i][0]) for i in range(lo, lo + 100)])
    client.delete(name, points_selector=models.PointIdsList(points=list(range(50))), wait=True)
    client.set_payload(name, payload={"tag": "x"}, points=list(range(50, 60)), wait=True)
    want = {i: ({**p, **({"tag": "x"} if i < 60 else {})}, v) for i, (p, v) in want.items() if i >= 50}
    _, before = placement(cluster, 0, name)

    cluster.stop_all()  # SIGTERM, every node at once
    codes = [p.returncode for p in cluster.procs]
    cluster.start_all()
    wait_members(cluster, range(NODES), 20)
    assert wait_active(cluster, name) == before  # same node ids, same placement
    print(f"exit codes after SIGTERM: {codes}")
    for k in range(NODES):
        c = cluster.client(k)
        assert c.count(name, exact=True).count == len(want), k
        got = {p.id: p.payload for p in c.retrieve(name, ids=list(range(300)))}
        assert got == {i: p for i, (p, _) in want.items()}, k
    assert_replicas_hold(cluster, name, want)

    # And it takes writes again, through every node.
    for k in range(NODES):
        ids = range(300 + 50 * k, 350 + 50 * k)
        cluster.client(k).upsert(name, wait=True, points=[point(i, {"n": i}) for i in ids])
        want.update({i: ({"n": i}, vectors_of([i])[0]) for i in ids})
    for k in range(NODES):
        assert cluster.client(k).count(name, exact=True).count == len(want), k
    assert_replicas_hold(cluster, name, want)


def shard_holders(cluster, name, check=lambda holders: True):
    """{shard: sorted node numbers holding it}, once every node agrees, no transfer is under
    way, and `check` holds of it (maps change through etcd: every node sees it a moment later)."""
    peer_of = {k: cluster.get(k, "/cluster")["peer_id"] for k in range(NODES)}
    node_of = {p: k for k, p in peer_of.items()}

    def settled():
        views = []
        for k in range(NODES):
            info, view = placement(cluster, k, name)
            assert not info["shard_transfers"], info["shard_transfers"]
            for s, held in view.items():
                assert set(held.values()) == {"Active"}, (k, s, held)
            views.append({s: sorted(node_of[p] for p in held) for s, held in view.items()})
        assert all(v == views[0] for v in views), views
        assert check(views[0]), views[0]
        return views[0]
    return eventually(settled, 30)


def shard_op(cluster, name, op):
    return http_json(f"{cluster.node_url(1)}/collections/{name}/cluster", op)["result"]


def log_bounds(cluster, k, name):
    """{shard: (first, last)}: the messages each shard's log holds, as node k sees them."""
    info = cluster.get(k, f"/collections/{name}/cluster")
    return {g["shard_id"]: (g["first"], g["last"]) for g in info["logs"]}


def test_logs_are_trimmed_and_replicas_rebuilt_from_snapshots(cluster):
    name = "trimmed"
    create_and_wait(cluster, name, shards=1, replicas=1)
    peer = {k: cluster.get(k, "/cluster")["peer_id"] for k in range(NODES)}
    client = cluster.client(0)
    want = {}

    def write(lo, hi, wait=False):
        # One message per write: far more messages than the logs keep.
        for i in range(lo, hi, 2):
            client.upsert(name, wait=wait or i + 2 >= hi, points=[point(j, {"n": j}) for j in (i, i + 1)])
            want.update({j: ({"n": j}, vectors_of([j])[0]) for j in (i, i + 1)})

    write(0, 400)
    # Trimmed below its one replica's mark, less LOG_RETAIN (each node trims every 5 s).
    via = [0]  # the node asked (one that stays up)

    def trimmed_past(seq):
        def check():
            first, last = log_bounds(cluster, via[0], name)[0]
            assert first > seq, (first, last)
            return first, last
        return check
    first, last = eventually(trimmed_past(100), 20)
    assert last >= 200, (first, last)

    # A new replica: the log no longer holds the first writes, so they come from a snapshot.
    src = shard_holders(cluster, name)[0][0]
    dst = (src + 1) % NODES
    client = cluster.client(src)  # the writes and checks below go on while dst is down
    via[0] = src
    assert shard_op(cluster, name, {"replicate_shard": {
        "shard_id": 0, "from_peer_id": peer[src], "to_peer_id": peer[dst]}}) is True
    shard_holders(cluster, name, lambda h: h[0] == sorted([src, dst]))
    write(400, 420, wait=True)
    assert_replicas_hold(cluster, name, want, shards=1, replicas=2)
    seeded = "where they lie" if {src, dst} == SHARED_STORAGE else "restored from"
    assert seeded in cluster.logs[dst].read_text(errors="replace")
    _, applied_by_dst = log_bounds(cluster, src, name)[0]

    # Its node down while the log moves on and is trimmed past its mark: back, it is
    # rebuilt from a snapshot of the other replica, then follows the log again.
    cluster.kill(dst)
    wait_members(cluster, [k for k in range(NODES) if k != dst], 10)
    write(420, 700)
    eventually(trimmed_past(applied_by_dst + 1), 20)
    cluster.restart(dst)
    wait_members(cluster, range(NODES), 15)
    shard_holders(cluster, name, lambda h: h[0] == sorted([src, dst]))
    write(700, 720, wait=True)
    eventually(lambda: assert_replicas_hold(cluster, name, want, shards=1, replicas=2), 20)
    assert "rebuilding it from a snapshot" in cluster.logs[dst].read_text(errors="replace")
    for k in range(NODES):
        assert cluster.client(k).count(name, exact=True).count == len(want), k
    client.delete_collection(name)


def test_shards_move_replicate_drop_and_rebalance(cluster):
    name = "moving"
    create_and_wait(cluster, name, shards=3, replicas=1)
    want = {i: ({"n": i}, vectors_of([i])[0]) for i in range(300)}
    cluster.client(0).upsert(name, wait=True, points=[point(i, p, v) for i, (p, v) in want.items()])
    peer = {k: cluster.get(k, "/cluster")["peer_id"] for k in range(NODES)}
    holders = shard_holders(cluster, name)
    src = holders[0][0]
    dst = next(k for k in range(NODES) if k != src)

    # A second replica, built by its node from the shard's log, then the first one dropped.
    assert shard_op(cluster, name, {"replicate_shard": {
        "shard_id": 0, "from_peer_id": peer[src], "to_peer_id": peer[dst]}}) is True
    shard_holders(cluster, name, lambda h: h[0] == sorted([src, dst]))
    reps = read_replicas(cluster, name)
    assert reps[0][src] == reps[0][dst] and len(reps[0][dst]) > 0
    assert shard_op(cluster, name, {"drop_replica": {"shard_id": 0, "peer_id": peer[src]}}) is True
    shard_holders(cluster, name, lambda h: h[0] == [dst])
    # The last replica of a shard stays.
    with pytest.raises(urllib.error.HTTPError) as e:
        shard_op(cluster, name, {"drop_replica": {"shard_id": 0, "peer_id": peer[dst]}})
    assert e.value.code == 400

    # Everything onto one node, by moves, under writes; then `diskvec cluster rebalance`.
    lump = holders[1][0]
    for s, held in shard_holders(cluster, name, lambda h: h[0] == [dst]).items():
        if held != [lump]:
            assert shard_op(cluster, name, {"move_shard": {
                "shard_id": s, "from_peer_id": peer[held[0]], "to_peer_id": peer[lump]}}) is True
    extra = {i: ({"n": i, "late": True}, vectors_of([i])[0]) for i in range(300, 340)}
    cluster.client(2).upsert(name, wait=True, points=[point(i, p, v) for i, (p, v) in extra.items()])
    want.update(extra)
    shard_holders(cluster, name, lambda h: h == {0: [lump], 1: [lump], 2: [lump]})
    assert cluster.client(1).count(name, exact=True).count == len(want)

    out = subprocess.run([str(BIN), "cluster", "rebalance", "--url", cluster.node_url(2), "--timeout", "60"],
                         capture_output=True, text=True, timeout=90)
    assert out.returncode == 0, out.stderr
    assert "moves done" in out.stdout, out.stdout
    shard_holders(cluster, name, lambda h: sorted(k for held in h.values() for k in held) == [0, 1, 2])
    assert_replicas_hold(cluster, name, want, replicas=1)
    for k in range(NODES):
        assert cluster.client(k).count(name, exact=True).count == len(want)
    # Balanced: a second run moves nothing.
    out = subprocess.run([str(BIN), "cluster", "rebalance", "--url", cluster.node_url(0)],
                         capture_output=True, text=True, timeout=90)
    assert out.returncode == 0 and f"{name}: balanced" in out.stdout, out.stdout + out.stderr


def test_reads_asking_consistency_see_every_acknowledged_write(cluster):
    name = "fresh"
    create_and_wait(cluster, name, shards=3, replicas=2)
    rounds = 30
    for r in range(rounds):
        ids = list(range(r * 10, r * 10 + 10))
        # Acknowledged once in the log, before any replica applied it.
        cluster.client(r % NODES).upsert(name, wait=False, points=[point(i, {"r": r}) for i in ids])
        got = cluster.client((r + 1) % NODES).retrieve(
            name, ids=ids, consistency=models.ReadConsistencyType.ALL)
        assert sorted(p.id for p in got) == ids, (r, sorted(p.id for p in got))
        hits = cluster.client((r + 2) % NODES).query_points(
            name, query=vectors_of([ids[0]])[0].tolist(), limit=1,
            consistency=models.ReadConsistencyType.MAJORITY).points
        assert hits and hits[0].id == ids[0], (r, hits)


def test_aliases_answer_from_every_node(cluster):
    name = "aliased"
    create_and_wait(cluster, name, shards=2, replicas=2)
    cluster.client(0).upsert(name, wait=True, points=[point(i, {"n": i}) for i in range(20)])
    assert cluster.client(1).update_collection_aliases(change_aliases_operations=[
        models.CreateAliasOperation(create_alias=models.CreateAlias(collection_name=name, alias_name="al"))])

    def through_alias():
        for k in range(NODES):
            assert cluster.client(k).count("al", exact=True).count == 20
            names = {(a.alias_name, a.collection_name) for a in cluster.client(k).get_aliases().aliases}
            assert names == {("al", name)}, names
            of = cluster.client(k).get_collection_aliases(name).aliases
            assert [a.alias_name for a in of] == ["al"], of
    eventually(through_alias, 10)
    # Writes through an alias reach the collection; a rename moves it; a bad action changes nothing.
    cluster.client(2).upsert("al", wait=True, points=[point(i, {"n": i}) for i in range(20, 25)])
    assert cluster.client(0).update_collection_aliases(change_aliases_operations=[
        models.RenameAliasOperation(rename_alias=models.RenameAlias(old_alias_name="al", new_alias_name="al2"))])
    with pytest.raises(UnexpectedResponse):
        cluster.client(0).update_collection_aliases(change_aliases_operations=[
            models.CreateAliasOperation(create_alias=models.CreateAlias(collection_name="nope", alias_name="x"))])
    def renamed():
        counts = [cluster.client(k).count("al2", exact=True).count for k in range(NODES)]
        assert counts == [25] * NODES, counts
    eventually(renamed, 10)
    # Dropping the collection drops its aliases.
    assert cluster.client(1).delete_collection(name)

    def gone():
        left = [cluster.client(k).get_aliases().aliases for k in range(NODES)]
        assert not any(left), left
    eventually(gone, 10)


def multipart(field, data):
    """A multipart/form-data body with one file field: (body, content type)."""
    b = "diskvec-test-boundary"
    head = (f"--{b}\r\nContent-Disposition: form-data; name=\"{field}\"; filename=\"s.snapshot\"\r\n"
            "Content-Type: application/octet-stream\r\n\r\n").encode()
    return head + data + f"\r\n--{b}--\r\n".encode(), f"multipart/form-data; boundary={b}"


def post_upload(url, data):
    body, kind = multipart("snapshot", data)
    req = urllib.request.Request(url, data=body, headers={"content-type": kind}, method="POST")
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())["result"]


def http_error(call):
    with pytest.raises(urllib.error.HTTPError) as e:
        call()
    return e.value.code, json.loads(e.value.read())["status"]["error"]


def fetch_snapshot(cluster, k, shelf, made):
    """The bytes of snapshot `made` (as its creation answered) on `shelf` (a path ending in
    /snapshots), fetched through node k: the file its checksum was taken of."""
    with urllib.request.urlopen(f"{cluster.node_url(k)}{shelf}/{made['name']}") as r:
        data = r.read()
    assert hashlib.sha256(data).hexdigest() == made["checksum"]
    return data


def test_shard_snapshots_restore_every_replica_alike(cluster):
    name = "snaps"
    create_and_wait(cluster, name, shards=2, replicas=2)
    first = {i: {"n": i} for i in range(200)}
    cluster.client(0).upsert(name, wait=True, points=[point(i, p) for i, p in first.items()])
    # Made through one node, listed and fetched through the others: one holder per shard.
    made = http_json(cluster.node_url(1) + f"/collections/{name}/shards/0/snapshots?wait=true", {})["result"]
    for k in range(NODES):
        listed = cluster.get(k, f"/collections/{name}/shards/0/snapshots")
        assert [(s["name"], s["checksum"]) for s in listed] == [(made["name"], made["checksum"])], (k, listed)
    snapshot = fetch_snapshot(cluster, 2, f"/collections/{name}/shards/0/snapshots", made)
    at_snapshot = next(iter(read_replicas(cluster, name)[0].values()))
    assert len(at_snapshot) > 50

    # Written after it: new points and changed ones, on both shards.
    cluster.client(2).upsert(name, wait=True, points=[point(i, {"n": i, "late": True}) for i in range(150, 260)])
    shard1 = next(iter(read_replicas(cluster, name)[1].values()))
    # Refused before anything reaches the log: a wrong checksum, a file that is no snapshot.
    base = cluster.node_url(0) + f"/collections/{name}/shards/0/snapshots/upload"
    code, why = http_error(lambda: post_upload(base + "?checksum=" + "3" * 64, snapshot))
    assert code == 400 and "checksum mismatch" in why, why
    code, why = http_error(lambda: post_upload(base, b"not a snapshot"))
    assert code == 400, why
    code, _ = http_error(lambda: post_upload(cluster.node_url(0) + f"/collections/{name}/shards/7/snapshots/upload", snapshot))
    assert code == 404

    # A node holding a replica of shard 0 is down while the shard is restored through another.
    _, view = placement(cluster, 0, name)
    peer_of = {cluster.get(k, "/cluster")["peer_id"]: k for k in range(NODES)}
    down = peer_of[sorted(view[0])[0]]
    via = next(k for k in range(NODES) if k != down)
    cluster.kill(down)
    # Seen gone: the restore is retired without it (its file removed, the log trimmed), so
    # on its return it finds the restore's file gone and is rebuilt from the other replica.
    wait_members(cluster, [k for k in range(NODES) if k != down], 30)
    assert post_upload(cluster.node_url(via) + f"{base[len(cluster.node_url(0)):]}?checksum={made['checksum']}",
                       snapshot) is True

    def retired():
        assert not list((cluster.work / f"node{via}" / "cluster" / "restores").iterdir())
    eventually(retired, 30)
    cluster.restart(down)
    wait_members(cluster, range(NODES), 30)

    def restored_everywhere():
        reps = read_replicas(cluster, name)
        for k, held in reps[0].items():
            assert held == at_snapshot, (k, len(held), len(at_snapshot))
        for k, held in reps[1].items():
            assert held == shard1, (k, len(held), len(shard1))
        assert len(reps[0]) == 2 and len(reps[1]) == 2, {s: sorted(h) for s, h in reps.items()}
    eventually(restored_everywhere, 60)
    for k in range(NODES):
        assert cluster.client(k).count(name, exact=True).count == len(at_snapshot) + len(shard1)
    # Writes after the restore go on from it on every replica.
    cluster.client(down).upsert(name, wait=True, points=[point(i, {"n": i, "after": True}) for i in range(300, 340)])
    check_replicas(read_replicas(cluster, name), shards=2)
    assert cluster.client(0).count(name, exact=True).count == len(at_snapshot) + len(shard1) + 40


def test_collection_recovered_from_its_snapshot_on_any_node(cluster):
    name = "snap1"
    create_and_wait(cluster, name, shards=1, replicas=2)
    want = {i: {"n": i} for i in range(120)}
    cluster.client(1).upsert(name, wait=True, points=[point(i, p) for i, p in want.items()])
    # Strict mode travels in the snapshot: the recovered collection is checked by it.
    assert api(cluster, 1, "PATCH", f"/collections/{name}",
               {"strict_mode_config": {"enabled": True, "max_query_limit": 50}})[0] == 200
    made = http_json(cluster.node_url(0) + f"/collections/{name}/snapshots?wait=true", {})["result"]
    snapshot = fetch_snapshot(cluster, 2, f"/collections/{name}/snapshots", made)
    assert cluster.client(2).delete_collection(name)
    for k in range(NODES):
        assert not cluster.client(k).collection_exists(name)
    # Recovery creates the collection (one shard, the snapshot's settings) and fills it.
    result = post_upload(cluster.node_url(2) + f"/collections/{name}/snapshots/upload?checksum={made['checksum']}",
                         snapshot)
    assert result is True

    def everywhere():
        for k in range(NODES):
            assert cluster.client(k).count(name, exact=True).count == len(want), k
    eventually(everywhere, 30)
    def checked_by_snapshots_strict_mode(k):
        status, _, out = api(cluster, k, "POST", f"/collections/{name}/points/scroll", {"limit": 51})
        assert status == 400 and '"limit"' in out["status"]["error"], (k, out)
    for k in range(NODES):
        # The node that recovered it has the map as changed; the others within a quarter second.
        eventually(lambda: checked_by_snapshots_strict_mode(k), 5)
    # Off again, for the replicas' own reads below (a client reading a replica is checked too).
    assert api(cluster, 0, "PATCH", f"/collections/{name}", {"strict_mode_config": {"enabled": False}})[0] == 200
    time.sleep(1)  # the other nodes read the change from etcd within a quarter second
    info = cluster.client(0).get_collection(name)
    assert info.config.params.vectors.size == DIM
    # The snapshot does not say how the cluster kept it: the cluster's default replication.
    factor = info.config.params.replication_factor
    reps = read_replicas(cluster, name)
    assert sorted(check_replicas(reps, shards=1, replicas=factor)) == sorted(want)
    # The restore was the new collection's first message, trimmed once applied (its file
    # then removed): a replica added now copies one restored, with nothing to replay.
    def retired():
        assert not list((cluster.work / "node2" / "cluster" / "restores").iterdir())
        assert log_bounds(cluster, 0, name)[0][0] > 1, log_bounds(cluster, 0, name)
    eventually(retired, 30)
    holders = shard_holders(cluster, name)[0]
    peer = {k: cluster.get(k, "/cluster")["peer_id"] for k in range(NODES)}
    to = next(k for k in range(NODES) if k not in holders)
    assert shard_op(cluster, name, {"replicate_shard": {
        "shard_id": 0, "from_peer_id": peer[holders[0]], "to_peer_id": peer[to]}}) is True
    shard_holders(cluster, name, lambda h: to in h[0])
    reps = read_replicas(cluster, name)
    assert sorted(check_replicas(reps, shards=1, replicas=factor + 1)) == sorted(want)


def test_lookups_into_another_cluster_collection(cluster):
    """`lookup_from` and `with_lookup` name another cluster collection, whose points are on
    other nodes than the replica answering: the router finds them."""
    items, examples = "items", "examples"
    create_and_wait(cluster, items, shards=1, replicas=1)
    create_and_wait(cluster, examples, shards=2, replicas=1)
    cluster.client(0).upsert(items, wait=True, points=[point(i, {"g": i % 4}) for i in range(40)])
    far = {i: vectors_of([500 + i])[0] for i in range(8)}
    cluster.client(1).upsert(examples, wait=True,
                             points=[point(i, {"title": f"group {i}"}, far[i]) for i in range(8)])
    for k in range(NODES):
        client = cluster.client(k)
        by_lookup = client.query_points(items, query=models.RecommendQuery(recommend=models.RecommendInput(
            positive=[3, 5])), lookup_from=models.LookupLocation(collection=examples), limit=5).points
        by_vectors = client.query_points(items, query=models.RecommendQuery(recommend=models.RecommendInput(
            positive=[far[3].tolist(), far[5].tolist()])), limit=5).points
        assert [p.id for p in by_lookup] == [p.id for p in by_vectors], k
        nearest = client.query_points(items, query=6, lookup_from=models.LookupLocation(collection=examples),
                                      limit=3).points
        assert [p.id for p in nearest] == [p.id for p in client.query_points(
            items, query=far[6].tolist(), limit=3).points], k
        # A point the other collection lacks is a 404, as on one node.
        with pytest.raises(UnexpectedResponse) as e:
            client.query_points(items, query=99, lookup_from=models.LookupLocation(collection=examples))
        assert e.value.status_code == 404, e.value
        groups = client.query_points_groups(items, group_by="g", query=far[0].tolist(), limit=4, group_size=2,
                                            with_lookup=models.WithLookup(collection=examples)).groups
        assert sorted(g.id for g in groups) == [0, 1, 2, 3], groups
        for g in groups:
            assert g.lookup is not None and g.lookup.payload == {"title": f"group {g.id}"}, (k, g)


def test_queries_above_the_shards_answer_as_one_shard_does(cluster):
    """Queries a replica cannot answer alone on a collection of several shards (examples by
    point id, fusion, groups, facets, listing) answer as the same data on one shard does."""
    whole, split = "one_shard", "three_shards"
    create_and_wait(cluster, whole, shards=1, replicas=1)
    create_and_wait(cluster, split, shards=3, replicas=1)
    points = [point(i, {"g": i % 4, "c": "xyz"[i % 3], "m": f"s{i % 7}" if i % 2 else i % 7})
              for i in range(150)]
    for name in (whole, split):
        cluster.client(0).upsert(name, wait=True, points=points)
    exact = models.SearchParams(exact=True)
    f_even = models.Filter(must=[models.FieldCondition(key="g", match=models.MatchAny(any=[0, 2]))])

    def same(what, ask, k):
        a, b = ask(cluster.client(k), whole), ask(cluster.client(k), split)
        assert [(p.id, round(p.score, 4)) for p in a] == [(p.id, round(p.score, 4)) for p in b], (what, k)
        assert [p.payload for p in a] == [p.payload for p in b], (what, k)
        for x, y in zip(a, b):
            assert (x.vector is None) == (y.vector is None), (what, k)
            if x.vector is not None:
                np.testing.assert_allclose(x.vector, y.vector, atol=1e-5)
        return b

    queries = {
        "recommend": lambda c, n: c.query_points(n, query=models.RecommendQuery(recommend=models.RecommendInput(
            positive=[3, 40], negative=[7])), limit=7, search_params=exact, with_payload=True).points,
        "best_score": lambda c, n: c.query_points(n, query=models.RecommendQuery(recommend=models.RecommendInput(
            positive=[3, 40], negative=[7], strategy=models.RecommendStrategy.BEST_SCORE)), limit=5,
            query_filter=f_even).points,
        "nearest_id": lambda c, n: c.query_points(n, query=11, limit=6, search_params=exact).points,
        "discover": lambda c, n: c.query_points(n, query=models.DiscoverQuery(discover=models.DiscoverInput(
            target=20, context=[models.ContextPair(positive=21, negative=22)])), limit=5).points,
        "rrf": lambda c, n: c.query_points(n, prefetch=[
            models.Prefetch(query=vectors_of([1000])[0].tolist(), limit=20, params=exact),
            models.Prefetch(query=5, filter=f_even, limit=15, params=exact)],
            query=models.FusionQuery(fusion=models.Fusion.RRF), limit=8, offset=2, with_payload=True).points,
        "dbsf": lambda c, n: c.query_points(n, prefetch=[
            models.Prefetch(query=vectors_of([1001])[0].tolist(), limit=12, params=exact),
            models.Prefetch(query=vectors_of([1002])[0].tolist(), limit=12, params=exact)],
            query=models.FusionQuery(fusion=models.Fusion.DBSF), limit=6).points,
        # Each shard re-scores its own prefetch, as Qdrant's shards do: with every point
        # prefetched, the same points as on one shard.
        "rescore": lambda c, n: c.query_points(n, prefetch=models.Prefetch(
            query=vectors_of([1003])[0].tolist(), limit=150, params=exact),
            query=vectors_of([1004])[0].tolist(), limit=5).points,
        "listing": lambda c, n: c.query_points(n, query_filter=f_even, limit=9, offset=4).points,
        # Picked for variety among every shard's nearest, by the rule one shard uses.
        "mmr": lambda c, n: c.query_points(n, query=models.NearestQuery(
            nearest=vectors_of([1006])[0].tolist(), mmr=models.Mmr(diversity=0.6, candidates_limit=40)),
            limit=8, search_params=exact, with_vectors=True).points,
        "mmr_by_id": lambda c, n: c.query_points(n, query=models.NearestQuery(
            nearest=12, mmr=models.Mmr(diversity=0.3, candidates_limit=30)), limit=5, offset=1,
            search_params=exact).points,
        "order_by": lambda c, n: c.query_points(n, query=models.OrderByQuery(order_by=models.OrderBy(
            key="g", direction=models.Direction.DESC)), limit=12, offset=3, with_payload=["c"]).points,
        # The candidates: the nearest among what the prefetches found over the collection.
        "mmr_prefetch": lambda c, n: c.query_points(n, prefetch=[
            models.Prefetch(query=vectors_of([1008])[0].tolist(), limit=25, params=exact),
            models.Prefetch(query=9, filter=f_even, limit=10, params=exact)],
            query=models.NearestQuery(nearest=vectors_of([1009])[0].tolist(),
                                      mmr=models.Mmr(diversity=0.5, candidates_limit=20)),
            limit=6, with_payload=True).points,
    }
    for k in range(NODES):
        for what, ask in queries.items():
            got = same(what, ask, k)
            assert got, (what, k)
            if what in ("recommend", "nearest_id", "mmr_by_id"):
                assert not {3, 40, 7, 11, 12} & {p.id for p in got}, (what, got)
        batch = [models.QueryRequest(query=models.RecommendQuery(recommend=models.RecommendInput(positive=[i])),
                                     limit=4, params=exact) for i in (1, 2)]
        a = cluster.client(k).query_batch_points(whole, requests=batch)
        b = cluster.client(k).query_batch_points(split, requests=batch)
        assert [[p.id for p in r.points] for r in a] == [[p.id for p in r.points] for r in b], k

        ga = cluster.client(k).query_points_groups(whole, group_by="c", query=vectors_of([1005])[0].tolist(),
                                                   limit=2, group_size=4, search_params=exact).groups
        gb = cluster.client(k).query_points_groups(split, group_by="c", query=vectors_of([1005])[0].tolist(),
                                                   limit=2, group_size=4, search_params=exact).groups
        assert [(g.id, [h.id for h in g.hits]) for g in ga] == [(g.id, [h.id for h in g.hits]) for g in gb], k
        # Group keys of both kinds (strings and integers), many groups: shards asked again.
        ga = cluster.client(k).query_points_groups(whole, group_by="m", query=vectors_of([1007])[0].tolist(),
                                                   limit=5, group_size=3, search_params=exact).groups
        gb = cluster.client(k).query_points_groups(split, group_by="m", query=vectors_of([1007])[0].tolist(),
                                                   limit=5, group_size=3, search_params=exact).groups
        assert [(g.id, [h.id for h in g.hits]) for g in ga] == [(g.id, [h.id for h in g.hits]) for g in gb], k
        assert {type(g.id) for g in gb} == {str, int}, gb
        gb = cluster.client(k).query_points_groups(split, group_by="g", query=60, limit=3, group_size=2,
                                                   search_params=exact).groups
        assert len(gb) == 3 and all(len(g.hits) == 2 and 60 not in [h.id for h in g.hits] for g in gb), gb
        # Groups of what only the router ranks: a fusion, an order_by, an mmr.
        ranked = {
            "rrf": dict(prefetch=[models.Prefetch(query=vectors_of([1010])[0].tolist(), limit=40, params=exact),
                                  models.Prefetch(query=14, limit=40, params=exact)],
                        query=models.FusionQuery(fusion=models.Fusion.RRF)),
            "order_by": dict(query=models.OrderByQuery(order_by=models.OrderBy(key="g")), query_filter=f_even),
            "mmr": dict(query=models.NearestQuery(nearest=vectors_of([1011])[0].tolist(),
                                                  mmr=models.Mmr(diversity=0.4, candidates_limit=60)),
                        search_params=exact),
        }
        for what, how in ranked.items():
            ga, gb = (cluster.client(k).query_points_groups(n, group_by="c", limit=2, group_size=3,
                                                            with_payload=["g"], **how).groups
                      for n in (whole, split))
            assert [(g.id, [(h.id, h.payload) for h in g.hits]) for g in ga] == \
                [(g.id, [(h.id, h.payload) for h in g.hits]) for g in gb], (what, k, ga, gb)
            assert len(gb) == 2 and all(len(g.hits) == 3 for g in gb), (what, gb)

        fa = cluster.client(k).facet(whole, key="c", exact=True)
        fb = cluster.client(k).facet(split, key="c", exact=True)
        assert [(h.value, h.count) for h in fa.hits] == [(h.value, h.count) for h in fb.hits] == [
            ("x", 50), ("y", 50), ("z", 50)], (k, fa, fb)
        fb = cluster.client(k).facet(split, key="g", facet_filter=f_even, limit=1, exact=True)
        assert [(h.value, h.count) for h in fb.hits] == [(0, 38)], fb

        # Distance matrices: the same sample (the first points by id) and the same scores.
        ma = cluster.client(k).search_matrix_pairs(whole, sample=30, limit=3, query_filter=f_even)
        mb = cluster.client(k).search_matrix_pairs(split, sample=30, limit=3, query_filter=f_even)
        assert [(p.a, p.b, round(p.score, 4)) for p in ma.pairs] == [
            (p.a, p.b, round(p.score, 4)) for p in mb.pairs], k
        assert len(mb.pairs) == 90, len(mb.pairs)
        oa = cluster.client(k).search_matrix_offsets(whole, sample=20, limit=2)
        ob = cluster.client(k).search_matrix_offsets(split, sample=20, limit=2)
        assert (oa.ids, oa.offsets_row, oa.offsets_col) == (ob.ids, ob.offsets_row, ob.offsets_col), k

        # Scrolls ordered by a payload key, paged by start_from (ties by id).
        for order in (models.OrderBy(key="g", direction=models.Direction.DESC, start_from=2),
                      models.OrderBy(key="c")):
            sa, _ = cluster.client(k).scroll(whole, order_by=order, limit=40, with_payload=True)
            sb, nb = cluster.client(k).scroll(split, order_by=order, limit=40, with_payload=True)
            assert [(p.id, p.payload) for p in sa] == [(p.id, p.payload) for p in sb], (k, order)
            assert len(sb) == 40 and nb is None, (k, order)

        # An example that is nowhere is a 404, as on one node.
        with pytest.raises(UnexpectedResponse) as e:
            cluster.client(k).query_points(split, query=models.RecommendQuery(
                recommend=models.RecommendInput(positive=[9999])))
        assert e.value.status_code == 404, e.value


def test_mmr_in_sparse_and_multivector_spaces_answers_as_one_shard_does(cluster):
    """mmr over several shards compares its candidates as one node does in every kind of
    space: by dot product in a sparse space, by MaxSim in a multivector one."""
    rng = random.Random(7)
    spaces = dict(
        vectors_config={"m": models.VectorParams(size=4, distance=models.Distance.COSINE,
                                                 multivector_config=models.MultiVectorConfig(
                                                     comparator=models.MultiVectorComparator.MAX_SIM))},
        sparse_vectors_config={"s": models.SparseVectorParams()})
    points = []
    for i in range(80):
        terms = sorted(rng.sample(range(40), 6))
        points.append(models.PointStruct(id=i, payload={"i": i}, vector={
            "s": models.SparseVector(indices=terms, values=[rng.uniform(0.1, 1) for _ in terms]),
            "m": [[rng.uniform(-1, 1) for _ in range(4)] for _ in range(rng.randint(1, 3))]}))
    names = {1: "mmr_one", 3: "mmr_three"}
    for shards, name in names.items():
        cluster.client(0).create_collection(name, shard_number=shards, replication_factor=1, **spaces)
        wait_active(cluster, name, shards, 1)
        cluster.client(0).upsert(name, wait=True, points=points)
    exact = models.SearchParams(exact=True)
    asks = {
        "sparse": dict(query=models.NearestQuery(
            nearest=models.SparseVector(indices=[1, 5, 9, 13, 30], values=[1, 0.5, 0.8, 0.3, 0.9]),
            mmr=models.Mmr(diversity=0.5, candidates_limit=30)), using="s", limit=8),
        "multi": dict(query=models.NearestQuery(nearest=[[0.3, -0.2, 0.9, 0.1], [0.5, 0.5, -0.1, 0.2]],
                                                mmr=models.Mmr(diversity=0.6, candidates_limit=40)),
                      using="m", limit=7, search_params=exact),
        "multi_by_id": dict(query=models.NearestQuery(nearest=17, mmr=models.Mmr(diversity=0.3)),
                            using="m", limit=5, search_params=exact),
    }
    for k in range(NODES):
        for what, how in asks.items():
            a, b = (cluster.client(k).query_points(n, **how).points for n in names.values())
            assert len(b) == how["limit"], (what, b)
            assert [(p.id, round(p.score, 4)) for p in a] == [(p.id, round(p.score, 4)) for p in b], (what, k)
    for name in names.values():
        cluster.client(0).delete_collection(name)


def api(cluster, k, method, path, body=None):
    """(status, headers, parsed body) of one request to node k, errors included."""
    req = urllib.request.Request(cluster.node_url(k) + path, method=method,
                                 data=None if body is None else json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.headers, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, e.headers, json.loads(e.read())


def test_strict_mode_is_checked_once_by_the_node_a_request_reaches(cluster):
    """Strict mode on a collection of several shards: the node a request reaches checks it
    once, before a write is logged and before a read fans out; the reads it then makes of
    the shards on the request's behalf (a facet's long lists, grouping's second asks) are
    not judged again by the replicas. Rates are this node's own."""
    name = "strict_three"
    create_and_wait(cluster, name, shards=3, replicas=1)
    cluster.client(0).upsert(name, wait=True, points=[
        point(i, {"k": f"v{i % 12}", "g": i % 5}) for i in range(60)])
    status, _, _ = api(cluster, 0, "PATCH", f"/collections/{name}", {"strict_mode_config": {
        "enabled": True, "max_query_limit": 5, "upsert_max_batchsize": 10}})
    assert status == 200
    # Every node checks it as soon as the change is acknowledged (the map is in etcd).
    def refusal(k, method, path, body, code, words):
        status, _, out = api(cluster, k, method, path, body)
        assert status == code and words in out["status"]["error"], (k, status, out)

    for k in range(NODES):
        eventually(lambda: refusal(k, "POST", f"/collections/{name}/points/query",
                                   {"query": vectors_of([1])[0].tolist(), "limit": 6}, 400, '"limit"'), 5)
        status, _, out = api(cluster, k, "POST", f"/collections/{name}/points/query",
                             {"query": vectors_of([1])[0].tolist(), "limit": 5})
        assert status == 200 and len(out["result"]["points"]) == 5, (k, out)
    # A client reading a replica itself is checked as the router checks the collection;
    # what nodes ask each other is theirs only.
    held_here = next((k, s) for k in range(NODES) for s in replicas_on_disk(cluster, k, name, 3))
    refusal(held_here[0], "POST", f"/collections/{name}@{held_here[1]}/points/scroll", {"limit": 6}, 400, '"limit"')
    refusal(held_here[0], "PUT", f"/collections/{name}@{held_here[1]}/points?wait=true",
            {"points": [{"id": 1, "vector": vectors_of([1])[0].tolist()}]}, 400, "replica")
    refusal(0, "GET", f"/cluster/applied/{name}@0?uid=1&seqs=0&wait_ms=0", None, 403, "nodes only")
    # A facet asks each shard for far more than 5 values, and groups ask for more groups
    # than the request: both are the router's own reads.
    status, _, out = api(cluster, 1, "POST", f"/collections/{name}/facet", {"key": "k", "limit": 5})
    assert status == 200, out
    assert [h["count"] for h in out["result"]["hits"]] == [5] * 5, out
    status, _, out = api(cluster, 2, "POST", f"/collections/{name}/points/query/groups",
                         {"query": vectors_of([1])[0].tolist(), "group_by": "g", "limit": 2, "group_size": 2})
    assert status == 200 and len(out["result"]["groups"]) == 2, out
    # A write over the batch limit is refused before it is logged, even without waiting.
    too_many = {"points": [{"id": 1000 + i, "vector": vectors_of([i])[0].tolist()} for i in range(11)]}
    status, _, out = api(cluster, 1, "PUT", f"/collections/{name}/points?wait=false", too_many)
    assert status == 400 and "upsert limit" in out["status"]["error"], out
    # The write rate: spent on the node that takes the write; the refusal says when to retry,
    # and what it refused was never logged.
    status, _, _ = api(cluster, 0, "PATCH", f"/collections/{name}", {"strict_mode_config": {
        "write_rate_limit": 25}})
    assert status == 200
    time.sleep(1)  # other nodes read the change from etcd within a quarter second
    batches = [[3000 + 10 * b + i for i in range(10)] for b in range(4)]
    answers = [api(cluster, 2, "PUT", f"/collections/{name}/points?wait=true",
                   {"points": [{"id": i, "vector": vectors_of([i % 60])[0].tolist()} for i in ids]})
               for ids in batches]
    assert [a[0] for a in answers[:2]] == [200, 200], answers
    refused = [ids for ids, a in zip(batches, answers) if a[0] == 429]
    assert refused, answers
    assert all(a[1]["Retry-After"] for a in answers if a[0] == 429), answers
    held = {p.id for p in cluster.client(0).retrieve(name, ids=[i for ids in batches for i in ids])}
    assert not held & {i for ids in refused for i in ids}, held
    # The read rate: each request costs its query vectors once, however many shards it
    # reaches. Node 1 runs out; node 0 still has its own.
    status, _, _ = api(cluster, 0, "PATCH", f"/collections/{name}", {"strict_mode_config": {
        "read_rate_limit": 12}})
    assert status == 200
    time.sleep(1)  # as above
    reads = [api(cluster, 1, "POST", f"/collections/{name}/points/query",
                 {"query": vectors_of([2])[0].tolist(), "limit": 3}) for _ in range(14)]
    codes = [r[0] for r in reads]
    assert codes[:12] == [200] * 12 and codes[12:] == [429, 429], codes
    assert reads[-1][1]["Retry-After"], reads[-1]
    status, _, _ = api(cluster, 0, "POST", f"/collections/{name}/points/query",
                       {"query": vectors_of([2])[0].tolist(), "limit": 3})
    assert status == 200
    cluster.client(0).delete_collection(name)


def metrics_text(cluster, k, query=""):
    with urllib.request.urlopen(f"{cluster.node_url(k)}/metrics{query}", timeout=10) as r:
        return r.read().decode()


def test_every_node_reports_each_cluster_collection_under_its_name(cluster):
    """/metrics and /telemetry on a cluster node report a cluster collection under its own
    name, as Qdrant's peers do: the points of this node's replicas summed (none where it
    holds none), and the requests it routed for that collection."""
    name = "reported"
    create_and_wait(cluster, name, shards=3, replicas=1)
    cluster.client(1).upsert(name, wait=True, points=[point(i, {"n": i}) for i in range(90)])
    cluster.client(2).scroll(name, limit=5)
    held = {}
    for k in range(NODES):
        text = metrics_text(cluster, k)
        line = [x for x in text.splitlines() if x.startswith(f'collection_points{{id="{name}"}}')]
        assert len(line) == 1, (k, [x for x in text.splitlines() if name in x])
        held[k] = int(float(line[0].split()[-1]))
        assert f'id="{name}@' not in text, k
        telemetry = cluster.get(k, "/telemetry?details_level=2")
        ids = [c["id"] for c in telemetry["collections"]["collections"]]
        assert ids.count(name) == 1 and not any(i.startswith(name + "@") for i in ids), (k, ids)
    # Each point is on one replica: the nodes' counts add up to the collection's.
    assert sum(held.values()) == 90, held
    per = metrics_text(cluster, 2, "?per_collection=true")
    assert any(x.startswith("rest_responses_total") and f'collection="{name}"' in x and "scroll" in x
               for x in per.splitlines()), [x for x in per.splitlines() if "rest_responses_total" in x]
    cluster.client(0).delete_collection(name)


def segment_inodes(cluster, k, local):
    """{inode: file name} of the sealed segment files of node k's local collection `local`."""
    found = {}
    for f in (cluster.work / f"node{k}" / "collections" / local / "segments").rglob("*"):
        if f.is_file():
            found[f.stat().st_ino] = f.name
    return found


def test_replica_between_shared_storage_nodes_opens_the_sealed_segments_where_they_lie(cluster):
    """Nodes 1 and 2 share their storage (--shared-storage): a replica made on one from the
    other opens the same sealed segment files (the same inodes), copies none of them, and
    then lives on its own; to node 0 the replica is copied."""
    name = "shared"
    body = {"vectors": {"size": DIM, "distance": "Cosine"}, "shard_number": 1, "replication_factor": 1,
            "diskvec": {"seal_threshold": 300}}
    req = urllib.request.Request(f"{cluster.node_url(1)}/collections/{name}", data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"}, method="PUT")
    urllib.request.urlopen(req, timeout=10).read()
    wait_active(cluster, name, shards=1, replicas=1)
    peer = {k: cluster.get(k, "/cluster")["peer_id"] for k in range(NODES)}
    src = shard_holders(cluster, name)[0][0]
    if src not in SHARED_STORAGE:
        assert shard_op(cluster, name, {"move_shard": {
            "shard_id": 0, "from_peer_id": peer[src], "to_peer_id": peer[1]}}) is True
        src = 1
        shard_holders(cluster, name, lambda h: h[0] == [1])
    dst = next(iter(SHARED_STORAGE - {src}))
    want = {i: ({"n": i}, vectors_of([i])[0]) for i in range(1000)}
    for lo in range(0, 1000, 250):
        cluster.client(0).upsert(name, wait=True, points=[point(i, want[i][0]) for i in range(lo, lo + 250)])
    # Sealed (and merged) in the background: at least two segments, and no file of them changed
    # for two seconds, before the replica is made; a segment sealed later on the source is its
    # own, not the replica's.
    seen = {"files": None, "since": time.monotonic()}
    def sealed_and_settled():
        files = segment_inodes(cluster, src, f"{name}@0")
        segments = {f.parent.name for f in
                    (cluster.work / f"node{src}" / "collections" / f"{name}@0" / "segments").rglob("*")
                    if f.is_file()}
        if files != seen["files"]:
            seen.update(files=files, since=time.monotonic())
        assert len(segments) >= 2, segments
        assert time.monotonic() - seen["since"] >= 2.0, "segment files still changing"
    eventually(sealed_and_settled, 60)

    assert shard_op(cluster, name, {"replicate_shard": {
        "shard_id": 0, "from_peer_id": peer[src], "to_peer_id": peer[dst]}}) is True
    shard_holders(cluster, name, lambda h: h[0] == sorted([src, dst]))
    assert "where they lie" in cluster.logs[dst].read_text(errors="replace")
    mine, theirs = segment_inodes(cluster, src, f"{name}@0"), segment_inodes(cluster, dst, f"{name}@0")
    assert theirs and set(theirs) <= set(mine), (mine, theirs)
    assert_replicas_hold(cluster, name, want, shards=1, replicas=2)

    # Each replica goes on by itself: writes after, then the source's replica dropped.
    extra = {i: ({"n": i, "late": True}, vectors_of([i])[0]) for i in range(1000, 1400)}
    cluster.client(2).upsert(name, wait=True, points=[point(i, p) for i, (p, _) in extra.items()])
    cluster.client(0).delete(name, points_selector=models.PointIdsList(points=[1, 2, 3]), wait=True)
    want.update(extra)
    for i in (1, 2, 3):
        del want[i]
    assert_replicas_hold(cluster, name, want, shards=1, replicas=2)
    assert shard_op(cluster, name, {"drop_replica": {"shard_id": 0, "peer_id": peer[src]}}) is True
    shard_holders(cluster, name, lambda h: h[0] == [dst])
    assert_replicas_hold(cluster, name, want, shards=1, replicas=1)

    # To node 0, which does not share its storage: copied, no inode in common.
    assert shard_op(cluster, name, {"replicate_shard": {
        "shard_id": 0, "from_peer_id": peer[dst], "to_peer_id": peer[0]}}) is True
    shard_holders(cluster, name, lambda h: h[0] == sorted([0, dst]))
    assert not set(segment_inodes(cluster, 0, f"{name}@0")) & set(segment_inodes(cluster, dst, f"{name}@0"))
    assert_replicas_hold(cluster, name, want, shards=1, replicas=2)
    cluster.client(0).delete_collection(name)


# ---- security ------------------------------------------------------------------------------

def etcd_keys(cluster):
    """Every key etcd holds, {key: value}, read through its gateway from "\\0" to the end."""
    port = cluster.etcd.clients[0]
    r = http_json(f"http://{HOST}:{port}/v3/kv/range", {"key": "AA==", "range_end": "AA=="})
    return {base64.b64decode(kv["key"]): base64.b64decode(kv.get("value", ""))
            for kv in r.get("kvs", [])}


def test_the_secret_is_not_kept_in_etcd(cluster):
    keys = etcd_keys(cluster)
    assert any(k.startswith(b"/diskvec/nodes/") for k in keys), sorted(keys)
    assert b"/diskvec-internal/secret-check" in keys, sorted(keys)
    assert b"/diskvec-internal/secret" not in keys, sorted(keys)
    for k, v in keys.items():
        assert SECRET.encode() not in k + v, k


def refused_messages(cluster):
    return sum(cluster.get(k, "/cluster")["log"]["refused_messages"] for k in range(NODES))


def test_log_messages_from_outside_the_cluster_are_not_applied(cluster):
    """Anyone who reaches NATS can append to a shard's log; a replica applies only what a
    node of the cluster appended (signed with the cluster's secret)."""
    name = "forged"
    create_and_wait(cluster, name, shards=1, replicas=3)
    port = cluster.nats.clients[0]
    streams = nats_request(port, "$JS.API.STREAM.NAMES", b"{}")["streams"]
    stream = next(s for s in streams if s.startswith(f"dv_{name}_"))
    before = refused_messages(cluster)
    forged = {"method": "PUT", "path": "/points", "query": "",
              "body": {"points": [{"id": 666, "vector": [1.0] * DIM, "payload": {"forged": True}}]}}
    body = json.dumps(forged).encode()
    assert "seq" in jetstream_publish(port, stream, body), "no tag"
    tag = {"Nats-Msg-Id": "forged-1", "Diskvec-Time": str(int(time.time() * 1000)),
           "Diskvec-Tag": "v1." + "00" * 32}
    assert "seq" in jetstream_publish(port, stream, body, tag), "a made-up tag"
    # The cluster's own write, after them in the log.
    cluster.client(1).upsert(name, points=[models.PointStruct(id=1, vector=[0.5] * DIM, payload={"own": True})])

    def applied_by_every_replica():
        held = read_replicas(cluster, name)[0]
        assert len(held) == 3, held
        for k, points in held.items():
            assert 1 in points and 666 not in points, (k, sorted(points))
    eventually(applied_by_every_replica, 30)
    assert refused_messages(cluster) - before == 2 * 3
    assert cluster.client(0).retrieve(name, [666]) == []


def test_a_node_without_the_clusters_secret_does_not_start(cluster, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "DISKVEC_CLUSTER_SECRET"}
    argv = [str(BIN), "serve", "--db", str(tmp_path / "db"), "--port", "0", *cluster.flags,
            "--node-id", "stranger"]
    for secret, said in [(None, "--cluster-secret-file"), ("short", "at least 16"),
                         ("another secret, long enough to be taken", "not the one")]:
        run_env = env if secret is None else {**env, "DISKVEC_CLUSTER_SECRET": secret}
        r = subprocess.run(argv, env=run_env, capture_output=True, timeout=60)
        err = r.stderr.decode(errors="replace")
        assert r.returncode != 0 and said in err, (secret, r.returncode, err)
    assert not any(k.endswith(b"/stranger") for k in etcd_keys(cluster))
