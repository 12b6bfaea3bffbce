"""Sizing and allocating the paged KV cache from a memory budget, in the configured KV dtype.

`kv_cache_dtype: auto` stores the cache in the model's dtype; bfloat16/float16/float32 store it so
whatever the model computes in (the attention ops convert tiles as they read them); fp8_e4m3 stores
one byte per value, divided by a per-tensor scale (1.0 until calibrated scales exist), read only by
the Triton kernels (CUDA, or the interpreter in tests). Bytes per token follow the dtype, so the
operator's sizing (`operator/sizing`) and `plan_kv_cache` count the same blocks.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from llmop.engine.model_config import ModelConfig


KV_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16,
             "fp8_e4m3": torch.float8_e4m3fn}


def resolve_kv_dtype(name: str, model_dtype: torch.dtype, attention_backend: str) -> torch.dtype:
    """The cache dtype for `kv_cache_dtype`; ValueError for fp8 without the Triton kernels
    (`attention_backend` is the resolved name, "torch" or "triton")."""
    if name == "auto":
        return model_dtype
    if name not in KV_DTYPES:
        raise ValueError(f"unknown kv_cache_dtype {name!r}; choose auto or one of {sorted(KV_DTYPES)}")
    if name == "fp8_e4m3" and attention_backend != "triton":
        raise ValueError("kv_cache_dtype fp8_e4m3 needs the Triton attention kernels (CUDA); the CPU's "
                         "torch attention would convert every layer's context each step: use bfloat16")
    return KV_DTYPES[name]


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
