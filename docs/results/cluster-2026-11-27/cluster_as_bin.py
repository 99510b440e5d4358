"""`serve --db D --host H --port P` as node 0 of a three-node cluster (see cluster_as_bin.sh);
the other nodes, etcd and NATS are started beside D and stopped with it (SIGTERM)."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "crates" / "server" / "python_tests"))
import test_cluster as harness  # noqa: E402

args = sys.argv[1:]
assert args[0] == "serve", args
db = Path(args[args.index("--db") + 1])
port = args[args.index("--port") + 1]
work = db.parent / "cluster"
work.mkdir(parents=True, exist_ok=True)
etcd, nats = harness.Etcd(work), harness.Nats(work)
etcd.start_all()
nats.start_all()
# The nodes' shared secret (a cluster node needs one since the log is signed), inherited
# through the environment.
os.environ.setdefault("DISKVEC_CLUSTER_SECRET", harness.SECRET)
flags = ["--cluster", "etcd://" + ",".join(f"127.0.0.1:{p}" for p in etcd.clients),
         "--log", ",".join(f"nats://127.0.0.1:{p}" for p in nats.clients)]
nodes = [subprocess.Popen([str(harness.BIN), "serve", "--db", str(db), "--host", "127.0.0.1",
                           "--port", port, *flags, "--node-id", "n0"])]
for k in (1, 2):
    nodes.append(subprocess.Popen(
        [str(harness.BIN), "serve", "--db", str(work / f"node{k}"), "--port", "0", *flags,
         "--node-id", f"n{k}"], stderr=open(work / f"node{k}.log", "w")))


def stop(*_):
    harness.stop(nodes)
    nats.stop_all()
    etcd.stop_all()
    sys.exit(0)


signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGINT, stop)
while nodes[0].poll() is None:
    time.sleep(0.5)
stop()
