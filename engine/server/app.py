"""The app factory: `create_app(engine, config)` wires state, routers, limits and error handlers.

Each router is its own module; a feature adds its routes by adding its router to `ROUTERS` (or
passing `routers=` for a test). The app owns the engine's background loop: it starts with the
app's lifespan and stops after the server has drained. The lifespan also starts restoring the
adapter manifest (`adapter_restore`) as a task: the server answers meanwhile, /ready waits for it.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Iterable

from fastapi import APIRouter, FastAPI

from llmop.engine.async_engine import AsyncEngine
from llmop.engine.config import EngineConfig
from llmop.engine.engine import LLMEngine
from llmop.engine.server import chat, completions, probes, tokenize
from llmop.engine.server.adapter_restore import restore_adapters
from llmop.engine.server.body_limit import BodyLimitMiddleware
from llmop.engine.server.errors import install_error_handlers
from llmop.engine.server.state import ServerState

ROUTERS: list[APIRouter] = [probes.router, completions.router, chat.router, tokenize.router]


def create_app(engine: LLMEngine, config: EngineConfig | None = None,
               routers: Iterable[APIRouter] = ()) -> FastAPI:
    """An app serving `engine`; server limits come from `config` (default: the engine's)."""
    config = config or engine.config
    async_engine = AsyncEngine(engine, queue_timeout_s=config.queue_timeout_s)
    state = ServerState(async_engine, config)
    async_engine.on_step = state.metrics.on_step

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        if not async_engine.is_running:
            async_engine.start()
        state.grammars.warm()  # the grammar vocabulary takes seconds to build: not on the first request
        restore = asyncio.create_task(restore_adapters(state)) if not state.manifest.restored else None
        try:
            yield
        finally:
            if restore is not None and not restore.done():
                restore.cancel()
                await asyncio.gather(restore, return_exceptions=True)
            async_engine.shutdown()

    app = FastAPI(title="llmop engine", version="0.1.0", lifespan=lifespan)
    app.state.llmop = state
    for router in (*ROUTERS, *routers):
        app.include_router(router)
    install_error_handlers(app, state.metrics.reject)
    app.add_middleware(BodyLimitMiddleware, max_bytes=config.max_request_body_bytes,
                       on_reject=state.metrics.reject)
    return app
