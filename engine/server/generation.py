"""One HTTP generation request as a stream of `(choice index, RequestOutput)`: n prompts × choices
become engine requests whose streams are merged here.

This is where engine outcomes turn into HTTP outcomes: an add_request ValueError becomes a 400, a
queue-deadline expiry a 503, and closing the stream (the client went away, or the handler gave
up) cancels every engine request, so the engine aborts them and frees their KV blocks within one
step. Each engine request feeds its own `RequestTracker`.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import AsyncIterator

from fastapi import Request

from llmop.engine.outputs import RequestOutput
from llmop.engine.sampling_params import SamplingParams
from llmop.engine.server.errors import APIError
from llmop.engine.server.state import ModelTarget, ServerState, Ticket


@dataclass(frozen=True)
class SubRequest:
    """One engine request: one choice of one prompt."""

    prompt_token_ids: list[int]
    params: SamplingParams
    shares_prompt_of: int | None = None  # index of the sub-request (same prompt) whose prompt KV it shares


class ClientDisconnected(Exception):
    pass


# Requests the engine ended before running them (`RequestOutput.error`): 503, message, headers.
ENGINE_ERRORS = {
    "queue_timeout": ("the request waited past the queue deadline without being scheduled", {"Retry-After": "1"}),
    "adapter_unavailable": ("the adapter could not be loaded", None),
}


def _as_api_error(item) -> APIError:
    if isinstance(item, APIError):
        return item
    if isinstance(item, ValueError):
        return APIError(400, str(item), reason="invalid_request")
    if isinstance(item, RequestOutput) and item.error == "invalid_grammar":
        return APIError(400, item.error_message or "invalid grammar", reason="invalid_grammar")
    if isinstance(item, RequestOutput) and item.error in ENGINE_ERRORS:
        default, headers = ENGINE_ERRORS[item.error]
        return APIError(503, item.error_message or default, reason=item.error, code=item.error, headers=headers)
    return APIError(500, f"generation failed: {item}", reason="invalid_request", type="server_error")


class Generation:
    """Runs `subs` on the engine; iterate `stream()` once, and `aclose()` in any case."""

    def __init__(self, state: ServerState, request_id: str, subs: list[SubRequest], target: ModelTarget,
                 priority: int, ticket: Ticket, cache_salt: str | None = None):
        self.state = state
        self.request_id = request_id
        self.subs = subs
        self.target = target
        self.priority = priority
        self.ticket = ticket
        self.cache_salt = cache_salt
        self._queue: asyncio.Queue = asyncio.Queue()
        self._tasks = [asyncio.create_task(self._pump(i, s)) for i, s in enumerate(subs)]

    async def _pump(self, index: int, sub: SubRequest) -> None:
        tracker = self.state.metrics.tracker(self.target.name)
        started = False
        try:
            leader = None if sub.shares_prompt_of is None else f"{self.request_id}-{sub.shares_prompt_of}"
            async for out in self.state.engine.generate(f"{self.request_id}-{index}", sub.prompt_token_ids,
                                                        sub.params, self.priority, self.target.adapter,
                                                        cache_salt=self.cache_salt, share_prompt_with=leader):
                if not started and (out.new_token_ids or out.finished):
                    started = True
                    self.ticket.started()
                tracker.observe(out)
                self._queue.put_nowait((index, out))
        except Exception as e:  # noqa: BLE001 - handed to the consumer, which maps it to a status
            self._queue.put_nowait((index, e))
        finally:
            tracker.close()
            if not started:
                self.ticket.started()

    async def stream(self) -> AsyncIterator[tuple[int, RequestOutput]]:
        """Outputs of all choices as they come; raises APIError if a choice fails."""
        remaining = len(self._tasks)
        while remaining:
            index, item = await self._queue.get()
            if isinstance(item, BaseException) or item.error is not None:
                raise _as_api_error(item)
            yield index, item
            if item.finished:
                remaining -= 1

    async def aclose(self) -> None:
        """Abort whatever is still running (idempotent) and release the admission ticket."""
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        self.ticket.close()


async def _wait_disconnect(request: Request) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


async def unless_disconnected(request: Request, awaitable):
    """Await `awaitable` unless the client disconnects first (then it is cancelled and
    ClientDisconnected is raised). For the parts of a request before streaming starts."""
    task = asyncio.ensure_future(awaitable)
    watcher = asyncio.ensure_future(_wait_disconnect(request))
    try:
        done, _ = await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            return task.result()
        raise ClientDisconnected()
    finally:
        watcher.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
