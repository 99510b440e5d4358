"""The replicated log's and the control plane's cost on loopback, for the choice in
docs/design-scale-out.md: a NATS JetStream stream with 3 replicas on 3 nats-server
processes (publish until the stream acknowledges: stored on a quorum), and etcd with 3
members (a compare-and-swap transaction on one key, as a shard-map change is).

    python logbench.py WORK_DIR OUT.json [NATSBENCH]   # needs nats-server, etcd (Debian), nats-py, requests

NATSBENCH: the Rust client's run against the same servers (`natsbench/`, built with
`cargo build --release` there: async-nats, the client the cluster would use).

Each case: `--publishers` concurrent publishers, each sending messages one at a time and
waiting for the acknowledgement; reported: acknowledged messages per second, and the median
and 99th percentile of the publish-to-acknowledgement time.
"""
import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import requests


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_nats(work, n=3):
    clients = [free_port() for _ in range(n)]
    routes = [free_port() for _ in range(n)]
    procs = []
    for i in range(n):
        store = os.path.join(work, f"nats{i}")
        os.makedirs(store, exist_ok=True)
        conf = os.path.join(work, f"nats{i}.conf")
        others = ",".join(f"nats-route://127.0.0.1:{r}" for j, r in enumerate(routes) if j != i)
        open(conf, "w").write(
            f"server_name: n{i}\nlisten: 127.0.0.1:{clients[i]}\n"
            f"jetstream {{ store_dir: \"{store}\" }}\n"
            f"cluster {{ name: bench, listen: 127.0.0.1:{routes[i]}, routes: [{others}] }}\n")
        procs.append(subprocess.Popen(["nats-server", "-c", conf], stdout=subprocess.DEVNULL,
                                      stderr=open(os.path.join(work, f"nats{i}.log"), "w")))
    return clients, procs


def start_etcd(work, n=3):
    peers = [free_port() for _ in range(n)]
    clients = [free_port() for _ in range(n)]
    cluster = ",".join(f"e{i}=http://127.0.0.1:{p}" for i, p in enumerate(peers))
    procs = []
    for i in range(n):
        procs.append(subprocess.Popen(
            ["etcd", "--name", f"e{i}", "--data-dir", os.path.join(work, f"etcd{i}"),
             "--listen-peer-urls", f"http://127.0.0.1:{peers[i]}",
             "--initial-advertise-peer-urls", f"http://127.0.0.1:{peers[i]}",
             "--listen-client-urls", f"http://127.0.0.1:{clients[i]}",
             "--advertise-client-urls", f"http://127.0.0.1:{clients[i]}",
             "--initial-cluster", cluster, "--initial-cluster-state", "new"],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, f"etcd{i}.log"), "w")))
    return clients, procs


def summary(latencies, seconds):
    latencies.sort()
    return {"per_s": round(len(latencies) / seconds, 1),
            "p50_ms": round(latencies[len(latencies) // 2] * 1000, 3),
            "p99_ms": round(latencies[int(len(latencies) * 0.99)] * 1000, 3)}


async def nats_cases(ports):
    import nats
    nc = await nats.connect([f"nats://127.0.0.1:{p}" for p in ports])
    js = nc.jetstream()
    for _ in range(100):
        try:
            await js.add_stream(name="shard", subjects=["shard.>"], num_replicas=3)
            break
        except Exception:
            await asyncio.sleep(0.2)
    out = {}
    for size, label in ((1024, "1KiB"), (300 * 1024, "300KiB")):
        body = os.urandom(size)
        for publishers in (1, 4, 16):
            count = 400 if size < 10_000 else 100
            latencies = []

            async def one(k):
                for _ in range(count // publishers):
                    t = time.perf_counter()
                    await js.publish("shard.w", body)
                    latencies.append(time.perf_counter() - t)
            started = time.perf_counter()
            await asyncio.gather(*(one(k) for k in range(publishers)))
            out[f"nats R3 {label} x{publishers}"] = summary(latencies, time.perf_counter() - started)
    await nc.close()
    return out


def etcd_cases(ports):
    base = f"http://127.0.0.1:{ports[0]}/v3"
    b64 = lambda s: __import__("base64").b64encode(s.encode()).decode()
    for _ in range(100):
        try:
            requests.post(f"{base}/kv/put", json={"key": b64("map"), "value": b64("0")}, timeout=1).raise_for_status()
            break
        except Exception:
            time.sleep(0.2)
    latencies = []
    started = time.perf_counter()
    for i in range(300):
        rev = int(requests.post(f"{base}/kv/range", json={"key": b64("map")}).json()["kvs"][0]["mod_revision"])
        t = time.perf_counter()
        r = requests.post(f"{base}/kv/txn", json={
            "compare": [{"key": b64("map"), "target": "MOD", "result": "EQUAL", "mod_revision": rev}],
            "success": [{"request_put": {"key": b64("map"), "value": b64(str(i))}}]}).json()
        assert r.get("succeeded"), r
        latencies.append(time.perf_counter() - t)
    return {"etcd 3 members CAS": summary(latencies, time.perf_counter() - started)}


def local_sync_case(work):
    """What one write costs diskvec today: an append and fdatasync of the local log."""
    out = {}
    for size, label in ((1024, "1KiB"), (300 * 1024, "300KiB")):
        body = os.urandom(size)
        fd = os.open(os.path.join(work, f"wal-{label}"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        latencies = []
        started = time.perf_counter()
        for _ in range(200):
            t = time.perf_counter()
            os.write(fd, body)
            os.fdatasync(fd)
            latencies.append(time.perf_counter() - t)
        os.close(fd)
        out[f"local append+fdatasync {label}"] = summary(latencies, time.perf_counter() - started)
    return out


work, out = sys.argv[1:3]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
nats_ports, nats_procs = start_nats(work)
etcd_ports, etcd_procs = start_etcd(work)
try:
    time.sleep(2)
    results = asyncio.run(nats_cases(nats_ports))
    if len(sys.argv) > 3:
        urls = ",".join(f"nats://127.0.0.1:{p}" for p in nats_ports)
        run = subprocess.run([sys.argv[3], urls], capture_output=True, text=True)
        if run.returncode != 0:
            raise SystemExit(f"natsbench failed: {run.stderr}")
        results.update(json.loads(run.stdout))
    results.update(etcd_cases(etcd_ports))
    results.update(local_sync_case(work))
finally:
    for p in nats_procs + etcd_procs:
        p.send_signal(signal.SIGTERM)
    for p in nats_procs + etcd_procs:
        p.wait(timeout=20)
json.dump(results, open(out, "w"), indent=1)
for k, v in results.items():
    print(k, v)
