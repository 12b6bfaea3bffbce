"""Fair waiting queue across adapters: the Virtual Token Counter (Sheng et al., "Fairness in
Serving Large Language Models", OSDI'24).

Each adapter (the base model counts as one, key None) has its own FIFO (priority, then arrival)
and a counter of the service it received: prompt tokens computed count `prompt_weight`, generated
tokens `output_weight`. Admission takes the head of the eligible queue with the smallest counter,
so a flooding adapter cannot starve a trickle: the trickle's counter is always behind. An adapter
that comes back from idle is lifted to the smallest counter of those waiting, so it cannot bank
credit while away. Implements the scheduler's `WaitingQueue` protocol; `eligible` is the admission
policy it is built with (the distinct-adapter limit, adapters in host memory), plus `charge`.

When the adapter whose turn it is waits for a slot (all `max_loras` are held by running adapters),
only requests that hold no freeable slot are admitted until one frees (the base model, pinned
adapters): admitting more requests of the running adapters would keep their slots busy for ever,
and the adapter whose turn it is would wait for the whole flood (found by
tests/engine/test_scheduler_properties.py). An adapter that can never get a slot (every slot pinned
by others) does not wait for one: it is not ready, and holds nobody back.
"""

from __future__ import annotations

import enum
import heapq
from typing import Callable, Iterator

from llmop.engine.request import Request


class Admission(enum.Enum):
    """The admission policy's answer for an adapter's waiting requests."""

    ADMIT = "admit"
    ADMIT_SLOTLESS = "admit_slotless"  # holds no freeable slot (base model, pinned adapter): even behind a waiter
    WAIT_FOR_SLOT = "wait_for_slot"  # every slot is held by running adapters: others wait behind it
    NOT_READY = "not_ready"  # not in host memory yet, or no slot can ever free: skipped


def within_adapter_limit(adapter: str | None, running: set[str], pinned_resident: set[str], max_loras: int) -> bool:
    """The scheduler's per-step limit: admitting a request of `adapter` keeps the distinct adapters
    of the running requests, together with the pinned ones that hold slots, at most `max_loras`."""
    if adapter is None or adapter in running or adapter in pinned_resident:
        return True
    return len(running | pinned_resident) < max_loras


def pinned_out(adapter: str | None, pinned_resident: set[str], max_loras: int) -> bool:
    """Every slot is pinned by other adapters: a request of `adapter` can never run."""
    return adapter is not None and adapter not in pinned_resident and len(pinned_resident) >= max_loras


def slot_admission(adapter: str | None, running: set[str], pinned_resident: set[str], max_loras: int) -> Admission:
    """`within_adapter_limit` as an admission answer."""
    if adapter is None or adapter in pinned_resident:
        return Admission.ADMIT_SLOTLESS
    if within_adapter_limit(adapter, running, pinned_resident, max_loras):
        return Admission.ADMIT
    return Admission.NOT_READY if pinned_out(adapter, pinned_resident, max_loras) else Admission.WAIT_FOR_SLOT


class FairAdapterQueue:
    def __init__(self, eligible: Callable[[str | None], Admission] = lambda a: Admission.ADMIT_SLOTLESS,
                 prompt_weight: float = 1.0, output_weight: float = 2.0):
        self.eligible = eligible
        self.prompt_weight, self.output_weight = prompt_weight, output_weight
        self.counters: dict[str | None, float] = {}
        self._queues: dict[str | None, list[tuple[tuple[int, int], Request]]] = {}
        self._last_served = 0.0
        self._len = 0

    # --- WaitingQueue interface -------------------------------------------------------------------

    def push(self, request: Request) -> None:
        a = request.adapter
        q = self._queues.setdefault(a, [])
        if not q:  # (re)joining the queue: no credit for the time away
            waiting = [self.counters.get(k, 0.0) for k, v in self._queues.items() if v and k != a]
            floor = min(waiting) if waiting else self._last_served
            self.counters[a] = max(self.counters.get(a, 0.0), floor)
        heapq.heappush(q, (request.order_key, request))
        self._len += 1

    def peek(self) -> Request | None:
        """The next request to admit, or None when no waiting adapter is eligible now."""
        a = self._pick()
        return None if a is ... else self._queues[a][0][1]

    def pop(self) -> Request:
        a = self._pick()
        if a is ...:
            raise IndexError("no eligible request")
        req = heapq.heappop(self._queues[a])[1]
        self._len -= 1
        self._last_served = self.counters.get(a, 0.0)
        return req

    def remove(self, request: Request) -> bool:
        q = self._queues.get(request.adapter, [])
        for i, (_, r) in enumerate(q):
            if r is request:
                q.pop(i)
                heapq.heapify(q)
                self._len -= 1
                return True
        return False

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[Request]:
        return (r for q in self._queues.values() for _, r in q)

    # --- fairness ---------------------------------------------------------------------------------

    def charge(self, adapter: str | None, prompt_tokens: int, output_tokens: int) -> None:
        """Service delivered this step to `adapter`'s requests."""
        self.counters[adapter] = (self.counters.get(adapter, 0.0) + self.prompt_weight * prompt_tokens
                                  + self.output_weight * output_tokens)

    def charge_chunks(self, chunks) -> None:
        """Charge one step's scheduled chunks (prompt and generated tokens computed) to their adapters."""
        for c in chunks:
            prompt = max(0, min(c.start + c.num_tokens, c.request.num_prompt_tokens) - c.start)
            self.charge(c.request.adapter, prompt, c.num_tokens - prompt)

    def waiting_adapters(self) -> list[str]:
        """Adapters with waiting requests, in the order their heads would be admitted."""
        return [a for a in self._order() if a is not None]

    def _order(self) -> list[str | None]:
        heads = sorted(((q[0][0][0], self.counters.get(a, 0.0), q[0][0][1]), i, a)
                       for i, (a, q) in enumerate(self._queues.items()) if q)
        return [a for _, _, a in heads]

    def _pick(self):
        """Key of the eligible non-empty queue whose head goes first (priority, counter, arrival);
        `eligible` is asked in that order and only until one accepts. Behind an adapter that waits
        for a slot, only requests holding no freeable slot may go."""
        slot_wait = False
        for a in self._order():
            answer = self.eligible(a)
            if answer is Admission.ADMIT_SLOTLESS or (answer is Admission.ADMIT and not slot_wait):
                return a
            slot_wait |= answer is Admission.WAIT_FOR_SLOT
        return ...
