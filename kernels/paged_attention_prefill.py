"""Paged attention for prefill, chunked prefill and mixed batches, varlen in one launch.

The batch is flattened: sequence i owns query tokens `query_start_loc[i] : query_start_loc[i+1]`,
which are its newest positions, so query token j sits at `seq_lens[i] - q_len_i + j` and attends
causally to every earlier position, read from the paged cache (the new keys/values are written
there first).  A chunk of a long prompt therefore sees the earlier chunks through the block table,
and a decode row is simply `q_len = 1`.

The grid is `(num_tokens // BLOCK_Q + num_seqs, num_kv_heads)`: enough query blocks for any split
of the tokens into sequences, without reading lengths on the host; each program finds its sequence
by binary search over `query_start_loc` and exits when its block is past the sequence's end.
"""

from __future__ import annotations

import torch

from ._paged_attention import (
    LOG2E, attend_dense, attend_kv_range, check_attention_inputs, check_out, gather_context, load_rows,
    softmax_scale, store_rows,
)
from ._triton import check_launchable, dot_mode, jit, next_pow2, tl
from .decode_plan import plan_decode


@jit
def find_seq(query_start_loc_ptr, pid, num_seqs, BLOCK_Q: tl.constexpr):
    """The sequence whose query blocks start at or before `pid` (blocks of seq i start at
    `query_start_loc[i] // BLOCK_Q + i`)."""
    lo = 0
    hi = num_seqs
    while lo < hi:
        mid = (lo + hi) // 2
        first_block = tl.load(query_start_loc_ptr + mid) // BLOCK_Q + mid
        if first_block <= pid:
            lo = mid + 1
        else:
            hi = mid
    return lo - 1


