"""Iteration-level continuous batching: which requests compute how many tokens this step.

Each step first continues the running requests (decodes and unfinished prefill chunks) under the
token budget, preempting the least important running request (by recompute) when KV blocks run
out; then admits waiting requests while the budget, `max_num_seqs` and free blocks allow, each
starting after the longest prefix it need not compute (`prefix_cache.PrefixCache`). Plain
Python: tested without a model.
"""

from __future__ import annotations

import heapq
import time
from dataclasses import dataclass
from typing import Callable, Iterator, Mapping, Protocol

from llmop.engine.block_manager import BlockManager
from llmop.engine.prefix_cache import PrefixCache
from llmop.engine.request import FinishReason, Request, RequestStatus


@dataclass(frozen=True)
class SchedulerConfig:
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    long_prefill_threshold: int = 0  # 0 = a prefill may take the whole remaining budget


@dataclass(frozen=True)
class ScheduledChunk:
    request: Request
    start: int  # first token index to compute (== num_computed_tokens at scheduling time)
    num_tokens: int  # including `num_spec`
    num_spec: int = 0  # the request's first proposed tokens, verified in this step

    @property
    def completes(self) -> bool:
        """After this chunk the request has computed all its tokens, so it samples the next one
        (and verifies the proposed ones)."""
        return self.start + self.num_tokens - self.num_spec == self.request.num_tokens


@dataclass(frozen=True)
class SchedulerOutput:
    chunks: tuple[ScheduledChunk, ...]
    preempted: tuple[Request, ...]
    block_copies: tuple[tuple[int, int], ...] = ()  # (source, destination) blocks to copy before the step

    @property
    def num_batched_tokens(self) -> int:
        return sum(c.num_tokens for c in self.chunks)

    @property
    def is_empty(self) -> bool:
        return not self.chunks


class WaitingQueue(Protocol):
    """Where requests wait for admission; the scheduler gets one when it is built. `peek` is the
    admission policy: the next request that may start now, or None when none may (the fair LoRA
    queue, `lora.fair_queue.FairAdapterQueue`, holds back adapters over the slot limit)."""

    def push(self, request: Request) -> None: ...

    def peek(self) -> Request | None: ...

    def pop(self) -> Request:
        """Remove and return what `peek` returned."""
        ...

    def remove(self, request: Request) -> bool: ...

    def __len__(self) -> int: ...

    def __iter__(self) -> Iterator[Request]: ...


class PriorityQueue:
    """Priority, then arrival order. Preempted requests keep their arrival, so they go first."""

    def __init__(self):
        self._heap: list[tuple[tuple[int, int], Request]] = []

    def push(self, request: Request) -> None:
        heapq.heappush(self._heap, (request.order_key, request))

    def peek(self) -> Request | None:
        return self._heap[0][1] if self._heap else None

    def pop(self) -> Request:
        return heapq.heappop(self._heap)[1]

    def remove(self, request: Request) -> bool:
        for i, (_, r) in enumerate(self._heap):
            if r is request:
                self._heap.pop(i)
                heapq.heapify(self._heap)
                return True
        return False

    def __len__(self) -> int:
        return len(self._heap)

    def __iter__(self):
        return (r for _, r in self._heap)


