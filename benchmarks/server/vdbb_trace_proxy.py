"""A logging HTTP proxy: shows which REST requests a client (VectorDBBench's qdrantlocal)
sends to a Qdrant-compatible server, and what comes back.

    python vdbb_trace_proxy.py LISTEN_PORT UPSTREAM_PORT LOG_FILE

Every request is forwarded to 127.0.0.1:UPSTREAM_PORT; LOG_FILE gets one JSON line per
exchange (method, path, request body, status, response body), with long float lists cut
down to their first three numbers so the shapes stay readable. Only for short traces: it
adds latency, so never put it in front of a timed run.
"""

import http.client
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOCK = threading.Lock()


def shrink(v):
    if isinstance(v, list):
        if len(v) > 3 and all(isinstance(x, (int, float)) for x in v):
            return v[:3] + [f"... {len(v)} numbers"]
        if len(v) > 3:
            return [shrink(x) for x in v[:2]] + [f"... {len(v)} items"]
        return [shrink(x) for x in v]
    if isinstance(v, dict):
        return {k: shrink(x) for k, x in v.items()}
    return v


def decode(raw: bytes):
    if not raw:
        return None
    try:
        return shrink(json.loads(raw))
    except ValueError:
        return raw[:300].decode("utf-8", "replace")


def main():
    listen, upstream, log_path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    log = open(log_path, "a", encoding="utf-8")

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def forward(self):
            n = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(n) if n else b""
            headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
            conn = http.client.HTTPConnection("127.0.0.1", upstream, timeout=600)
            conn.request(self.command, self.path, body=body or None, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            conn.close()
            self.send_response(resp.status)
            for k, v in resp.getheaders():
                if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            entry = {
                "method": self.command,
                "path": self.path,
                "request": decode(body),
                "status": resp.status,
                "response": decode(data),
            }
            with LOCK:
                log.write(json.dumps(entry) + "\n")
                log.flush()

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = forward

    ThreadingHTTPServer(("127.0.0.1", listen), Handler).serve_forever()


if __name__ == "__main__":
    main()
