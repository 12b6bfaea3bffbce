"""The engine core's side of multi-LoRA: registration, slot placement, fairness, counters.

It owns no model: it decides which adapter sits in which device slot and hands each step's slot
writes and per-token slots to the ranks in the `ForwardBatch` (`plan_step`); the ranks apply them
(`runtime.LoraRuntime`). With `max_loras > 0` the scheduler is built with the fair queue
(`queue`), whose admission asks `admits`, which never reads from disk: adapters evicted to disk
are read back by `prefetch`, before the scheduler runs. Everything here runs on the engine thread
(the server goes through `AsyncEngine.call`), except `read`, which touches no engine state.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass
from typing import Callable

import torch

from llmop.engine.forward_batch import LoraMapping, SlotLoad
from llmop.engine.lora.fair_queue import Admission, FairAdapterQueue, pinned_out, slot_admission
from llmop.engine.lora.peft_adapter import LoraAdapter, load_peft_adapter
from llmop.engine.lora.registry import AdapterInfo, AdapterNotFound, AdapterRegistry, AdapterState

log = logging.getLogger("llmop.engine.lora")

SNAPSHOT_PERIOD_S = 0.25  # how stale the metrics' view of running/waiting adapters may be


@dataclass
class AdapterCounters:
    """Per adapter, since it was registered (mutated on the engine thread only)."""

    requests: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0


@dataclass(frozen=True)
class LoraStats:
    """A snapshot for other threads (metrics scrapes): the `lora_requests_info` labels (vLLM's
    names), per registered adapter (requests, prompt tokens, generation tokens), and the registry's
    moves between tiers since start-up (slot loads, slot evictions, disk loads)."""

    max_lora: int
    running_lora_adapters: tuple[str, ...] = ()
    waiting_lora_adapters: tuple[str, ...] = ()
    counters: tuple[tuple[str, int, int, int], ...] = ()
    states: tuple[tuple[str, str], ...] = ()  # (adapter, state)
    moves: tuple[int, int, int] = (0, 0, 0)  # (slot loads, slot evictions, disk loads)


class LoraManager:
    """`requests()`: the engine's running and waiting requests (read for adapters in use)."""

    def __init__(self, config, model_config, dtype: torch.dtype, requests: Callable[[], tuple[list, list]]):
        self.config, self.model_config, self.dtype = config, model_config, dtype
        self._requests = requests
        self.counters: dict[str, AdapterCounters] = {}
        self._pending: list[SlotLoad] = []
        self.registry: AdapterRegistry | None = None
        self.queue: FairAdapterQueue | None = None
        if config.max_loras > 0:
            self.registry = AdapterRegistry(config.max_loras, config.max_cpu_loras, self.read, self._queue_write)
            self.queue = FairAdapterQueue(self.admits)
        self.snapshot = LoraStats(config.max_loras)  # see `refresh`
        self._snapshot_time = 0.0

    @property
    def enabled(self) -> bool:
        return self.registry is not None

    def _require(self) -> None:
        if not self.enabled:
            raise ValueError("LoRA is disabled: max_loras is 0")

    def _queue_write(self, slot: int, adapter: LoraAdapter) -> None:
        """The registry placed `adapter` in `slot`: every rank writes it before the next step."""
        self._pending = [p for p in self._pending if p.slot != slot] + [SlotLoad(slot, adapter)]

    # --- registration -----------------------------------------------------------------------------

    def read(self, name: str, source: str) -> LoraAdapter:
        """Read and validate from disk (no engine state: safe on any thread)."""
        return load_peft_adapter(name, source, self.model_config, self.config.max_lora_rank, self.dtype)

    def add(self, name: str, source: str, pinned: bool = False) -> AdapterInfo:
        """Register and read now; raises AdapterError (and leaves the adapter FAILED) if it does not fit."""
        self._require()
        try:
            info = self.registry.add(name, source, pinned, in_use=self._in_use())
        finally:
            self.refresh()
        self.counters.setdefault(name, AdapterCounters())
        return info

    def add_configured(self, name: str, source: str, pinned: bool = False) -> None:
        """Register an adapter from the engine config at start-up. One tenant's bad adapter (unreadable,
        too large, one pin too many) must not stop the engine for everyone: it is logged and left
        FAILED with its reason (`/v1/adapters` shows it; its requests get a 400 naming it)."""
        try:
            self.add(name, source, pinned)
        except ValueError as err:  # AdapterError, AdapterConflict
            log.error("adapter %r from the config is not served: %s", name, err)
            if name not in self.registry:
                self.registry.begin(name, source, pinned=False)
                self.registry.fail(name, str(err))
                self.registry.take_failed()
            self.counters.setdefault(name, AdapterCounters())
            self.refresh()

    def begin_load(self, name: str, source: str, pinned: bool = False) -> None:
        """Register in state LOADING; the caller reads (`read`) and then calls finish/fail_load."""
        self._require()
        self.registry.begin(name, source, pinned)
        self.refresh()

    def finish_load(self, name: str, adapter: LoraAdapter) -> AdapterInfo:
        self.registry.finish(name, adapter, in_use=self._in_use())
        self.counters.setdefault(name, AdapterCounters())
        self.refresh()
        return self.registry.info(name)

    def fail_load(self, name: str, error: str) -> AdapterInfo:
        self.registry.fail(name, error)
        self.refresh()
        return self.registry.info(name)

    def remove(self, name: str) -> None:
        """Unregister; refused (AdapterConflict) while requests for it are waiting or running."""
        if not self.enabled:
            raise AdapterNotFound(name)
        self.registry.remove(name, in_use=self._in_use(include_waiting=True))
        self.counters.pop(name, None)
        self.refresh()

    def generation(self, adapter: str | None) -> int | None:
        """Which registration `adapter` names now (None for the base model). The prefix cache keys
        by it, not by the name alone: an adapter unloaded and another loaded under its name must
        not be served the KV computed with the old weights."""
        return None if adapter is None else self.registry.info(adapter).generation

    def infos(self) -> list[AdapterInfo]:
        return self.registry.infos() if self.enabled else []

    def servable(self, name: str) -> bool:
        """Requests may select `name` (it is registered and not failed)."""
        return self.enabled and self.registry.state_of(name) not in (None, AdapterState.FAILED)

    def take_failed(self) -> set[str]:
        """Adapters that failed since the last call (their waiting requests cannot run)."""
        return self.registry.take_failed() if self.enabled else set()

    def unavailable_reason(self, name: str) -> str:
        """Why requests cannot select `name` (for errors)."""
        state = self.registry.info(name) if self.enabled and name in self.registry else None
        why = f": {state.error}" if state is not None and state.error else ""
        return f"adapter {name!r} is not available{why}"

    def check_request(self, adapter: str | None) -> None:
        """Raise ValueError for a request naming an adapter that cannot serve it."""
        if adapter is None:
            return
        if not self.servable(adapter):
            raise ValueError(self.unavailable_reason(adapter))
        pinned = self.registry.pinned_resident()
        if pinned_out(adapter, pinned, self.registry.max_slots):
            raise ValueError(f"adapter {adapter!r} cannot run: all {self.registry.max_slots} LoRA slots are "
                             f"pinned by other adapters ({', '.join(sorted(pinned))})")
        self.counters.setdefault(adapter, AdapterCounters()).requests += 1

    # --- scheduling -------------------------------------------------------------------------------

    def _in_use(self, include_waiting: bool = False) -> set[str]:
        running, waiting = self._requests()
        reqs = list(running) + (list(waiting) if include_waiting else [])
        return {r.adapter for r in reqs if r.adapter is not None}

    def admits(self, adapter: str | None) -> Admission:
        """The fair queue's admission policy: may a request of `adapter` start now? Within the
        distinct-adapter limit, and held in host memory (never reads from disk: see `prefetch`)."""
        if adapter is None:
            return Admission.ADMIT_SLOTLESS
        reg = self.registry
        if reg.state_of(adapter) not in (AdapterState.CPU, AdapterState.RESIDENT):
            return Admission.NOT_READY
        return slot_admission(adapter, self._in_use(), reg.pinned_resident(), reg.max_slots)

    def prefetch(self) -> None:
        """Before scheduling: read back from disk the adapters the fair queue would admit next
        (at most `max_loras` of them), so admission finds them in host memory."""
        if not self.enabled:
            return
        running = self._in_use()
        for adapter in self.queue.waiting_adapters()[: self.registry.max_slots]:
            if self.registry.state_of(adapter) is AdapterState.DISK:
                self.registry.ensure_host(adapter, in_use=running)

    def plan_step(self, chunks: tuple) -> tuple[tuple, LoraMapping | None]:
        """After scheduling: make the step's adapters resident, order the chunks by slot (base
        requests first, each adapter's tokens contiguous, which the LoRA ops exploit), charge the
        fair queue and count prompt tokens (generated ones are counted as they are emitted:
        `count_generated`). Returns the chunks in batch order and the step's LoRA mapping
        (None when LoRA is off, or no slot write is due and no token uses an adapter)."""
        if not self.enabled:
            return chunks, None
        adapters = [c.request.adapter for c in chunks if c.request.adapter is not None]
        slot_of = self.registry.ensure_resident(adapters, in_use=self._in_use()) if adapters else {}
        token_slots = None
        if adapters:
            key = lambda c: -1 if c.request.adapter is None else slot_of[c.request.adapter]
            chunks = tuple(sorted(chunks, key=key))
            token_slots = tuple(s for c in chunks for s in [key(c)] * c.num_tokens)
        loads, self._pending = tuple(self._pending), []
        self.queue.charge_chunks(chunks)
        for c in chunks:
            n = self.counters.get(c.request.adapter) if c.request.adapter is not None else None
            if n is not None:
                n.prompt_tokens += max(0, min(c.start + c.num_tokens, c.request.num_prompt_tokens) - c.start)
        if time.monotonic() - self._snapshot_time > SNAPSHOT_PERIOD_S:
            self.refresh()
        if token_slots is None and not loads:
            return chunks, None
        return chunks, LoraMapping(token_slots, loads)

    def count_generated(self, adapter: str | None, num_tokens: int) -> None:
        """Tokens a request of `adapter` emitted this step (several when speculation was accepted)."""
        n = self.counters.get(adapter) if adapter is not None else None
        if n is not None:
            n.generation_tokens += num_tokens

    def stats(self) -> LoraStats:
        """Compute a fresh snapshot (engine thread); other threads read `snapshot`."""
        if not self.enabled:
            return LoraStats(self.config.max_loras)
        return LoraStats(
            self.config.max_loras, tuple(sorted(self._in_use())), tuple(sorted(self.queue.waiting_adapters())),
            tuple((n, c.requests, c.prompt_tokens, c.generation_tokens) for n, c in self.counters.items()),
            tuple((i.name, i.state.value) for i in self.registry.infos()),
            (self.registry.num_slot_loads, self.registry.num_slot_evictions, self.registry.num_disk_loads))

    def refresh(self) -> None:
        """Take the snapshot now: on registry changes, every SNAPSHOT_PERIOD_S while stepping, and
        when the engine goes idle (`AsyncEngine`), so an idle engine's metrics are exact."""
        self.snapshot, self._snapshot_time = self.stats(), time.monotonic()
