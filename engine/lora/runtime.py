"""LoRA on a rank: the LoRA pass over this rank's model, slot writes, and the per-step token map.

The engine core decides which adapter sits in which slot (`manager.LoraManager`) and sends the
writes and the per-token slots in the step's `ForwardBatch`; every rank applies them to its own
layers. Under tensor parallelism each rank writes its slice of the adapter, cut like the base layer
(`tp.shard.shard_lora_weights`). The pass is applied at the first slot write, so a server that never
loads an adapter runs the plain model.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging

import torch

from llmop.engine.forward_batch import LoraMapping
from llmop.engine.lora.batch import build_lora_batch
from llmop.engine.lora.layers import LoraSlots, LoraState, apply_lora
from llmop.engine.lora.ops import get_lora_ops
from llmop.engine.model_config import ModelConfig
from llmop.engine.tp.shard import RankShard, shard_lora_weights

log = logging.getLogger("llmop.engine.lora")


class LoraRuntime:
    def __init__(self, model: torch.nn.Module, full_config: ModelConfig, shard: RankShard, num_slots: int,
                 max_rank: int, backend: str, device: torch.device, dtype: torch.dtype):
        self.model, self.full_config, self.shard = model, full_config, shard
        self.num_slots, self.max_rank, self.backend = num_slots, max_rank, backend
        self.device, self.dtype = device, dtype
        self.state: LoraState | None = None
        self.slots: LoraSlots | None = None

    def _enable(self) -> None:
        self.state = LoraState(self.num_slots, self.max_rank, get_lora_ops(self.backend, self.device), self.device,
                               self.dtype)
        self.slots = apply_lora(self.model, self.full_config.num_layers, self.state)
        log.info("LoRA pass applied on rank %d: %d slots x rank %d (%.1f MiB on %s), %s backend", self.shard.rank,
                 self.num_slots, self.max_rank, self.slots.num_bytes / 2**20, self.device, self.state.ops.name)

    def _shard(self, adapter):
        if self.shard.size == 1:
            return adapter
        weights = {(layer, module): shard_lora_weights(self.full_config, self.shard, module, a, b_t)
                   for (layer, module), (a, b_t) in adapter.weights.items()}
        return dataclasses.replace(adapter, weights=weights)

    @contextlib.contextmanager
    def step(self, mapping: LoraMapping | None):
        """Apply the step's slot writes, and expose its token map to the layers during the forward."""
        if mapping is None:
            yield
            return
        if mapping.loads and self.slots is None:
            self._enable()
        for load in mapping.loads:
            self.slots.write(load.slot, self._shard(load.adapter))
        if mapping.token_slots is None or self.state is None:
            yield
            return
        self.state.batch = build_lora_batch(mapping.token_slots, self.state, self.device, self.dtype)
        try:
            yield
        finally:
            self.state.batch = None
