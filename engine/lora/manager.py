"""The engine's side of multi-LoRA: registration, the per-step slot mapping, fairness, counters.

LoRA stays off (no slots allocated, the plain waiting queue, the plain model) until the first
adapter is registered; then the LoRA pass replaces the linear layers and the fair queue replaces
the waiting queue. Everything here runs on the engine thread (the server goes through
`AsyncEngine.call`), except `read`, which touches no engine state and may run anywhere.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass, field

import torch

from llmop.engine.lora.batch import build_lora_batch
from llmop.engine.lora.fair_queue import FairAdapterQueue, within_adapter_limit
from llmop.engine.lora.layers import LoraSlots, LoraState, apply_lora
from llmop.engine.lora.ops import get_lora_ops
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
    names) and, per registered adapter, (requests, prompt tokens, generation tokens)."""

    max_lora: int
    running_lora_adapters: tuple[str, ...] = ()
    waiting_lora_adapters: tuple[str, ...] = ()
    counters: tuple[tuple[str, int, int, int], ...] = ()
    states: tuple[tuple[str, str], ...] = ()  # (adapter, state)


class LoraManager:
    def __init__(self, config, model: torch.nn.Module, model_config, device: torch.device,
                 dtype: torch.dtype, scheduler):
        self.config, self.model, self.model_config = config, model, model_config
        self.device, self.dtype, self.scheduler = device, dtype, scheduler
        self.registry: AdapterRegistry | None = None
        self.slots: LoraSlots | None = None
        self.state: LoraState | None = None
        self.queue: FairAdapterQueue | None = None
        self.counters: dict[str, AdapterCounters] = {}
        self.snapshot = LoraStats(config.max_loras)  # refreshed on registry changes, and while stepping
        self._snapshot_time = 0.0

    @property
    def enabled(self) -> bool:
        return self.registry is not None

    def enable(self) -> None:
        """Apply the LoRA pass and switch the scheduler to the fair queue (once)."""
        if self.enabled:
            return
        c = self.config
        if c.max_loras < 1:
            raise ValueError("LoRA is disabled: max_loras is 0")
        self.state = LoraState(c.max_loras, c.max_lora_rank, get_lora_ops(c.lora_backend, self.device), self.device)
        self.slots = apply_lora(self.model, self.model_config.num_layers, self.state)
        self.registry = AdapterRegistry(c.max_loras, c.max_cpu_loras, self.read, self.slots.write)
        self.queue = FairAdapterQueue(self.eligible)
        for req in list(self.scheduler.waiting):
            self.queue.push(req)
        self.scheduler.waiting = self.queue  # same interface as WaitingQueue
        log.info("LoRA enabled: %d slots x rank %d (%.1f MiB on %s), %s backend", c.max_loras, c.max_lora_rank,
                 self.slots.num_bytes / 2**20, self.device, self.state.ops.name)

    # --- registration -----------------------------------------------------------------------------

    def read(self, name: str, source: str) -> LoraAdapter:
        """Read and validate from disk (no engine state: safe on any thread)."""
        return load_peft_adapter(name, source, self.model_config, self.config.max_lora_rank, self.dtype)

    def add(self, name: str, source: str, pinned: bool = False) -> AdapterInfo:
        """Register and read now; raises AdapterError (and leaves the adapter FAILED) if it does not fit."""
        self.enable()
        try:
            info = self.registry.add(name, source, pinned, in_use=self._in_use())
        finally:
            self._refresh()
        self.counters.setdefault(name, AdapterCounters())
        return info

    def begin_load(self, name: str, source: str, pinned: bool = False) -> None:
        """Register in state LOADING; the caller reads (`read`) and then calls finish/fail_load."""
        self.enable()
        self.registry.begin(name, source, pinned)
        self._refresh()

    def finish_load(self, name: str, adapter: LoraAdapter) -> AdapterInfo:
        self.registry.finish(name, adapter, in_use=self._in_use())
        self.counters.setdefault(name, AdapterCounters())
        self._refresh()
        return self.registry.info(name)

    def fail_load(self, name: str, error: str) -> AdapterInfo:
        self.registry.fail(name, error)
        self._refresh()
        return self.registry.info(name)

    def remove(self, name: str) -> None:
        """Unregister; refused (AdapterConflict) while requests for it are waiting or running."""
        if not self.enabled:
            raise AdapterNotFound(name)
        self.registry.remove(name, in_use=self._in_use(include_waiting=True))
        self.counters.pop(name, None)
        self._refresh()

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
        self.counters.setdefault(adapter, AdapterCounters()).requests += 1

    # --- scheduling -------------------------------------------------------------------------------

    def _in_use(self, include_waiting: bool = False) -> set[str]:
        reqs = list(self.scheduler.running) + (list(self.scheduler.waiting) if include_waiting else [])
        return {r.adapter for r in reqs if r.adapter is not None}

    def eligible(self, adapter: str | None) -> bool:
        """May a request of `adapter` be admitted now? Within the distinct-adapter limit, and in host
        memory (a DISK adapter is read back here, so only the chosen one is read)."""
        if adapter is None:
            return True
        reg, running = self.registry, self._in_use()
        return within_adapter_limit(adapter, running, reg.pinned_resident(), reg.max_slots) and reg.ensure_host(adapter, running)

    def begin_step(self, out):
        """Before the forward pass: make the step's adapters resident, order the chunks by slot
        (base requests first, each adapter's tokens contiguous, which the LoRA ops exploit), map
        tokens to slots, charge the fair queue and count tokens. Returns the step to run."""
        if not self.enabled:
            return out
        adapters = [c.request.adapter for c in out.chunks if c.request.adapter is not None]
        slot_of = self.registry.ensure_resident(adapters, in_use=self._in_use()) if adapters else {}
        if adapters:
            key = lambda c: -1 if c.request.adapter is None else slot_of[c.request.adapter]
            out = dataclasses.replace(out, chunks=tuple(sorted(out.chunks, key=key)))
        self.state.batch = build_lora_batch(out.chunks, slot_of, self.state, self.device, self.dtype)
        self.queue.charge_chunks(out.chunks)
        for c in out.chunks:
            n = self.counters.get(c.request.adapter) if c.request.adapter is not None else None
            if n is not None:
                n.prompt_tokens += max(0, min(c.start + c.num_tokens, c.request.num_prompt_tokens) - c.start)
                n.generation_tokens += int(c.completes)
        if time.monotonic() - self._snapshot_time > SNAPSHOT_PERIOD_S:
            self._refresh()
        return out

    def stats(self) -> LoraStats:
        """Compute a fresh snapshot (engine thread); other threads read `snapshot`."""
        if not self.enabled:
            return LoraStats(self.config.max_loras)
        return LoraStats(
            self.config.max_loras, tuple(sorted(self._in_use())), tuple(sorted(self.queue.waiting_adapters())),
            tuple((n, c.requests, c.prompt_tokens, c.generation_tokens) for n, c in self.counters.items()),
            tuple((i.name, i.state.value) for i in self.registry.infos()))

    def _refresh(self) -> None:
        self.snapshot, self._snapshot_time = self.stats(), time.monotonic()
