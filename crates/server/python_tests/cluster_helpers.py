"""What the cluster tests (test_cluster.py, test_cluster_partition.py) share: waiting on a
condition, finding the servers they start, reading their logs."""
import json
import os
import shutil
import time
from pathlib import Path

import numpy as np
import pytest


def need(name):
    # Debian puts nats-server in /usr/sbin, which a non-root PATH may lack.
    path = shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")
    if path is None:
        message = f"{name} is not installed (Debian: apt-get install etcd-server nats-server)"
        if os.environ.get("DISKVEC_REQUIRE_CLUSTER"):  # CI: a missing server must fail, not skip
            pytest.fail(message)
        pytest.skip(message)
    return path


def nats_reply(sock, f):
    """The JSON reply to a request made over NATS's text protocol on `sock` (read through
    `f`), answering the server's pings meanwhile."""
    while True:
        line = f.readline()
        if line.startswith(b"PING"):
            sock.sendall(b"PONG\r\n")
        elif line.startswith(b"MSG "):
            size = int(line.split()[-1])
            return json.loads(f.read(size + 2)[:size])
        else:
            raise RuntimeError(f"nats: {line!r}")


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


def log_tail(path, lines=30):
    return "".join(Path(path).read_text(errors="replace").splitlines(True)[-lines:])


def normalized(x):
    x = np.asarray(x, dtype=np.float32)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)
