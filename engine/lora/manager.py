"""The engine's side of multi-LoRA: registration, the per-step slot mapping, fairness, counters.

LoRA stays off (no slots allocated, the plain waiting queue, the plain model) until the first
adapter is registered; then the LoRA pass replaces the linear layers and the fair queue replaces
the waiting queue. Everything here runs on the engine thread (the server goes through
`AsyncEngine.call`), except `read`, which touches no engine state and may run anywhere.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import torch

from llmop.engine.lora.batch import build_lora_batch
from llmop.engine.lora.fair_queue import FairAdapterQueue, within_adapter_limit
from llmop.engine.lora.layers import LoraSlots, LoraState, apply_lora
from llmop.engine.lora.ops import get_lora_ops
from llmop.engine.lora.peft_adapter import LoraAdapter, load_peft_adapter
from llmop.engine.lora.registry import AdapterInfo, AdapterNotFound, AdapterRegistry, AdapterState

log = logging.getLogger("llmop.engine.lora")


@dataclass
class AdapterCounters:
    """Per adapter, since it was registered."""

    requests: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0


@dataclass(frozen=True)
class LoraStats:
    """The `lora_requests_info` gauge's labels (vLLM's names), and the per-adapter counters."""

    max_lora: int
    running_lora_adapters: tuple[str, ...]
    waiting_lora_adapters: tuple[str, ...]
    counters: dict[str, AdapterCounters] = field(compare=False)


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
        self.registry = AdapterRegistry(c.max_loras, c.max_cpu_loras, self.read, self.slots.write, self.slots.clear)
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
        info = self.registry.add(name, source, pinned, in_use=self._in_use())
        self.counters.setdefault(name, AdapterCounters())
        return info

    def begin_load(self, name: str, source: str, pinned: bool = False) -> None:
        """Register in state LOADING; the caller reads (`read`) and then calls finish/fail_load."""
        self.enable()
        self.registry.begin(name, source, pinned)

    def finish_load(self, name: str, adapter: LoraAdapter) -> AdapterInfo:
        self.registry.finish(name, adapter, in_use=self._in_use())
        self.counters.setdefault(name, AdapterCounters())
        return self.registry.info(name)

    def fail_load(self, name: str, error: str) -> AdapterInfo:
        self.registry.fail(name, error)
        return self.registry.info(name)

    def remove(self, name: str) -> None:
        """Unregister; refused (AdapterConflict) while requests for it are waiting or running."""
        if not self.enabled:
            raise AdapterNotFound(name)
        self.registry.remove(name, in_use=self._in_use(include_waiting=True))
        self.counters.pop(name, None)

    def infos(self) -> list[AdapterInfo]:
        return self.registry.infos() if self.enabled else []

    def servable(self, name: str) -> bool:
        """Requests may select `name` (it is registered and not failed)."""
        return self.enabled and name in self.registry and self.registry.state(name) is not AdapterState.FAILED

    def check_request(self, adapter: str | None) -> None:
        """Raise ValueError for a request naming an adapter that cannot serve it."""
        if adapter is None:
            return
        if not self.servable(adapter):
            state = self.registry.info(adapter) if self.enabled and adapter in self.registry else None
            why = f": {state.error}" if state is not None and state.error else ""
            raise ValueError(f"adapter {adapter!r} is not available{why}")
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

    def begin_step(self, out) -> None:
        """Before the forward pass: make the step's adapters resident, map tokens to slots,
        charge the fair queue and count tokens."""
        if not self.enabled:
            return
        adapters = [c.request.adapter for c in out.chunks if c.request.adapter is not None]
        slot_of = self.registry.ensure_resident(adapters, in_use=self._in_use()) if adapters else {}
        self.state.batch = build_lora_batch(out.chunks, slot_of, self.state.slot_rank, self.state.num_slots,
                                            self.device, self.state.ops.groups)
        self.queue.charge_chunks(out.chunks)
        for c in out.chunks:
            n = self.counters.get(c.request.adapter) if c.request.adapter is not None else None
            if n is not None:
                n.prompt_tokens += max(0, min(c.start + c.num_tokens, c.request.num_prompt_tokens) - c.start)
                n.generation_tokens += int(c.completes)

    def stats(self) -> LoraStats:
        if not self.enabled:
            return LoraStats(self.config.max_loras, (), (), {})
        return LoraStats(self.config.max_loras, tuple(sorted(self._in_use())),
                         tuple(sorted(set(self.queue.waiting_adapters()))), dict(self.counters))
