"""The torch LoRA path's per-step plan: the step's tokens grouped by slot once, for every layer.

A LoRA layer's cost on the CPU is op count and weight bytes, not FLOPs: rank 16 adds ~1% to a
projection's FLOPs, but every torch op costs ~10-20 us and there are 210 LoRA layers per step of
SmolLM2. So the plan turns any mix of adapters into a few ops per layer, whatever their number:

- light slots (at most `HEAVY` tokens each: decode rows) share one padded batched matmul over the
  range of slots they span (`rows [slots, group]`, padding pointing at token 0 with a zero scale):
  gather, batched shrink, scale, batched expand, index-add;
- heavy slots (a prefill chunk, a popular adapter's many decode rows) each run two plain matmuls on
  their rows, `y[rows] += scale * (x[rows] A^T) B^T`, in place and without a gather when the rows
  are contiguous (the engine orders a step's chunks by slot).

Padding only ever reaches `HEAVY` rows per light slot, where the batched matmul's cost is still the
weights it reads (measured on the 2-core VM: [22 slots, G, 576] x [576, 16] costs 45 us at G=1,
70 us at G=8, 96 us at G=16; the expand to 1536 columns 80, 186 and 605 us).

Built on the host from the per-token slots the engine already holds, so no layer reads a device
value back.  `apply_lora_plan` has the same semantics as `ref_lora_shrink` + `ref_lora_expand`
(with B given rank-major), except that the math runs in the weights' dtype.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Sequence

import torch

HEAVY = 8  # tokens: a slot with more runs its own matmuls instead of padding every other slot


@dataclass(frozen=True)
class HeavySlot:
    """One slot's tokens, computed alone: rows `start:stop`, or the token indices `rows` when they
    are not contiguous."""

    slot: int
    scale: float
    start: int
    stop: int
    rows: torch.Tensor | None  # int64 [n], only when not contiguous


@dataclass(frozen=True)
class LoraPlan:
    """Light slots: `rows[s, g]` is the g-th token of slot `lo + s` (padding: token 0), `scale[s, g, 0]`
    that slot's scaling (padding and slots outside the light set: 0), `flat_rows` where each result
    row is added; no light slots: `rows` is None. Heavy slots: `heavy`."""

    lo: int
    hi: int
    rows: torch.Tensor | None  # int64 [hi - lo, group]
    flat_rows: torch.Tensor | None  # int64 [(hi - lo) * group]
    scale: torch.Tensor | None  # [hi - lo, group, 1], the weights' dtype
    heavy: tuple[HeavySlot, ...] = ()


def plan_lora(token_slot: Sequence[int], scaling: Sequence[float], dtype: torch.dtype,
              device: torch.device | str) -> LoraPlan | None:
    """The plan for a batch whose token t uses slot `token_slot[t]` (-1 = none); None when no token
    uses an adapter."""
    members: dict[int, list[int]] = defaultdict(list)
    for t, slot in enumerate(token_slot):
        if slot >= 0:
            members[slot].append(t)
    if not members:
        return None
    heavy = tuple(_heavy(slot, tokens, scaling[slot], device) for slot, tokens in sorted(members.items())
                  if len(tokens) > HEAVY)
    light = {slot: tokens for slot, tokens in members.items() if len(tokens) <= HEAVY}
    if not light:
        return LoraPlan(0, 0, None, None, None, heavy)
    lo, hi = min(light), max(light) + 1
    group = max(len(m) for m in light.values())
    rows = torch.zeros(hi - lo, group, dtype=torch.int64)
    scale = torch.zeros(hi - lo, group, 1, dtype=dtype)
    for slot, tokens in light.items():
        rows[slot - lo, : len(tokens)] = torch.tensor(tokens)
        scale[slot - lo, : len(tokens)] = scaling[slot]
    rows, scale = rows.to(device), scale.to(device)
    return LoraPlan(lo, hi, rows, rows.view(-1), scale, heavy)


def _heavy(slot: int, tokens: list[int], scale: float, device) -> HeavySlot:
    start, stop = tokens[0], tokens[-1] + 1
    contiguous = stop - start == len(tokens)
    rows = None if contiguous else torch.tensor(tokens, dtype=torch.int64, device=device)
    return HeavySlot(slot, float(scale), start, stop, rows)


def apply_lora_plan(y: torch.Tensor, x: torch.Tensor, lora_a: torch.Tensor, lora_b_t: torch.Tensor,
                    plan: LoraPlan) -> torch.Tensor:
    """In place: `y[t] += scaling[s] * x[t] @ lora_a[s]^T @ lora_b_t[s]` for every planned token t of
    slot s. `lora_a [slots, rank, in]` as in `kernels.lora`; B rank-major, `lora_b_t [slots, rank,
    out]` (the kernels' `lora_b` transposed, which the CPU's batched matmul reads row by row);
    rank slices of both allowed. Returns y."""
    if plan.rows is not None:
        xg = x.index_select(0, plan.flat_rows).view(*plan.rows.shape, x.shape[1])
        h = torch.bmm(xg, lora_a[plan.lo : plan.hi].transpose(1, 2))  # [slots, group, rank]
        delta = torch.bmm(h.mul_(plan.scale), lora_b_t[plan.lo : plan.hi])  # [slots, group, out]
        y.index_add_(0, plan.flat_rows, delta.view(-1, y.shape[1]))
    for s in plan.heavy:
        a_t, b_t = lora_a[s.slot].t(), lora_b_t[s.slot]
        if s.rows is None:
            y[s.start : s.stop].addmm_(torch.mm(x[s.start : s.stop], a_t), b_t, alpha=s.scale)
        else:
            h = torch.mm(x.index_select(0, s.rows), a_t)
            y.index_add_(0, s.rows, torch.mm(h, b_t), alpha=s.scale)
    return y
