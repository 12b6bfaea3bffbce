"""The batched LoRA op the layers call: the kernels' registry, plus one fact about the chosen op.

`llmop.kernels.registry.get_lora_ops` picks Triton on CUDA and the torch reference elsewhere, so
the engine holds no second implementation of the math. The layout they share: `lora_a [slots,
max_rank, in]`, `lora_b [slots, out, max_rank]` (any strides), `scaling [slots]`, `token_slot
[tokens]` (-1 = no adapter), and the token groups computed once per batch. The torch path instead
plans each step (`kernels.lora_plan`: a few ops per layer whatever the number of adapters).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch


@dataclass(frozen=True)
class LoraOps:
    """`shrink`/`expand`/`groups` as in the kernels' registry. `narrow_rank`: the op takes rank-sliced
    (non-contiguous) weight views, so a batch of small-rank adapters skips the zero padding (the
    Triton kernels get the full slots). `plan(token_slot, slot_scaling, dtype, device)`: the per-step
    plan of the torch path (None for Triton)."""

    name: str
    shrink: Callable
    expand: Callable
    groups: Callable
    narrow_rank: bool
    plan: Callable | None = None


def get_lora_ops(name: str, device: torch.device) -> LoraOps:
    from llmop.kernels import lora
    from llmop.kernels.registry import get_lora_ops as kernel_ops

    from llmop.kernels.lora_plan import plan_lora

    ops = kernel_ops(name, device=device)
    torch_path = ops.shrink is lora.ref_lora_shrink
    return LoraOps(ops.name, ops.shrink, ops.expand, ops.groups, narrow_rank=torch_path,
                   plan=plan_lora if torch_path else None)
