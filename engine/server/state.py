"""What the routes of one server share: the engine, the limits, the metrics, the drain state.

Admission control lives here because it needs the live counts: a `Ticket` is held by every
generation request from admission to its last byte, so draining knows what is in flight, and it
counts the request's engine requests as queued until each produces its first token, so the
waiting-queue limit is checked against an exact, race-free number.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass

from fastapi import Request

from llmop.engine.async_engine import AsyncEngine
from llmop.engine.config import EngineConfig
from llmop.engine.server.adapter_manifest import ManifestStatus
from llmop.engine.server.credential import AdminCredential
from llmop.engine.server.errors import APIError
from llmop.engine.server.lora_metrics import LoraCollector
from llmop.engine.server.metrics import ServerMetrics


@dataclass(frozen=True)
class ModelTarget:
    """What a request's `model` field selects: the served name and the adapter (None: base)."""

    name: str
    adapter: str | None = None


class Ticket:
    """One admitted generation request; `close()` exactly once (idempotent)."""

    def __init__(self, state: "ServerState", num_queued: int):
        self._state = state
        self._queued = num_queued
        self._closed = False

    def started(self) -> None:
        """One of this request's engine requests produced its first token (or ended)."""
        if self._queued > 0:
            self._queued -= 1
            self._state.num_queued -= 1

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._state.num_queued -= self._queued
        self._queued = 0
        self._state.num_in_flight -= 1
        if self._state.num_in_flight == 0:
            self._state.idle.set()


class ServerState:
    def __init__(self, engine: AsyncEngine, config: EngineConfig):
        llm = engine.engine
        self.engine = engine
        self.config = config
        self.tokenizer = llm.tokenizer
        self.vocab_size = llm.vocab_size
        self.grammars = llm.grammars
        self.model_name = llm.model_name
        self.max_model_len = llm.max_model_len
        self.max_prompt_tokens = min(config.max_prompt_tokens or self.max_model_len, self.max_model_len)
        self.metrics = ServerMetrics(self.model_name, lambda: engine.stats)
        self.metrics.registry.register(LoraCollector(self.model_name, lambda: llm.lora.snapshot))
        self.credential = AdminCredential.from_file(config.admin_token_file) if config.admin_token_file else None
        self.manifest = ManifestStatus(config.adapter_manifest)  # restored by the app's lifespan
        self.draining = False
        self.num_in_flight = 0  # admitted generation requests not yet fully answered
        self.num_queued = 0  # their engine requests that have not produced a token yet
        self.idle = asyncio.Event()
        self.idle.set()

    # --- models -----------------------------------------------------------------------------------

    def base_model_names(self) -> set[str]:
        return {self.model_name, self.engine.engine.checkpoint.name}

    def resolve_model(self, name: str | None) -> ModelTarget:
        """The one place a request's `model` is interpreted: empty or the base model's name → the
        base model; a registered LoRA adapter's name → that adapter; anything else is unknown (404)."""
        if not name or name in self.base_model_names():
            return ModelTarget(self.model_name)
        if self.engine.engine.lora.servable(name):
            return ModelTarget(name, adapter=name)
        raise APIError(404, f"the model {name!r} does not exist", reason="unknown_model", param="model",
                       code="model_not_found")

    # --- trust --------------------------------------------------------------------------------------

    def check_priority(self, priority: int, request: Request) -> None:
        """`priority` reorders every queue, so only a trusted caller (one presenting the admin
        credential: the operator, the router) may set it; anyone else gets a 400 for a non-default one."""
        if priority != 0 and (self.credential is None or not self.credential.presented_by(request)):
            raise APIError(400, "priority is set by trusted callers only (the router or the operator); omit it "
                                "or send 0", reason="untrusted_priority", param="priority", code="untrusted_priority")

    # --- admission --------------------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        """Running, not draining, and the adapter manifest restored (its failures included)."""
        return self.engine.is_running and not self.draining and self.manifest.restored

    def check_open(self) -> None:
        if self.draining:
            raise APIError(503, "the server is shutting down", reason="draining", code="draining",
                           headers={"Connection": "close"})
        if not self.engine.is_running:
            raise APIError(503, "the engine is not running", reason="draining", code="engine_stopped")

    def admit(self, num_requests: int) -> Ticket:
        """Admit a generation request of `num_requests` engine requests, or refuse it (503 while
        draining, 429 with Retry-After when the waiting queue is full)."""
        self.check_open()
        limit = self.config.max_waiting_requests
        if self.num_queued + num_requests > limit:
            raise APIError(429, f"the waiting queue is full ({self.num_queued} of {limit} requests); retry later",
                           reason="queue_full", code="queue_full",
                           headers={"Retry-After": str(self.retry_after_s())})
        self.num_in_flight += 1
        self.num_queued += num_requests
        self.idle.clear()
        return Ticket(self, num_requests)

    def retry_after_s(self) -> int:
        """A client's back-off hint: roughly how long the queue has been stalled, at least 1 s."""
        oldest = self.engine.stats.oldest_waiting_arrival
        age = time.monotonic() - oldest if oldest is not None else 0.0
        return max(1, min(60, math.ceil(age)))

    # --- draining ---------------------------------------------------------------------------------

    async def drain(self, timeout_s: float) -> bool:
        """Refuse new requests and wait for the in-flight ones; True if they all finished."""
        self.draining = True
        try:
            await asyncio.wait_for(self.idle.wait(), timeout_s)
            return True
        except TimeoutError:
            return False


def get_state(request: Request) -> ServerState:
    """The state of the app serving `request` (a FastAPI dependency)."""
    return request.app.state.llmop
