"""The liveness endpoint of a replica that waits for leadership.

kopf serves `--liveness` only once it runs, and a standby replica does not run kopf until it leads;
without an answer the kubelet's liveness probe would restart a healthy standby over and over. This
answers the same URL while the replica waits, and frees the port before kopf binds it.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse


class _Handler(BaseHTTPRequestHandler):
    path_served = "/"

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        ok = self.path == self.path_served
        body = b"standby: waiting for leadership\n" if ok else b"not found\n"
        self.send_response(200 if ok else 404)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args) -> None:  # probes every few seconds: not worth a log line each
        pass


class StandbyHealth:
    """`with StandbyHealth(url):` answers GET on `url`'s path with 200 (no-op for an empty url)."""

    def __init__(self, url: str | None):
        self.url = urlparse(url) if url else None
        self.server: ThreadingHTTPServer | None = None

    def __enter__(self) -> "StandbyHealth":
        if self.url is not None:
            handler = type("StandbyHandler", (_Handler,), {"path_served": self.url.path or "/"})
            self.server = ThreadingHTTPServer((self.url.hostname or "0.0.0.0", self.url.port or 80), handler)
            threading.Thread(target=self.server.serve_forever, name="standby-health", daemon=True).start()
        return self

    def __exit__(self, *_exc) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None
