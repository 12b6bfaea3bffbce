"""Faults the dev plane suffers on purpose, so tests can show the operator converging through them:
the API server restarted (every watch and connection drops), etcd frozen (requests hang, then time
out), and etcd's history compacted (a watch resuming from before it gets 410 Gone and must list
again: what a client whose watch expired goes through).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import time
import urllib.request
from collections.abc import Iterator

from . import runner
from .plane import Layout, Ports


def restart_apiserver(layout: Layout, ports: Ports = Ports()) -> float:
    """kube-apiserver stopped and started again; returns the seconds until it was ready."""
    start = time.monotonic()
    runner.restart_process(layout, "kube-apiserver", ports)
    return time.monotonic() - start


@contextlib.contextmanager
def etcd_paused(layout: Layout) -> Iterator[None]:
    """etcd stopped with SIGSTOP for the block (the API server's requests to it hang), then SIGCONT."""
    pid = runner.pid_of(layout, "etcd")
    if pid is None:
        raise runner.ClusterError("etcd is not running")
    os.killpg(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.killpg(pid, signal.SIGCONT)


def _etcd(ports: Ports, path: str, body: dict) -> dict:
    req = urllib.request.Request(f"http://127.0.0.1:{ports.etcd_client}{path}", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"}, method="POST")  # fmt: skip
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


def compact_etcd(ports: Ports = Ports()) -> int:
    """Compact etcd's history up to its current revision (through its JSON gateway); returns that
    revision. Watches resuming from any older resourceVersion are then answered 410 Gone."""
    key = base64.b64encode(b"/registry/").decode()
    revision = int(_etcd(ports, "/v3/kv/range", {"key": key, "limit": 1})["header"]["revision"])
    _etcd(ports, "/v3/kv/compaction", {"revision": str(revision), "physical": True})
    return revision
