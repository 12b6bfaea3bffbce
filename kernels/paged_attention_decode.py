"""Paged attention for decode: one query token per sequence, GQA, split-KV (flash-decoding).

A decode step is bound by reading the KV cache.  With few sequences there are too few
(sequence, KV head) programs to keep the GPU busy, so each sequence's context is cut into
`num_splits` segments processed in parallel; every segment writes its normalised partial output
and its log-sum-exp, and a second small kernel merges the segments by log-sum-exp.  Each program
serves all query heads of one KV head, so every key/value tile is read once per GQA group.

The split count depends only on shapes and the device (no host sync, CUDA-graph friendly); each
program derives its segment from its own sequence's length.
"""

from __future__ import annotations

import functools

import torch

from ._paged_attention import (
    LOG2E, attend_kv_range, check_attention_inputs, check_out, load_rows, softmax_scale, store_rows,
)
from .decode_plan import plan_decode
from ._triton import cdiv, check_launchable, dot_mode, jit, next_pow2, tl

MAX_SPLITS = 16


@jit
def paged_attention_decode_kernel(
    q_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, seq_lens_ptr, out_ptr, part_out_ptr, part_lse_ptr,
    qk_scale, v_scale, block_size, stride_bt, stride_qt, stride_qh, stride_ot, stride_oh,
    stride_cb, stride_co, stride_ch,
    GQA: tl.constexpr, HEAD_DIM: tl.constexpr, NUM_SPLITS: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, DOT: tl.constexpr,
):
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    seq_len = tl.load(seq_lens_ptr + seq)

    rows = tl.arange(0, BLOCK_M)
    row_valid = rows < GQA
    head = kv_head * GQA + rows
    tok = tl.zeros([BLOCK_M], dtype=tl.int32) + seq
    offs_d = tl.arange(0, BLOCK_D)
    d_mask = offs_d < HEAD_DIM
    q = load_rows(q_ptr, tok, head, row_valid, stride_qt, stride_qh, offs_d, d_mask)
    q_pos = tl.where(row_valid, seq_len - 1, -1)

    split_len = ((seq_len + NUM_SPLITS - 1) // NUM_SPLITS + BLOCK_N - 1) // BLOCK_N * BLOCK_N
    kv_start = split * split_len
    kv_end = tl.minimum(seq_len, kv_start + split_len)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc, m_i, l_i = attend_kv_range(
        q, q_pos, acc, m_i, l_i, k_cache_ptr, v_cache_ptr, block_tables_ptr + seq.to(tl.int64) * stride_bt,
        kv_head, block_size, stride_cb, stride_co, stride_ch, kv_start, kv_end, qk_scale, offs_d, d_mask,
        BLOCK_N, DOT,
    )
    has = l_i > 0
    o = acc * (v_scale / tl.where(has, l_i, 1.0))[:, None]
    if NUM_SPLITS == 1:
        store_rows(out_ptr, o, tok, head, row_valid, stride_ot, stride_oh, offs_d, d_mask)
    else:
        # partials: part_out [num_seqs, num_heads, NUM_SPLITS, HEAD_DIM], part_lse [.., NUM_SPLITS]
        part = (seq * (GQA * tl.num_programs(1)) + head) * NUM_SPLITS + split
        store_rows(part_out_ptr, o, part, head * 0, row_valid, HEAD_DIM, 0, offs_d, d_mask)
        lse = tl.where(has, m_i + tl.log2(tl.where(has, l_i, 1.0)), float("-inf"))
        tl.store(part_lse_ptr + part, lse, mask=row_valid)


@jit
def merge_splits_kernel(
    part_out_ptr, part_lse_ptr, out_ptr, stride_ot, stride_oh,
    NUM_SPLITS: tl.constexpr, BLOCK_S: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """Merge the per-segment outputs of one (sequence, head) by their log-sum-exp (base 2)."""
    seq = tl.program_id(0)
    head = tl.program_id(1)
    row = seq * tl.num_programs(1) + head
    offs_s = tl.arange(0, BLOCK_S)
    offs_d = tl.arange(0, BLOCK_D)
    s_mask = offs_s < NUM_SPLITS
    lse = tl.load(part_lse_ptr + row * NUM_SPLITS + offs_s, mask=s_mask, other=float("-inf"))
    m = tl.max(lse, 0)
    w = tl.exp2(lse - tl.where(m == float("-inf"), 0.0, m))
    mask = s_mask[:, None] & (offs_d[None, :] < HEAD_DIM)
    o = tl.load(part_out_ptr + (row * NUM_SPLITS + offs_s[:, None]) * HEAD_DIM + offs_d[None, :], mask=mask, other=0.0)
    total = tl.sum(w, 0)
    merged = tl.sum(o * w[:, None], 0) / tl.where(total > 0, total, 1.0)
    dst = out_ptr + seq.to(tl.int64) * stride_ot + head * stride_oh + offs_d
    tl.store(dst, merged.to(out_ptr.dtype.element_ty), mask=offs_d < HEAD_DIM)


@functools.lru_cache(maxsize=None)
def _num_sms(device: torch.device) -> int:
    if device.type != "cuda":
        return 1  # interpreter: as few programs as possible
    return torch.cuda.get_device_properties(device).multi_processor_count


def default_num_splits(num_seqs, num_kv_heads, device, max_seq_len=None, block_n=64) -> int:
    """Enough segments for ~4 waves of programs, at most MAX_SPLITS, and no more than tiles."""
    splits = cdiv(4 * _num_sms(device), max(1, num_seqs * num_kv_heads))
    if max_seq_len is not None:
        splits = min(splits, cdiv(max(1, max_seq_len), block_n))
    return max(1, min(MAX_SPLITS, splits))


def paged_attention_decode(
    query, key_cache, value_cache, block_tables, seq_lens, scale=None, out=None, *,
    max_seq_len=None, num_splits=None, block_n=64, plan=None, k_scale=1.0, v_scale=1.0,
):
    """Triton decode attention: `out[s] = softmax(q[s] K_s^T * scale) V_s` over the paged context.

    query: `[num_seqs, num_heads, head_dim]` (one token per sequence, the newest position);
    key_cache/value_cache: `[num_blocks, block_size, num_kv_heads, head_dim]`, already holding the
    new token; block_tables: int32 `[num_seqs, max_blocks_per_seq]`; seq_lens: int32 `[num_seqs]`,
    context length including the new token (>= 1).  scale defaults to 1/sqrt(head_dim).
    max_seq_len (optional host hint) and num_splits tune the split-KV; results do not depend on them
    beyond rounding; `plan` is the torch path's and is ignored here; k_scale/v_scale: an fp8 cache's
    per-tensor scales (`reshape_and_cache`).  Returns `out` (allocated like the query when not given).
    """
    num_kv_heads, gqa, head_dim, block_size = check_attention_inputs(query, key_cache, value_cache, block_tables, seq_lens)
    num_seqs = query.shape[0]
    if block_tables.shape[0] != num_seqs:
        raise ValueError("decode expects one query token per sequence")
    out = check_out(out, query)
    check_launchable(query, key_cache, value_cache, block_tables, seq_lens, out)
    if num_seqs == 0:
        return out
    if num_splits is None:
        num_splits = default_num_splits(num_seqs, num_kv_heads, query.device, max_seq_len, block_n)
    if num_splits > 1:
        part_out = torch.empty(num_seqs, query.shape[1], num_splits, head_dim, dtype=torch.float32, device=query.device)
        part_lse = torch.empty(num_seqs, query.shape[1], num_splits, dtype=torch.float32, device=query.device)
    else:
        part_out = part_lse = out  # unused
    block_d = next_pow2(head_dim, 16)
    paged_attention_decode_kernel[(num_seqs, num_kv_heads, num_splits)](
        query, key_cache, value_cache, block_tables, seq_lens, out, part_out, part_lse,
        softmax_scale(scale, head_dim) * LOG2E * k_scale, v_scale, block_size, block_tables.stride(0),
        query.stride(0), query.stride(1), out.stride(0), out.stride(1),
        key_cache.stride(0), key_cache.stride(1), key_cache.stride(2),
        GQA=gqa, HEAD_DIM=head_dim, NUM_SPLITS=num_splits,
        BLOCK_M=next_pow2(gqa, 16), BLOCK_N=block_n, BLOCK_D=block_d, DOT=dot_mode(query.dtype),
    )
    if num_splits > 1:
        merge_splits_kernel[(num_seqs, query.shape[1])](
            part_out, part_lse, out, out.stride(0), out.stride(1),
            NUM_SPLITS=num_splits, BLOCK_S=next_pow2(num_splits), HEAD_DIM=head_dim, BLOCK_D=block_d,
        )
    return out


def ref_paged_attention_decode(
    query, key_cache, value_cache, block_tables, seq_lens, scale=None, out=None, *,
    max_seq_len=None, num_splits=None, block_n=64, plan=None, k_scale=1.0, v_scale=1.0,
):
    """Torch reference of `paged_attention_decode` (same arguments; the tuning ones are ignored).
    `plan` (from `decode_plan.plan_decode`, made once per step) spares every layer the bucketing;
    without it the call makes its own."""
    check_attention_inputs(query, key_cache, value_cache, block_tables, seq_lens)
    out = check_out(out, query)
    if query.shape[0] == 0:
        return out
    if plan is None:
        plan = plan_decode(key_cache, block_tables, seq_lens)
    return plan.attend(query, key_cache, value_cache, softmax_scale(scale, query.shape[2]), out, k_scale, v_scale)
