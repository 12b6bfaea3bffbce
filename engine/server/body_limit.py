"""Refuse request bodies over a byte limit before anything parses them (413, OpenAI error body).

A declared Content-Length over the limit is refused without reading; a chunked body is read up to
the limit and refused as soon as it passes it. The accepted body is then replayed to the app, and
later `receive()` calls (disconnect detection) go to the server as usual. Plain ASGI middleware,
because starlette's BaseHTTPMiddleware would break streaming responses' disconnect handling.
"""

from __future__ import annotations

import json
from typing import Callable

from llmop.engine.server.errors import error_body


class BodyLimitMiddleware:
    def __init__(self, app, max_bytes: int, on_reject: Callable[[str], None] | None = None):
        self.app = app
        self.max_bytes = max_bytes
        self.on_reject = on_reject

    async def _refuse(self, send, size: str) -> None:
        if self.on_reject is not None:
            self.on_reject("body_too_large")
        body = json.dumps(error_body(413, f"the request body ({size}) exceeds the limit of {self.max_bytes} bytes",
                                     code="body_too_large")).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            return await self.app(scope, receive, send)
        for name, value in scope["headers"]:
            if name == b"content-length" and value.isdigit() and int(value) > self.max_bytes:
                return await self._refuse(send, f"{int(value)} bytes")
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # disconnected while sending the body
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.max_bytes:
                return await self._refuse(send, f"over {size} bytes")
            if not message.get("more_body", False):
                break
        replay = [{"type": "http.request", "body": b"".join(chunks), "more_body": False}]

        async def replaying_receive():
            return replay.pop() if replay else await receive()

        return await self.app(scope, replaying_receive, send)
