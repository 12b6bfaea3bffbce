"""Per step: which adapter slot each token of the flattened batch uses.

Built from the scheduler's chunks in the same order `model_runner.build_batch` flattens them, so
row t of the batch and `token_slot[t]` describe the same token. The torch path gets its per-step
plan (`kernels.lora_plan`), built from the host list, so no layer reads the device; the Triton
kernels get the tokens grouped by slot once here, on the device, and every layer reuses the groups.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import torch


@dataclass(frozen=True)
class LoraBatch:
    token_slot: torch.Tensor  # int32 [num_tokens], -1 = base model
    groups: tuple | None  # kernels.lora.LoraGroups (the tokens sorted by slot) when there is no plan
    rank: int  # the largest rank among the slots in use (the ops may skip the zero padding past it)
    slots: tuple[int, ...]  # distinct slots in use
    plan: object = None  # kernels.lora_plan.LoraPlan, when the op has a plan for this batch


def build_lora_batch(chunks: Sequence, slot_of: Mapping[str, int], state, device: torch.device,
                     dtype: torch.dtype) -> LoraBatch | None:
    """`chunks`: ScheduledChunks (request.adapter, num_tokens); `state`: the layers' LoraState (slot
    ranks and scalings, the ops). None when no token uses an adapter, so base-only steps run the
    plain model."""
    per_token: list[int] = []
    used: set[int] = set()
    for c in chunks:
        slot = -1 if c.request.adapter is None else slot_of[c.request.adapter]
        per_token.extend([slot] * c.num_tokens)
        if slot >= 0:
            used.add(slot)
    if not used:
        return None
    token_slot = torch.tensor(per_token, dtype=torch.int32, device=device)
    plan = state.ops.plan and state.ops.plan(per_token, state.slot_scaling, dtype, device)
    groups = None if plan is not None else state.ops.groups(token_slot, state.num_slots)
    return LoraBatch(token_slot, groups, max(state.slot_rank[s] for s in used), tuple(sorted(used)), plan)
