"""The draft model of speculative decoding, in sizing's terms: its weights and its KV cache.

The engine runs the draft as one more model (`engine/draft_proposer.py`): one rank, never split,
in the engine's core process, so on the first GPU of a replica (rank 0's), with the target's
dtype, weight quantization and KV cache dtype. Its KV cache is `draftKvCacheMemoryBytes`, or by
default as many blocks as the target's cache. So on that GPU, at tensor-parallel size t:

    target weights/t + draft weights + target KV/t' + draft KV + reserve ≤ utilization × memory

Every rank gets the same KV byte budget (`kv_cache_memory_bytes` is per rank), so the first GPU
decides it, and the other GPUs keep the draft's share unused. With the default draft cache the
memory left after weights and reserve is split per block: each target block (its per-GPU share)
comes with one draft block, and both caches get the same number of blocks.

The operator never reads the draft's checkpoint: its architecture is `draftArchitecture`, else the
built-in catalog by the draft source's name (`sizing/from_spec.py`), else the spec is refused.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from llmop.operator.sizing.architecture import Architecture


@dataclass(frozen=True)
class DraftRequest:
    """The draft's architecture (at the serving dtype: int8 when the target's weights are) and its
    KV cache budget in bytes (None: the engine's default, as many blocks as the target's)."""

    architecture: Architecture
    kv_cache_bytes: int | None = None

    @property
    def weight_bytes(self) -> int:
        """Its weights, all on one GPU (it is never split)."""
        return self.architecture.weight_bytes_per_gpu(1)

    def kv_bytes_per_token(self, kv_dtype: str) -> int:
        """`kv_dtype` is the target's resolved KV dtype (the engine stores both caches in it)."""
        return self.architecture.kv_bytes_per_token(kv_dtype)

    def kv_budget_bytes(self, kv_dtype: str, budget_tokens: int) -> int:
        """The KV it needs for the budget: its own byte budget, or the budget's tokens in its cache."""
        if self.kv_cache_bytes is not None:
            return self.kv_cache_bytes
        return math.ceil(self.kv_bytes_per_token(kv_dtype) * budget_tokens)

    def target_kv_cache_bytes(self, left: int, target_block_bytes: int, kv_dtype: str, block_size: int) -> int:
        """The target's KV byte budget per GPU when `left` bytes remain after weights and reserve:
        all but the draft's own budget, or (default) as many target blocks as fit with one draft
        block each, in whole target blocks."""
        if self.kv_cache_bytes is not None:
            return left - self.kv_cache_bytes
        return left // (target_block_bytes + self.block_bytes(kv_dtype, block_size)) * target_block_bytes

    def block_bytes(self, kv_dtype: str, block_size: int) -> int:
        return self.kv_bytes_per_token(kv_dtype) * block_size

    def kv_blocks(self, kv_dtype: str, block_size: int, target_blocks: int) -> int:
        """The draft's KV blocks as the engine plans them."""
        per_block = self.block_bytes(kv_dtype, block_size)
        budget = self.kv_cache_bytes if self.kv_cache_bytes is not None else target_blocks * per_block
        return budget // per_block