@jit
def paged_attention_prefill_kernel(
    q_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, seq_lens_ptr, query_start_loc_ptr, out_ptr,
    num_seqs, qk_scale, v_scale, block_size, stride_bt, stride_qt, stride_qh, stride_ot, stride_oh,
    stride_cb, stride_co, stride_ch,
    GQA: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_Q: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, DOT: tl.constexpr,
):
    pid = tl.program_id(0)
    kv_head = tl.program_id(1)
    seq = find_seq(query_start_loc_ptr, pid, num_seqs, BLOCK_Q)
    q_start = tl.load(query_start_loc_ptr + seq)
    q_len = tl.load(query_start_loc_ptr + seq + 1) - q_start
    q_block = pid - (q_start // BLOCK_Q + seq)
    if q_block * BLOCK_Q >= q_len:
        return
    context_len = tl.load(seq_lens_ptr + seq) - q_len

    rows = tl.arange(0, BLOCK_M)
    q_local = q_block * BLOCK_Q + rows // GQA
    head = kv_head * GQA + rows % GQA
    row_valid = (rows < BLOCK_Q * GQA) & (q_local < q_len)
    tok = q_start + q_local
    offs_d = tl.arange(0, BLOCK_D)
    d_mask = offs_d < HEAD_DIM
    q = load_rows(q_ptr, tok, head, row_valid, stride_qt, stride_qh, offs_d, d_mask)
    q_pos = tl.where(row_valid, context_len + q_local, -1)
    kv_end = context_len + tl.minimum(q_len, (q_block + 1) * BLOCK_Q)

    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc, m_i, l_i = attend_kv_range(
        q, q_pos, acc, m_i, l_i, k_cache_ptr, v_cache_ptr, block_tables_ptr + seq.to(tl.int64) * stride_bt,
        kv_head, block_size, stride_cb, stride_co, stride_ch, 0, kv_end, qk_scale, offs_d, d_mask,
        BLOCK_N, DOT,
    )
    o = acc * (v_scale / tl.where(l_i > 0, l_i, 1.0))[:, None]
    store_rows(out_ptr, o, tok, head, row_valid, stride_ot, stride_oh, offs_d, d_mask)


def _check_query_start_loc(query_start_loc, num_seqs):
    if query_start_loc.shape != (num_seqs + 1,) or query_start_loc.dtype != torch.int32:
        raise ValueError("query_start_loc must be int32 [num_seqs + 1]")


def paged_attention_prefill(
    query, key_cache, value_cache, block_tables, seq_lens, query_start_loc, scale=None, out=None, *,
    block_m=64, block_n=64, plan=None, k_scale=1.0, v_scale=1.0,
):
    """Triton causal varlen attention over the paged cache (prefill, chunked prefill, decode rows).

    query: `[num_tokens, num_heads, head_dim]` flattened over sequences, `query_start_loc` int32
    `[num_seqs + 1]` cumulative query lengths (`query_start_loc[-1] == num_tokens`; tokens past it
    are left unwritten); seq_lens: int32 `[num_seqs]` total context lengths including the new
    tokens; caches/block_tables/k_scale/v_scale as in `paged_attention_decode`.  Returns `out`.
    """
    num_kv_heads, gqa, head_dim, block_size = check_attention_inputs(query, key_cache, value_cache, block_tables, seq_lens)
    num_seqs = block_tables.shape[0]
    _check_query_start_loc(query_start_loc, num_seqs)
    out = check_out(out, query)
    check_launchable(query, key_cache, value_cache, block_tables, seq_lens, query_start_loc, out)
    num_tokens = query.shape[0]
    if num_tokens == 0 or num_seqs == 0:
        return out
    block_m = max(block_m, next_pow2(gqa, 16))
    block_q = block_m // gqa
    grid = (num_tokens // block_q + num_seqs, num_kv_heads)
    paged_attention_prefill_kernel[grid](
        query, key_cache, value_cache, block_tables, seq_lens, query_start_loc, out,
        num_seqs, softmax_scale(scale, head_dim) * LOG2E * k_scale, v_scale, block_size, block_tables.stride(0),
        query.stride(0), query.stride(1), out.stride(0), out.stride(1),
        key_cache.stride(0), key_cache.stride(1), key_cache.stride(2),
        GQA=gqa, HEAD_DIM=head_dim, BLOCK_Q=block_q, BLOCK_M=block_m, BLOCK_N=block_n,
        BLOCK_D=next_pow2(head_dim, 16), DOT=dot_mode(query.dtype),
    )
    return out


def ref_paged_attention_prefill(
    query, key_cache, value_cache, block_tables, seq_lens, query_start_loc, scale=None, out=None, *,
    block_m=64, block_n=64, plan=None, k_scale=1.0, v_scale=1.0,
):
    """Torch reference of `paged_attention_prefill` (same arguments; block sizes ignored).

    Sequences with one query token go through the decode plan (`plan`, from
    `decode_plan.plan_decode(..., query_start_loc)`, or made here); longer ones are done
    one sequence at a time, each vectorised over its tokens, heads and context.
    """
    check_attention_inputs(query, key_cache, value_cache, block_tables, seq_lens)
    num_seqs = block_tables.shape[0]
    _check_query_start_loc(query_start_loc, num_seqs)
    out = check_out(out, query)
    scale = softmax_scale(scale, query.shape[2])
    if plan is None:
        plan = plan_decode(key_cache, block_tables, seq_lens, query_start_loc)
    plan.attend(query, key_cache, value_cache, scale, out, k_scale, v_scale)
    starts = query_start_loc.tolist()
    lens = seq_lens.tolist()
    for i, (a, b) in enumerate(zip(starts[:-1], starts[1:])):
        q_len, seq_len = b - a, lens[i]
        if q_len <= 1:
            continue
        keys, values, _ = gather_context(key_cache, value_cache, block_tables[i : i + 1], seq_lens[i : i + 1], seq_len)
        q_pos = torch.arange(seq_len - q_len, seq_len, device=query.device)
        visible = torch.arange(seq_len, device=query.device)[None, :] <= q_pos[:, None]
        out[a:b] = attend_dense(query[a:b][None], keys, values, visible[None], scale, k_scale, v_scale)[0].to(out.dtype)
    return out
