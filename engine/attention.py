"""The attention backend interface: what every backend reads, and the registry that picks one.

A backend writes the step's new keys/values into the paged KV cache by slot, then attends each
query token to its sequence's cached context through the block table. The layouts are shared with
`llmop.kernels`: caches are [num_blocks, block_size, num_kv_heads, head_dim] per layer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import torch


@dataclass(frozen=True)
class AttentionMetadata:
    """One flattened batch: sequences laid end to end, each with its slice of query tokens.

    Query token j of sequence i sits at absolute position seq_lens[i] - query_len_i + j and attends
    to positions 0..that position (causal), all read from the cache.
    """

    slot_mapping: torch.Tensor  # [num_tokens] int64: where each new token's k/v goes
    block_tables: torch.Tensor  # [num_seqs, max_blocks] int32
    seq_lens: torch.Tensor  # [num_seqs] int32, context length including this step's tokens
    query_start_loc: torch.Tensor  # [num_seqs + 1] int32
    seq_lens_list: tuple[int, ...]  # the same numbers on the host, for loops that need them
    query_lens_list: tuple[int, ...]
    max_seq_len: int
    block_size: int
    plan: Any = None  # the backend's per-step work shared by all layers (`AttentionBackend.prepare`)

    @property
    def num_seqs(self) -> int:
        return len(self.seq_lens_list)

    @property
    def is_pure_decode(self) -> bool:
        return all(q == 1 for q in self.query_lens_list)


class AttentionBackend(Protocol):
    """Writes k/v of the new tokens into the layer's cache, returns [num_tokens, num_heads, head_dim]."""

    def prepare(self, meta: AttentionMetadata, key_cache: torch.Tensor) -> AttentionMetadata:
        """Once per step, before the first layer: `meta` with the backend's plan attached."""
        ...

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        kv_cache: tuple[torch.Tensor, torch.Tensor],
        meta: AttentionMetadata,
        scale: float,
    ) -> torch.Tensor: ...


def resolve_attention_backend(name: str, device: torch.device) -> str:
    """"torch" (the kernels' torch references, the CPU path), "triton" (the GPU kernels), or
    "auto": Triton on CUDA, torch otherwise."""
    if name == "auto":
        name = "triton" if device.type == "cuda" else "torch"
    if name not in ("torch", "triton"):
        raise ValueError(f"unknown attention backend {name!r}")
    return name


def get_attention_backend(name: str, device: torch.device) -> AttentionBackend:
    """The backend `resolve_attention_backend` names."""
    from llmop.engine.attention_kernels import KernelAttentionBackend

    return KernelAttentionBackend(resolve_attention_backend(name, device))
