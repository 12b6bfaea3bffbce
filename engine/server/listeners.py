"""Two listeners, one server: the inference port for clients, the admin port for the operator.

The admin API must not be reachable where clients are, so it gets its own socket (loopback unless
configured otherwise), and a request is routed by the local port it arrived on, which a client
cannot forge (it is the socket's, not a header). Both sockets are served by one uvicorn server, so
there is one event loop, one lifespan (the inference app's: it runs the engine) and one drain.
"""

from __future__ import annotations

import socket

from fastapi import FastAPI


def listen(host: str, port: int) -> socket.socket:
    """A bound socket (port 0: a free one); uvicorn listens on it."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    return sock


def port_of(sock: socket.socket) -> int:
    return sock.getsockname()[1]


class PortDispatch:
    """ASGI: HTTP requests that arrived on `admin_port` go to `admin_app`; everything else,
    lifespan included, to `app`. `state` is the inference app's (the drain reads it)."""

    def __init__(self, app: FastAPI, admin_app: FastAPI, admin_port: int):
        self.app, self.admin_app, self.admin_port = app, admin_app, admin_port
        self.state = app.state

    async def __call__(self, scope, receive, send):
        server = scope.get("server") or (None, None)
        if scope["type"] in ("http", "websocket") and server[1] == self.admin_port:
            return await self.admin_app(scope, receive, send)
        return await self.app(scope, receive, send)


def served(app: FastAPI, admin_app: FastAPI | None, sock: socket.socket, admin_sock: socket.socket | None):
    """The ASGI app to serve on `sock` (and `admin_sock`, when there is an admin app)."""
    if admin_app is None:
        return app
    return PortDispatch(app, admin_app, port_of(admin_sock))
