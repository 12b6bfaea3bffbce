"""The admin listener's app: the adapter admin API behind the admin credential.

Mutations change what every tenant of the engine gets, so they are not on the inference port at
all: they are served on `admin_port` (loopback by default), and every request must carry the
credential from `admin_token_file`. The credential is checked first, before the body is read or
parsed, so a caller without it learns nothing but 401. The app shares the inference app's
`ServerState` (one engine, one drain); the inference app owns the engine's lifespan, so this one
has none. Its OpenAPI document is off: nothing here is for clients.
"""

from __future__ import annotations

from fastapi import FastAPI
from starlette.requests import Request

from llmop.engine.server import adapters_api
from llmop.engine.server.body_limit import BodyLimitMiddleware
from llmop.engine.server.credential import AdminCredential, check_admin
from llmop.engine.server.errors import APIError, error_response, install_error_handlers
from llmop.engine.server.state import ServerState


class AdminAuthMiddleware:
    """Plain ASGI: every HTTP request without the credential is answered 401 here."""

    def __init__(self, app, credential: AdminCredential, on_reject):
        self.app, self.credential, self.on_reject = app, credential, on_reject

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            try:
                check_admin(self.credential, Request(scope))
            except APIError as err:
                self.on_reject(err.reason)
                return await error_response(err)(scope, receive, send)
        return await self.app(scope, receive, send)


def create_admin_app(state: ServerState) -> FastAPI:
    """The admin app over the inference app's `state` (whose config names the credential)."""
    if state.credential is None:
        raise ValueError("the admin API needs admin_token_file")
    app = FastAPI(title="llmop engine admin", version="0.1.0", openapi_url=None, docs_url=None, redoc_url=None)
    app.state.llmop = state
    app.include_router(adapters_api.router)
    install_error_handlers(app, state.metrics.reject)
    app.add_middleware(BodyLimitMiddleware, max_bytes=state.config.max_request_body_bytes,
                       on_reject=state.metrics.reject)
    app.add_middleware(AdminAuthMiddleware, credential=state.credential, on_reject=state.metrics.reject)
    return app
