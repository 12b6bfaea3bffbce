"""Running an app on uvicorn: in the foreground with SIGTERM drain, or on a background thread.

uvicorn's own SIGTERM handling closes the listening socket at once, so a request arriving during
shutdown would be refused at the TCP level instead of getting a 503, and in-flight streams would
be cut by its graceful timeout. `DrainingServer` changes the first SIGTERM/SIGINT into a drain:
readiness false and 503 for new requests while the socket stays open, in-flight requests finish
(up to drain_timeout_s), then the normal uvicorn shutdown, and the process exits 0. A second
signal forces the exit.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
from types import FrameType

import uvicorn
from fastapi import FastAPI

from llmop.engine.server.listeners import listen, port_of, served

log = logging.getLogger("llmop.server")


class DrainingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, drain_timeout_s: float):
        super().__init__(config)
        self.drain_timeout_s = drain_timeout_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._drain_task: asyncio.Task | None = None

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self._drain_task is not None or self._loop is None:
            return super().handle_exit(sig, frame)  # second signal: shut down now
        self._loop.call_soon_threadsafe(self.start_drain)

    def start_drain(self) -> None:
        """Begin the drain (idempotent); the server exits once it is over."""
        if self._drain_task is None:
            self._drain_task = asyncio.ensure_future(self._drain())

    async def _drain(self) -> None:
        state = self.config.app.state.llmop
        log.info("draining: %d requests in flight, waiting up to %.0fs", state.num_in_flight, self.drain_timeout_s)
        done = await state.drain(self.drain_timeout_s)
        if not done:
            log.warning("drain timeout: %d requests still in flight are cut", state.num_in_flight)
        self.should_exit = True


def uvicorn_config(app, host: str, port: int, log_level: str = "info") -> uvicorn.Config:
    return uvicorn.Config(app, host=host, port=port, log_level=log_level, timeout_graceful_shutdown=5,
                          access_log=False, lifespan="on")


class BackgroundServer:
    """An app served on a background thread, on a free port of 127.0.0.1 (tests, benchmarks); with
    `admin_app`, that one on a second free port (`admin_url`)."""

    def __init__(self, app: FastAPI, drain_timeout_s: float = 30.0, log_level: str = "warning",
                 admin_app: FastAPI | None = None):
        self.sock = listen("127.0.0.1", 0)
        self.admin_sock = listen("127.0.0.1", 0) if admin_app is not None else None
        self.port = port_of(self.sock)
        self.url = f"http://127.0.0.1:{self.port}"
        self.admin_url = f"http://127.0.0.1:{port_of(self.admin_sock)}" if self.admin_sock else None
        sockets = [s for s in (self.sock, self.admin_sock) if s is not None]
        asgi = served(app, admin_app, self.sock, self.admin_sock)
        self.server = DrainingServer(uvicorn_config(asgi, "127.0.0.1", self.port, log_level), drain_timeout_s)
        self._thread = threading.Thread(target=self.server.run, kwargs={"sockets": sockets},
                                        name=f"uvicorn-{self.port}", daemon=True)

    def start(self, timeout: float = 60.0) -> "BackgroundServer":
        self._thread.start()
        waited = 0.0
        while not self.server.started:
            if not self._thread.is_alive():
                raise RuntimeError("the server thread died during start-up")
            self._thread.join(0.05)
            waited += 0.05
            if waited > timeout:
                raise TimeoutError("the server did not start")
        return self

    def drain(self) -> None:
        """What SIGTERM does, for a server on a thread (signals go to the main thread only)."""
        self.server._loop.call_soon_threadsafe(self.server.start_drain)

    def stop(self, timeout: float = 30.0) -> None:
        self.server.should_exit = True
        self._thread.join(timeout)
        self.sock.close()
        if self.admin_sock is not None:
            self.admin_sock.close()

    def __enter__(self) -> "BackgroundServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