class Scheduler:
    """`waiting`: the queue and admission policy (default: priority then arrival). `on_release`:
    called when a request's blocks go (finished, aborted, preempted), for state kept beside them
    (a draft model's KV)."""

    def __init__(self, config: SchedulerConfig, blocks: BlockManager, prefix: PrefixCache | None = None,
                 waiting: WaitingQueue | None = None, on_release: Callable[[Request], None] | None = None):
        self.config = config
        self.on_release = on_release or (lambda request: None)
        self.blocks = blocks
        self.prefix = prefix if prefix is not None else PrefixCache(blocks, None)
        self.waiting: WaitingQueue = waiting if waiting is not None else PriorityQueue()
        self.running: list[Request] = []
        self.num_preemptions = 0

    def add(self, request: Request) -> None:
        request.status = RequestStatus.WAITING
        if not self.prefix.park(request):
            self.waiting.push(request)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting) + self.prefix.num_parked

    def has_work(self) -> bool:
        return bool(self.running) or len(self.waiting) > 0

    def oldest_waiting_arrival(self) -> float | None:
        """Arrival time of the request waiting longest for its first schedule (None if none)."""
        first = [r.times.arrival for q in (self.waiting, self.prefix.parked()) for r in q
                 if r.times.first_scheduled is None]
        return min(first) if first else None

    def schedule(self) -> SchedulerOutput:
        budget = self.config.max_num_batched_tokens
        chunks: list[ScheduledChunk] = []
        preempted: list[Request] = []
        copies: list[tuple[int, int]] = []
        scheduled_ids: set[str] = set()

        # 1. Running requests, most important first, so preemption takes from the tail.
        self.running.sort(key=lambda r: r.order_key)
        i = 0
        while i < len(self.running) and budget > 0:
            req = self.running[i]
            n = min(req.num_uncomputed_tokens, budget)
            while not self.blocks.can_hold(req.request_id, req.num_computed_tokens + n):
                victim = self.running[-1]
                self._preempt(victim)
                preempted.append(victim)
                if victim is req:
                    break
            else:
                self.blocks.grow(req.request_id, req.num_computed_tokens + n)
                chunks.append(ScheduledChunk(req, req.num_computed_tokens, n))
                scheduled_ids.add(req.request_id)
                budget -= n
                i += 1
                continue
            # `req` itself was preempted; the loop index now points at the next request.

        # 2. Admit waiting requests, unless this step already had to preempt.
        if not preempted:
            while len(self.waiting) and budget > 0 and len(self.running) < self.config.max_num_seqs:
                req = self.waiting.peek()
                if req is None:  # none of the waiting requests may start now (LoRA slot limit)
                    break
                start = self.prefix.find(req)
                n = min(req.num_tokens - start.num_tokens, budget)
                if self.config.long_prefill_threshold:
                    n = min(n, self.config.long_prefill_threshold)
                if not self.prefix.can_start(req, start, start.num_tokens + n):
                    break
                self.waiting.pop()
                copy = self.prefix.start(req, start, start.num_tokens + n)
                if copy is not None:
                    copies.append(copy)
                req.status = RequestStatus.RUNNING
                if req.times.first_scheduled is None:
                    req.times.first_scheduled = time.monotonic()
                self.running.append(req)
                chunks.append(ScheduledChunk(req, req.num_computed_tokens, n))
                budget -= n

        # 3. Proposed (speculative) tokens, last: only from the budget and blocks nobody else took.
        for j, c in enumerate(chunks):
            req = c.request
            k = min(len(req.spec_token_ids), budget)
            if not k or not c.completes or not self.blocks.can_hold(req.request_id, c.start + c.num_tokens + k):
                continue
            self.blocks.grow(req.request_id, c.start + c.num_tokens + k)
            chunks[j] = ScheduledChunk(req, c.start, c.num_tokens + k, k)
            budget -= k
        return SchedulerOutput(tuple(chunks), tuple(preempted), tuple(copies))

    def _preempt(self, req: Request) -> None:
        """Recompute later: drop its blocks, forget computed tokens, requeue at its old place."""
        self.running.remove(req)
        self.blocks.free(req.request_id)
        self.on_release(req)
        req.num_computed_tokens = 0
        req.spec_token_ids = []
        req.num_preemptions += 1
        self.num_preemptions += 1
        req.status = RequestStatus.PREEMPTED
        self.waiting.push(req)
        for follower in self.prefix.release(req):  # they start from the cache instead
            self.waiting.push(follower)

    def commit(self, out: SchedulerOutput, rejected: Mapping[str, int] | None = None) -> None:
        """The model ran: advance every scheduled request's counter and cache its full blocks.
        `rejected[request_id]`: proposed tokens the verification rejected; their KV is dropped and
        the blocks that held only them go back to the pool."""
        rejected = rejected or {}
        for c in out.chunks:
            req = c.request
            req.num_computed_tokens = c.start + c.num_tokens - rejected.get(req.request_id, 0)
            if c.num_spec:
                self.blocks.shrink(req.request_id, req.num_computed_tokens)
            for follower in self.prefix.computed(req):
                self.waiting.push(follower)

    def finish(self, req: Request, reason: FinishReason) -> None:
        """Finished or aborted: its blocks go back to the pool now."""
        if req.status is RequestStatus.RUNNING:
            self.running.remove(req)
        elif req.status in (RequestStatus.WAITING, RequestStatus.PREEMPTED):
            if not self.waiting.remove(req):
                self.prefix.unpark(req)
        self.blocks.free(req.request_id)
        self.on_release(req)
        for follower in self.prefix.release(req):
            self.waiting.push(follower)
        req.status = RequestStatus.FINISHED
        req.finish_reason = reason
        req.times.finished = time.monotonic()
