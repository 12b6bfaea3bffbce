"""Per step: which adapter slot each token of the flattened batch uses.

Built from the scheduler's chunks in the same order `model_runner.build_batch` flattens them, so
row t of the batch and the t-th token here describe the same token. The torch path gets its per-step
plan (`kernels.lora_plan`), built from the host list, so no layer reads the device; the Triton
kernels get the tokens grouped by slot once here, on the device, and every layer reuses the groups.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import torch


@dataclass(frozen=True)
class LoraBatch:
    rank: int  # the largest rank among the slots in use (the ops may skip the zero padding past it)
    slots: tuple[int, ...]  # distinct slots in use
    plan: object = None  # kernels.lora_plan.LoraPlan: the torch path's whole step
    token_slot: torch.Tensor | None = None  # int32 [num_tokens] (-1 = base model), without a plan
    groups: tuple | None = None  # kernels.lora.LoraGroups (tokens sorted by slot), without a plan


def build_lora_batch(chunks: Sequence, slot_of: Mapping[str, int], state, device: torch.device,
                     dtype: torch.dtype) -> LoraBatch | None:
    """`chunks`: ScheduledChunks (request.adapter, num_tokens); `state`: the layers' LoraState (slot
    ranks and scalings, the ops). None when no token uses an adapter, so base-only steps run the
    plain model."""
    per_token: list[int] = []
    for c in chunks:
        per_token.extend([-1 if c.request.adapter is None else slot_of[c.request.adapter]] * c.num_tokens)
    used = sorted(set(slot_of[c.request.adapter] for c in chunks if c.request.adapter is not None))
    if not used:
        return None
    rank = max(state.slot_rank[s] for s in used)
    if state.ops.plan is not None:
        return LoraBatch(rank, tuple(used), plan=state.ops.plan(per_token, state.slot_scaling, dtype, device))
    token_slot = torch.tensor(per_token, dtype=torch.int32, device=device)
    return LoraBatch(rank, tuple(used), token_slot=token_slot, groups=state.ops.groups(token_slot, state.num_slots))
