"""Sizing and allocating the paged KV cache from a memory budget."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from llmop.engine.model_config import ModelConfig


@dataclass(frozen=True)
class KVCacheSpec:
    num_blocks: int
    block_size: int
    bytes_per_block: int

    @property
    def num_tokens(self) -> int:
        return self.num_blocks * self.block_size

    def max_concurrent_seqs(self, seq_len: int) -> int:
        """How many sequences of `seq_len` tokens fit at once."""
        per_seq = -(-seq_len // self.block_size)
        return self.num_blocks // per_seq


def available_memory(device: torch.device) -> int:
    """Free device memory (CUDA) or the host's MemAvailable (CPU), in bytes."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("cannot read MemAvailable from /proc/meminfo")


def plan_kv_cache(cfg: ModelConfig, dtype: torch.dtype, block_size: int, budget_bytes: int) -> KVCacheSpec:
    per_token = cfg.kv_bytes_per_token(torch.empty((), dtype=dtype).element_size())
    per_block = per_token * block_size
    num_blocks = budget_bytes // per_block
    if num_blocks < 1:
        raise ValueError(f"KV budget of {budget_bytes} bytes is below one block ({per_block} bytes)")
    return KVCacheSpec(int(num_blocks), block_size, per_block)


def allocate_kv_cache(cfg: ModelConfig, spec: KVCacheSpec, dtype: torch.dtype,
                      device: torch.device) -> list[tuple[torch.Tensor, torch.Tensor]]:
    shape = (spec.num_blocks, spec.block_size, cfg.num_kv_heads, cfg.head_dim)
    return [
        (torch.zeros(shape, dtype=dtype, device=device), torch.zeros(shape, dtype=dtype, device=device))
        for _ in range(cfg.num_layers)
    ]
