"""`llmop serve` as a child process on a free local port, ready when `/ready` answers 200.

The demo, the benchmarks and the end-to-end tests of the server each start one; this is the one
way they do it, so a change to how the server starts (a flag, the readiness endpoint) is made once.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http_ok(url: str, proc: subprocess.Popen, timeout_s: float) -> bool:
    """Poll `url` until it answers 200 (True), or until `proc` exits or `timeout_s` passes (False)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=5).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            return False
        time.sleep(0.25)
    return False


class ServeProcess:
    """`llmop serve ARGS --port <free>`: `.url`, `.proc`; output to `log` (else inherited).

    Start-up raises RuntimeError when the process exits or is not ready within `ready_timeout_s`
    (the process is then stopped). As a context manager it stops on exit: SIGTERM, then SIGKILL
    after `stop_timeout_s`."""

    def __init__(self, args: list[str], log: Path | None = None, ready_timeout_s: float = 600,
                 stop_timeout_s: float = 60):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log, self.stop_timeout_s = log, stop_timeout_s
        cmd = [str(Path(sys.executable).with_name("llmop")), "serve", *args, "--port", str(self.port)]
        out = log.open("ab") if log is not None else None
        try:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT if out else None,
                                         env={**os.environ, "PYTHONSAFEPATH": "1"})  # fmt: skip
        finally:
            if out is not None:
                out.close()
        try:
            self._wait_ready(ready_timeout_s)
        except BaseException:
            self.stop()
            raise

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _wait_ready(self, timeout_s: float) -> None:
        where = f" (log: {self.log})" if self.log else ""
        if wait_http_ok(self.url + "/ready", self.proc, timeout_s):
            return
        if self.proc.poll() is not None:
            raise RuntimeError(f"llmop serve exited during start-up with {self.proc.returncode}{where}")
        raise RuntimeError(f"llmop serve was not ready within {timeout_s:.0f} s{where}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(self.stop_timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self) -> "ServeProcess":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
