"""The torch LoRA path's per-step plan: tokens padded into per-slot groups, once for every layer.

A LoRA layer's cost on the CPU is op count, not FLOPs: rank 16 adds ~1% to a projection's FLOPs,
but a loop over the batch's adapters runs two tiny matmuls per adapter in each of the 210 LoRA
layers of a step. The plan groups the step's tokens by slot once, padded to the largest group
(`rows [slots, group]`, padding pointing at token 0 with a zero scale), over the range of slots in
use, so each layer is five ops whatever the number of adapters: gather, batched shrink, scale,
batched expand, index-add.  Empty slots inside the range and padding rows cost wasted rows; when
that waste would exceed `MAX_WASTE` times the adapter tokens (a long prefill beside a single decode
row), there is no plan and the layers use the grouped ops of `kernels.lora`.

Built on the host from the per-token slots the engine already holds, so no layer reads a device
value back.  `apply_lora_plan` has the same semantics as `ref_lora_shrink` + `ref_lora_expand`,
except that the math runs in the weights' dtype.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Sequence

import torch

MAX_WASTE = 4  # padded rows (range slots x largest group) per adapter token, at most


@dataclass(frozen=True)
class LoraPlan:
    """`rows[s, g]`: the g-th token of slot `lo + s` (padding: token 0); `scale[s, g, 0]`: that
    slot's scaling (padding: 0); `flat_rows`: `rows` flattened, where each result row is added."""

    lo: int
    hi: int
    rows: torch.Tensor  # int64 [hi - lo, group]
    flat_rows: torch.Tensor  # int64 [(hi - lo) * group]
    scale: torch.Tensor  # [hi - lo, group, 1], the weights' dtype


def plan_lora(token_slot: Sequence[int], scaling: Sequence[float], dtype: torch.dtype,
              device: torch.device | str) -> LoraPlan | None:
    """The plan for a batch whose token t uses slot `token_slot[t]` (-1 = none); None when no token
    uses an adapter or padding would waste more than MAX_WASTE rows per adapter token."""
    members: dict[int, list[int]] = defaultdict(list)
    for t, slot in enumerate(token_slot):
        if slot >= 0:
            members[slot].append(t)
    if not members:
        return None
    lo, hi = min(members), max(members) + 1
    group = max(len(m) for m in members.values())
    if (hi - lo) * group > MAX_WASTE * sum(len(m) for m in members.values()):
        return None
    rows = torch.zeros(hi - lo, group, dtype=torch.int64)
    scale = torch.zeros(hi - lo, group, 1, dtype=dtype)
    for slot, tokens in members.items():
        rows[slot - lo, : len(tokens)] = torch.tensor(tokens)
        scale[slot - lo, : len(tokens)] = scaling[slot]
    rows, scale = rows.to(device), scale.to(device)
    return LoraPlan(lo, hi, rows, rows.view(-1), scale)


def apply_lora_plan(y: torch.Tensor, x: torch.Tensor, lora_a: torch.Tensor, lora_b: torch.Tensor,
                    plan: LoraPlan) -> torch.Tensor:
    """In place: `y[t] += scaling[s] * x[t] @ lora_a[s]^T @ lora_b[s]^T` for every planned token t of
    slot s. Layout as in `kernels.lora`: `lora_a [slots, rank, in]`, `lora_b [slots, out, rank]`
    (rank slices allowed). `lora_b` is fastest as a transposed view of a rank-major buffer, so that
    the expand reads `[slots, rank, out]` row by row. Returns y."""
    a, b = lora_a[plan.lo : plan.hi], lora_b[plan.lo : plan.hi]
    xg = x.index_select(0, plan.flat_rows).view(*plan.rows.shape, x.shape[1])
    h = torch.bmm(xg, a.transpose(1, 2))  # [slots, group, rank]
    delta = torch.bmm(h.mul_(plan.scale), b.transpose(1, 2))  # [slots, group, out]
    return y.index_add_(0, plan.flat_rows, delta.view(-1, y.shape[1]))
