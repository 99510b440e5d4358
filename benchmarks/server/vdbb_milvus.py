"""Run Milvus 2.3.5 standalone (PyPI `milvus==2.3.5`, its bundled server) for vdbb_run.sh.

    python vdbb_milvus.py DATA_DIR PORT_FILE

Starts the server with its data under DATA_DIR, on 127.0.0.1 and a free gRPC port (every
other port it needs is picked free too), writes that port to PORT_FILE once the server
answers its health check, then waits. SIGTERM or SIGINT stops the server (the package's
own stop: SIGTERM to milvus, SIGKILL a second later if it lingers) and exits.
"""

import signal
import socket
import sys
import time


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    data_dir, port_file = sys.argv[1], sys.argv[2]
    from milvus import MilvusServer, MilvusServerConfig

    server = MilvusServer(MilvusServerConfig())
    server.set_base_dir(data_dir)
    server.listen_port = free_port()
    # The REST/metrics port (9091 by default) is probed upward from this start.
    server.webservice_port = free_port()
    stop = {"now": False}

    def on_signal(*_):
        stop["now"] = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    server.start()
    port = server.listen_port
    with open(port_file, "w") as f:
        f.write(f"{port}\n")
    print(f"milvus 2.3.5 listening on 127.0.0.1:{port}, data {data_dir}", flush=True)
    try:
        while not stop["now"] and server.server_proc.poll() is None:
            time.sleep(0.5)
        if server.server_proc.poll() is not None:
            print(f"milvus exited by itself: {server.server_proc.returncode}", file=sys.stderr)
            return 1
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
