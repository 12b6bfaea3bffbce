"""Per step, on a rank: the LoRA layers' view of which adapter slot each token uses.

Built from the `ForwardBatch`'s per-token slots (`LoraMapping.token_slots`), so row t of the batch
and slot t here describe the same token. The torch path gets its per-step plan
(`kernels.lora_plan`), built from the host list, so no layer reads the device; the Triton kernels
get the tokens grouped by slot once here, on the device, and every layer reuses the groups.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch


@dataclass(frozen=True)
class LoraBatch:
    rank: int  # the largest rank among the slots in use (the ops may skip the zero padding past it)
    slots: tuple[int, ...]  # distinct slots in use
    plan: object = None  # kernels.lora_plan.LoraPlan: the torch path's whole step
    token_slot: torch.Tensor | None = None  # int32 [num_tokens] (-1 = base model), without a plan
    groups: tuple | None = None  # kernels.lora.LoraGroups (tokens sorted by slot), without a plan


def build_lora_batch(per_token: Sequence[int], state, device: torch.device, dtype: torch.dtype) -> LoraBatch | None:
    """`per_token`: the slot of every token (-1 = base model); `state`: the layers' LoraState (slot
    ranks and scalings, the ops). None when no token uses an adapter, so base-only steps run the
    plain model."""
    used = sorted(set(per_token) - {-1})
    if not used:
        return None
    per_token = list(per_token)
    rank = max(state.slot_rank[s] for s in used)
    if state.ops.plan is not None:
        return LoraBatch(rank, tuple(used), plan=state.ops.plan(per_token, state.slot_scaling, dtype, device))
    token_slot = torch.tensor(per_token, dtype=torch.int32, device=device)
    return LoraBatch(rank, tuple(used), token_slot=token_slot, groups=state.ops.groups(token_slot, state.num_slots))
