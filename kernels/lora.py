"""Batched multi-LoRA: shrink (`h = x @ A^T`) and expand (`y += scaling * h @ B^T`).

Adapters sit stacked per slot: `lora_a [num_slots, max_rank, in_features]`, `lora_b [num_slots,
out_features, max_rank]`, `scaling [num_slots]` (smaller ranks zero-padded), and every token names
its slot in `token_slot [num_tokens]` (-1 = no adapter).  `lora_b` may have any strides: the engine
stores it rank-major (`[slots, rank, out]`, passed as a transposed view), because the CPU's batched
matmul computes `h @ B^T` about twice as fast from that layout (weights in cache).

Decode (one row per request, adapters mixed) and prefill (a contiguous segment per request) are one
case here: the tokens are grouped by slot with a stable sort (`lora_token_groups`, on the device,
no host sync), so a prefill segment stays contiguous and the rows of one adapter share every weight
tile a program loads (the SGMV idea, with segments derived rather than given).  The grid is
`(row blocks, column blocks, num_slots)`; a program whose block lies past its slot's group exits at
once, and tokens without an adapter belong to no group: they are never read nor written.  Compute
the groups once per batch and pass them to every layer's calls.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from ._triton import cdiv, check_launchable, dot_mode, jit, mma, next_pow2, tl


class LoraGroups(NamedTuple):
    """Tokens grouped by adapter slot: `order[bounds[s]:bounds[s+1]]` are the tokens of slot s."""

    order: torch.Tensor  # int32 [num_tokens]: token indices, sorted by slot (no-adapter tokens first)
    bounds: torch.Tensor  # int32 [num_slots + 1]


def lora_token_groups(token_slot: torch.Tensor, num_slots: int) -> LoraGroups:
    """Group tokens by slot (stable, so prefill segments stay in order). Slots must be < num_slots."""
    if token_slot.dim() != 1:
        raise ValueError("token_slot must be [num_tokens]")
    sorted_slots, order = torch.sort(token_slot.to(torch.int32), stable=True)
    targets = torch.arange(num_slots + 1, dtype=torch.int32, device=token_slot.device)
    bounds = torch.searchsorted(sorted_slots, targets, right=False)
    return LoraGroups(order.to(torch.int32), bounds.to(torch.int32))


def _groups(token_slot, num_slots, groups):
    if groups is None:
        return lora_token_groups(token_slot, num_slots)
    if groups.bounds.shape != (num_slots + 1,) or groups.order.shape != token_slot.shape:
        raise ValueError("groups do not match token_slot / num_slots")
    return groups


def check_shrink_inputs(x, lora_a, token_slot, out):
    """Validate shrink inputs; allocate `out` (float32 `[num_tokens, max_rank]`) when None."""
    if x.dim() != 2 or lora_a.dim() != 3 or lora_a.shape[2] != x.shape[1]:
        raise ValueError(f"need x [T, in] and lora_a [slots, rank, in], got {tuple(x.shape)}, {tuple(lora_a.shape)}")
    if x.dtype != lora_a.dtype:
        raise ValueError(f"x and lora_a must share a dtype, got {x.dtype}, {lora_a.dtype}")
    if token_slot.shape != (x.shape[0],):
        raise ValueError("token_slot must be [num_tokens]")
    if out is None:
        return torch.empty(x.shape[0], lora_a.shape[1], dtype=torch.float32, device=x.device)
    if out.shape != (x.shape[0], lora_a.shape[1]) or not out.is_floating_point():
        raise ValueError(f"out must be float [num_tokens, max_rank], got {out.dtype} {tuple(out.shape)}")
    return out


def check_expand_inputs(y, h, lora_b, scaling, token_slot):
    """Validate expand inputs."""
    if y.dim() != 2 or h.dim() != 2 or lora_b.dim() != 3:
        raise ValueError("need y [T, out], h [T, rank], lora_b [slots, out, rank]")
    if lora_b.shape[1] != y.shape[1] or lora_b.shape[2] != h.shape[1] or h.shape[0] != y.shape[0]:
        raise ValueError(f"shapes disagree: y {tuple(y.shape)}, h {tuple(h.shape)}, lora_b {tuple(lora_b.shape)}")
    if scaling.shape != (lora_b.shape[0],) or scaling.dtype != torch.float32:
        raise ValueError("scaling must be float32 [num_slots]")
    if token_slot.shape != (y.shape[0],):
        raise ValueError("token_slot must be [num_tokens]")


@jit
def lora_shrink_kernel(
    x_ptr, a_ptr, h_ptr, order_ptr, bounds_ptr, in_features, rank,
    stride_xt, stride_as, stride_ar, stride_ht,
    BLOCK_M: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr, DOT: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_r = tl.program_id(1)
    slot = tl.program_id(2)
    start = tl.load(bounds_ptr + slot)
    count = tl.load(bounds_ptr + slot + 1) - start
    if pid_m * BLOCK_M >= count:
        return
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    m_mask = offs_m < count
    tok = tl.load(order_ptr + start + offs_m, mask=m_mask, other=0).to(tl.int64)
    offs_r = pid_r * BLOCK_R + tl.arange(0, BLOCK_R)
    r_mask = offs_r < rank
    a_row = a_ptr + slot.to(tl.int64) * stride_as + offs_r[:, None] * stride_ar
    acc = tl.zeros([BLOCK_M, BLOCK_R], dtype=tl.float32)
    for k0 in range(0, in_features, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        k_mask = offs_k < in_features
        x = tl.load(x_ptr + tok[:, None] * stride_xt + offs_k[None, :], mask=m_mask[:, None] & k_mask[None, :], other=0.0)
        a = tl.load(a_row + offs_k[None, :], mask=r_mask[:, None] & k_mask[None, :], other=0.0)
        acc += mma(x, tl.trans(a), DOT)
    dst = h_ptr + tok[:, None] * stride_ht + offs_r[None, :]
    tl.store(dst, acc.to(h_ptr.dtype.element_ty), mask=m_mask[:, None] & r_mask[None, :])


@jit
def lora_expand_kernel(
    y_ptr, h_ptr, b_ptr, scaling_ptr, order_ptr, bounds_ptr, out_features, rank,
    stride_yt, stride_ht, stride_bs, stride_bo, stride_br,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_R: tl.constexpr, DOT: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    slot = tl.program_id(2)
    start = tl.load(bounds_ptr + slot)
    count = tl.load(bounds_ptr + slot + 1) - start
    if pid_m * BLOCK_M >= count:
        return
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    m_mask = offs_m < count
    tok = tl.load(order_ptr + start + offs_m, mask=m_mask, other=0).to(tl.int64)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_mask = offs_n < out_features
    b_rows = b_ptr + slot.to(tl.int64) * stride_bs + offs_n[:, None] * stride_bo
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for r0 in range(0, rank, BLOCK_R):
        offs_r = r0 + tl.arange(0, BLOCK_R)
        r_mask = offs_r < rank
        b = tl.load(b_rows + offs_r[None, :] * stride_br, mask=n_mask[:, None] & r_mask[None, :], other=0.0)
        h = tl.load(h_ptr + tok[:, None] * stride_ht + offs_r[None, :], mask=m_mask[:, None] & r_mask[None, :], other=0.0)
        acc += mma(h.to(b.dtype), tl.trans(b), DOT)
    mask = m_mask[:, None] & n_mask[None, :]
    dst = y_ptr + tok[:, None] * stride_yt + offs_n[None, :]
    y = tl.load(dst, mask=mask, other=0.0).to(tl.float32)
    y += tl.load(scaling_ptr + slot) * acc
    tl.store(dst, y.to(y_ptr.dtype.element_ty), mask=mask)


def _row_block(num_tokens: int) -> int:
    return 16 if num_tokens <= 16 else 64


def lora_shrink(x, lora_a, token_slot, out=None, *, groups=None):
    """Triton: `out[t] = x[t] @ lora_a[token_slot[t]]^T` for tokens with a slot.

    x: `[num_tokens, in_features]` (row stride free); lora_a: `[num_slots, max_rank, in_features]`,
    same dtype, contiguous in its last dim (so a rank slice `lora_a[:, :r]` works: a batch of
    small-rank adapters need not pay for the padding); token_slot: int `[num_tokens]` (-1 = none: that row of `out` is not
    written).  out: float `[num_tokens, max_rank]`, float32 allocated when None.  Returns out.
    """
    out = check_shrink_inputs(x, lora_a, token_slot, out)
    check_launchable(x, lora_a, token_slot, out)
    if x.stride(1) != 1 or out.stride(1) != 1 or lora_a.stride(2) != 1:
        raise ValueError("x, out and lora_a must be contiguous in their last dimension")
    num_tokens, in_features = x.shape
    num_slots, rank = lora_a.shape[:2]
    groups = _groups(token_slot, num_slots, groups)
    if num_tokens == 0 or num_slots == 0:
        return out
    block_m, block_r = _row_block(num_tokens), min(64, next_pow2(rank, 16))
    lora_shrink_kernel[(cdiv(num_tokens, block_m), cdiv(rank, block_r), num_slots)](
        x, lora_a, out, groups.order, groups.bounds, in_features, rank,
        x.stride(0), lora_a.stride(0), lora_a.stride(1), out.stride(0),
        BLOCK_M=block_m, BLOCK_R=block_r, BLOCK_K=min(128, next_pow2(in_features, 16)),
        DOT=dot_mode(x.dtype),
    )
    return out


def lora_expand(y, h, lora_b, scaling, token_slot, *, groups=None):
    """Triton, in place: `y[t] += scaling[s] * h[t] @ lora_b[s]^T` with `s = token_slot[t]` >= 0.

    y: `[num_tokens, out_features]`, the base layer's output (may be a column slice of a wider
    output: only the row stride is free); h: `[num_tokens, max_rank]` from `lora_shrink` (cast to
    the weights' dtype for the product); lora_b: `[num_slots, out_features, max_rank]`, any strides
    (a rank slice `lora_b[..., :r]` and a transposed view of a rank-major buffer both work);
    scaling: float32 `[num_slots]`.  Rows without an adapter are untouched.  Returns y.
    """
    check_expand_inputs(y, h, lora_b, scaling, token_slot)
    check_launchable(y, h, lora_b, scaling, token_slot)
    if y.stride(1) != 1 or h.stride(1) != 1:
        raise ValueError("y and h must be contiguous in their last dimension")
    num_tokens, out_features = y.shape
    num_slots, _, rank = lora_b.shape
    groups = _groups(token_slot, num_slots, groups)
    if num_tokens == 0 or num_slots == 0:
        return y
    block_m, block_n = _row_block(num_tokens), 64
    lora_expand_kernel[(cdiv(num_tokens, block_m), cdiv(out_features, block_n), num_slots)](
        y, h, lora_b, scaling, groups.order, groups.bounds, out_features, rank,
        y.stride(0), h.stride(0), lora_b.stride(0), lora_b.stride(1), lora_b.stride(2),
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_R=min(64, next_pow2(rank, 16)),
        DOT=dot_mode(lora_b.dtype),
    )
    return y


def _host_groups(token_slot, num_slots, groups):
    """The groups and their bounds on the host (one read per call, shared by the paths below)."""
    groups = _groups(token_slot, num_slots, groups)
    return groups, groups.bounds.tolist()


def _slot_rows(groups, bounds):
    """(slot, token indices) for every slot that has tokens (host loop over adapters, not tokens)."""
    for slot in range(len(bounds) - 1):
        if bounds[slot + 1] > bounds[slot]:
            yield slot, groups.order[bounds[slot] : bounds[slot + 1]].long()


# Few tokens over several adapters (decode): one batched matmul over every slot beats a loop of
# tiny per-adapter matmuls, whose cost is launch overhead (16 adapters in a decode batch of 32 on
# the 2-core VM: step 3.6x the base-only step with the loop).
DENSE_MAX_TOKENS = 64


def _dense_rows(token_slot, groups, bounds):
    """(rows with an adapter, their slots) when the batch is small and spans > 2 adapters, else None."""
    used = sum(hi > lo for lo, hi in zip(bounds[:-1], bounds[1:]))
    if used <= 2 or bounds[-1] - bounds[0] > DENSE_MAX_TOKENS:
        return None
    rows = groups.order[bounds[0] : bounds[-1]].long()
    return rows, token_slot[rows].long()


def ref_lora_shrink(x, lora_a, token_slot, out=None, *, groups=None):
    """Torch reference of `lora_shrink`, float32 math: one matmul per adapter in use, or for a small
    batch one matmul against every slot, each token keeping its own slot's rows."""
    out = check_shrink_inputs(x, lora_a, token_slot, out)
    groups, bounds = _host_groups(token_slot, lora_a.shape[0], groups)
    dense = _dense_rows(token_slot, groups, bounds)
    if dense is not None:
        rows, slots = dense
        every = torch.matmul(x[rows].float(), lora_a.float().transpose(1, 2))  # [slots, n, rank]
        out[rows] = every[slots, torch.arange(rows.numel(), device=rows.device)].to(out.dtype)
        return out
    for slot, rows in _slot_rows(groups, bounds):
        out[rows] = (x[rows].float() @ lora_a[slot].float().T).to(out.dtype)
    return out


def ref_lora_expand(y, h, lora_b, scaling, token_slot, *, groups=None):
    """Torch reference of `lora_expand` (in place), float32 math: one matmul per adapter in use, or
    for a small batch one batched matmul over every slot (see `ref_lora_shrink`)."""
    check_expand_inputs(y, h, lora_b, scaling, token_slot)
    groups, bounds = _host_groups(token_slot, lora_b.shape[0], groups)
    dense = _dense_rows(token_slot, groups, bounds)
    if dense is not None:  # each token's h in its slot's block, zeros elsewhere; one batched matmul
        rows, slots = dense
        n, rank = rows.numel(), lora_b.shape[2]
        blocks = torch.zeros(lora_b.shape[0], n, rank, dtype=torch.float32, device=y.device)
        blocks[slots, torch.arange(n, device=rows.device)] = (
            h[rows].to(lora_b.dtype).float() * scaling[slots].float()[:, None])
        delta = torch.bmm(blocks, lora_b.float().transpose(1, 2)).sum(0)
        y[rows] = (y[rows].float() + delta).to(y.dtype)
        return y
    for slot, rows in _slot_rows(groups, bounds):
        delta = scaling[slot] * (h[rows].to(lora_b.dtype).float() @ lora_b[slot].float().T)
        y[rows] = (y[rows].float() + delta).to(y.dtype)
    return y
