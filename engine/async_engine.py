"""The engine for the server: its loop runs on a background thread; coroutines submit and stream.

Coroutines never touch the engine: they put commands (add, abort) into an inbox that the loop
thread drains before every step, and receive outputs through per-request asyncio queues filled
with `call_soon_threadsafe`. So submitting from many coroutines (or threads) is safe, and a
request whose consumer goes away is aborted and freed within one step.

When the engine can no longer step (a worker process died or hung: `LLMEngine.failure`), the loop
ends every request with an error and stays up only to answer whatever arrives later with that
error, so `/health` turns unhealthy and no request waits forever.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from dataclasses import dataclass
from typing import AsyncIterator

from llmop.engine.engine import EngineStats, LLMEngine
from llmop.engine.outputs import RequestOutput
from llmop.engine.sampling_params import SamplingParams

log = logging.getLogger("llmop.engine.async")

IDLE_WAIT_S = 0.01  # between steps that computed nothing


@dataclass(frozen=True)
class _Add:
    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    priority: int
    adapter: str | None
    arrival_time: float
    sink: "_Sink"
    cache_salt: str | None = None
    share_prompt_with: str | None = None


@dataclass(frozen=True)
class _Abort:
    request_id: str


@dataclass(frozen=True)
class _Call:
    """Run `fn(engine)` on the loop thread (adapter loads, inspection); result via a future."""

    fn: object
    sink: "_Sink"


class _Sink:
    """Delivers items from the engine thread into one coroutine's asyncio queue."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.queue: asyncio.Queue = asyncio.Queue()

    def put(self, item) -> None:
        try:
            self.loop.call_soon_threadsafe(self.queue.put_nowait, item)
        except RuntimeError:  # the consumer's loop is closed: nobody is listening any more
            pass


class AsyncEngine:
    def __init__(self, engine: LLMEngine, queue_timeout_s: float | None = None):
        self.engine = engine
        self.queue_timeout_s = queue_timeout_s
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._sinks: dict[str, _Sink] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="llmop-engine", daemon=True)
        self.stats: EngineStats = engine.stats()
        self.num_steps = 0
        self.on_step = None  # optional callback(engine, outputs), called on the loop thread

    def start(self) -> None:
        self._thread.start()

    def shutdown(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._inbox.put(None)
        self._thread.join(timeout)

    @property
    def is_running(self) -> bool:
        return self._thread.is_alive() and self.engine.failure is None

    @property
    def failure(self) -> str | None:
        """Why the engine stopped for good (None while it runs or after a clean shutdown)."""
        return self.engine.failure

    async def generate(self, request_id: str, prompt_token_ids: list[int], params: SamplingParams,
                       priority: int = 0, adapter: str | None = None,
                       arrival_time: float | None = None, cache_salt: str | None = None,
                       share_prompt_with: str | None = None) -> AsyncIterator[RequestOutput]:
        """Stream the request's outputs; leaving the iteration early aborts the request."""
        if self._stop.is_set():
            raise RuntimeError("the engine is shut down")
        sink = _Sink(asyncio.get_running_loop())
        self._inbox.put(_Add(request_id, list(prompt_token_ids), params, priority, adapter,
                             arrival_time or time.monotonic(), sink, cache_salt, share_prompt_with))
        finished = False
        try:
            while True:
                item = await sink.queue.get()
                if isinstance(item, BaseException):
                    finished = True
                    raise item
                yield item
                if item.finished:
                    finished = True
                    return
        finally:
            if not finished:
                self.abort(request_id)

    def abort(self, request_id: str) -> None:
        self._inbox.put(_Abort(request_id))

    async def call(self, fn):
        """Run `fn(engine)` between two steps on the engine thread and return its result."""
        sink = _Sink(asyncio.get_running_loop())
        self._inbox.put(_Call(fn, sink))
        item = await sink.queue.get()
        if isinstance(item, BaseException):
            raise item
        return item

    # --- the loop thread --------------------------------------------------------------------------

    def _handle(self, cmd) -> None:
        eng = self.engine
        if isinstance(cmd, _Add):
            try:
                eng.add_request(cmd.request_id, cmd.prompt_token_ids, cmd.params, cmd.priority,
                                cmd.adapter, cmd.arrival_time, cmd.cache_salt, cmd.share_prompt_with)
                self._sinks[cmd.request_id] = cmd.sink
            except Exception as e:  # invalid request: the caller gets the error, the loop goes on
                cmd.sink.put(e)
        elif isinstance(cmd, _Abort):
            out = eng.abort(cmd.request_id)
            sink = self._sinks.pop(cmd.request_id, None)
            if out is not None and sink is not None:
                sink.put(out)
        elif isinstance(cmd, _Call):
            try:
                cmd.sink.put(cmd.fn(eng))
            except Exception as e:
                cmd.sink.put(e)

    def _expire(self) -> None:
        """Requests that waited past the queue deadline without being scheduled end with an error."""
        if self.queue_timeout_s is None:
            return
        for out in self.engine.expire_waiting(time.monotonic() - self.queue_timeout_s):
            sink = self._sinks.pop(out.request_id, None)
            if sink is not None:
                sink.put(out)

    def _loop(self) -> None:
        eng = self.engine
        while not self._stop.is_set():
            if eng.failure is not None:  # failed for good: answer, never step
                if self._sinks:
                    self._fail_all()
                cmd = self._inbox.get()
                if cmd is not None:
                    self._refuse(cmd)
                continue
            try:
                # Block while idle; otherwise take whatever arrived since the last step.
                # After a step in which every request waited (an adapter loading, all slots pinned),
                # wait a little for news instead of spinning on the GIL against the HTTP loop.
                if not eng.has_unfinished():
                    eng.lora.refresh()  # going idle: the LoRA metrics must not keep the last step's view
                    cmd = self._inbox.get()
                elif eng.last_step_ran:
                    cmd = self._inbox.get_nowait()
                else:
                    cmd = self._inbox.get(timeout=IDLE_WAIT_S)
                if cmd is not None:
                    self._handle(cmd)
                    self.stats = eng.stats()
                continue
            except queue.Empty:
                pass
            try:
                self._expire()
                outputs = eng.step()
            except Exception:
                log.exception("engine step failed; aborting the running requests")
                self._fail_all()
                continue
            self.num_steps += 1
            self.stats = eng.stats()
            for out in outputs:
                sink = self._sinks.get(out.request_id)
                if sink is not None:
                    sink.put(out)
                    if out.finished:
                        del self._sinks[out.request_id]
            if self.on_step is not None:
                self.on_step(eng, outputs)
        self.stats = eng.stats()

    def _refuse(self, cmd) -> None:
        """After a failure: a command gets the error, not silence."""
        if isinstance(cmd, (_Add, _Call)):
            cmd.sink.put(RuntimeError(f"the engine is not running: {self.engine.failure}"))

    def _fail_all(self) -> None:
        why = self.engine.failure or "engine step failed"
        for rid, sink in list(self._sinks.items()):
            self.engine.abort(rid)
            sink.put(RuntimeError(why))
        self._sinks.clear()
        self.stats = self.engine.stats()
