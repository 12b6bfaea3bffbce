"""What decode and prefill paged attention share: input checks, Triton tile helpers, torch math.

Both kernels work on a tile of "rows": each row is one (query token, query head) pair, and all
rows of a program belong to one KV head (the GQA group: `num_heads = num_kv_heads * gqa`), so a
key/value tile read from the cache serves every query head that shares it.  Keys are gathered per
token through the block table (`slot = block_tables[seq, pos // block_size] * block_size +
pos % block_size`), so any block size works and a KV tile may span several cache blocks.
Row r of a program with `block_q` query tokens is token `r // gqa`, head `kv_head * gqa + r % gqa`.

The online softmax runs in base 2 (`exp2`, scale pre-multiplied by log2(e)) in float32; the
probabilities are cast to the query's dtype for the P @ V product, as in FlashAttention.

The cache may be stored in another dtype than the query (a bf16 cache under an fp32 model, or fp8
e4m3): tiles are converted to the query's dtype as they are read. An fp8 cache holds values divided
by a per-tensor scale (`k_scale`, `v_scale`, see `reshape_and_cache`); the key scale is folded into
the softmax scale and the value scale into the output, so the inner loop only converts.
"""

from __future__ import annotations

import math

import torch

from ._triton import jit, mma, tl

LOG2E = 1.4426950408889634
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
FP8 = torch.float8_e4m3fn
CACHE_DTYPES = DTYPES + (FP8,)


def check_attention_inputs(query, key_cache, value_cache, block_tables, seq_lens, num_seqs_hint=None):
    """Validate the paged-attention inputs; return (num_kv_heads, gqa_ratio, head_dim, block_size)."""
    if query.dim() != 3 or query.stride(2) != 1:
        raise ValueError(f"query must be [num_tokens, num_heads, head_dim], contiguous in head_dim; got {tuple(query.shape)}")
    if key_cache.dim() != 4 or key_cache.shape != value_cache.shape:
        raise ValueError(f"caches must both be [num_blocks, block_size, num_kv_heads, head_dim], got {tuple(key_cache.shape)}")
    if key_cache.stride() != value_cache.stride() or key_cache.stride(3) != 1:
        raise ValueError("key_cache and value_cache must share strides and be contiguous in head_dim")
    if query.dtype not in DTYPES or key_cache.dtype != value_cache.dtype or key_cache.dtype not in CACHE_DTYPES:
        raise ValueError(f"query must be one of {DTYPES} and both caches one of {CACHE_DTYPES}, got "
                         f"{query.dtype}, {key_cache.dtype}, {value_cache.dtype}")
    _, block_size, num_kv_heads, head_dim = key_cache.shape
    num_heads = query.shape[1]
    if query.shape[2] != head_dim or num_heads % num_kv_heads:
        raise ValueError(f"query heads/dim {tuple(query.shape[1:])} incompatible with cache {num_kv_heads}x{head_dim}")
    if block_tables.dim() != 2 or block_tables.dtype != torch.int32 or block_tables.stride(1) != 1:
        raise ValueError("block_tables must be int32 [num_seqs, max_blocks_per_seq], contiguous rows")
    if seq_lens.shape != (block_tables.shape[0],) or seq_lens.dtype != torch.int32:
        raise ValueError("seq_lens must be int32 [num_seqs]")
    return num_kv_heads, num_heads // num_kv_heads, head_dim, block_size


def check_out(out, query):
    """Allocate or validate the output, `[num_tokens, num_heads, head_dim]` like the query."""
    if out is None:
        return torch.empty_like(query)
    if out.shape != query.shape or out.dtype != query.dtype or out.stride(2) != 1 or out.device != query.device:
        raise ValueError("out must match the query's shape, dtype and device, contiguous in head_dim")
    return out


def softmax_scale(scale, head_dim):
    return 1.0 / math.sqrt(head_dim) if scale is None else float(scale)


def from_cache(x: torch.Tensor, dtype: torch.dtype, scale: float) -> torch.Tensor:
    """Cache contents as `dtype` values (torch): fp8 multiplied by its scale, others a plain cast."""
    if x.dtype == FP8:
        return (x.to(torch.float32) * scale).to(dtype)
    return x.to(dtype)


# ----------------------------------------------------------------------------------------------
# Triton tile helpers


@jit
def load_rows(ptr, tok, head, row_valid, stride_t, stride_h, offs_d, d_mask):
    """Load a [rows, BLOCK_D] tile of a [tokens, heads, head_dim] tensor (invalid rows read 0)."""
    offs = tok.to(tl.int64)[:, None] * stride_t + head[:, None] * stride_h + offs_d[None, :]
    return tl.load(ptr + offs, mask=row_valid[:, None] & d_mask[None, :], other=0.0)


@jit
def store_rows(ptr, val, tok, head, row_valid, stride_t, stride_h, offs_d, d_mask):
    """Store a [rows, BLOCK_D] tile into a [tokens, heads, head_dim] tensor (valid rows only)."""
    offs = tok.to(tl.int64)[:, None] * stride_t + head[:, None] * stride_h + offs_d[None, :]
    tl.store(ptr + offs, val.to(ptr.dtype.element_ty), mask=row_valid[:, None] & d_mask[None, :])


@jit
def attend_kv_range(
    q, q_pos, acc, m_i, l_i,
    k_cache_ptr, v_cache_ptr, block_table_ptr, kv_head, block_size,
    stride_cb, stride_co, stride_ch,
    kv_start, kv_end, qk_scale, offs_d, d_mask,
    BLOCK_N: tl.constexpr, DOT: tl.constexpr,
):
    """Online-softmax attention of the rows in `q` over context positions [kv_start, kv_end).

    Row r sees positions <= q_pos[r] (q_pos = -1 masks a row out).  `acc` [rows, BLOCK_D] holds the
    unnormalised output, `m_i` the running max (base-2 logits) and `l_i` the running sum.
    """
    for start_n in range(kv_start, kv_end, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        n_mask = offs_n < kv_end
        block = tl.load(block_table_ptr + offs_n // block_size, mask=n_mask, other=0)
        slot_off = block.to(tl.int64) * stride_cb + (offs_n % block_size) * stride_co + kv_head * stride_ch
        kv_offs = slot_off[:, None] + offs_d[None, :]
        kv_mask = n_mask[:, None] & d_mask[None, :]
        k = tl.load(k_cache_ptr + kv_offs, mask=kv_mask, other=0.0).to(q.dtype)
        s = mma(q, tl.trans(k), DOT) * qk_scale
        visible = (offs_n[None, :] <= q_pos[:, None]) & n_mask[None, :]
        s = tl.where(visible, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # rows that saw nothing yet
        p = tl.exp2(s - m_safe[:, None])
        alpha = tl.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_cache_ptr + kv_offs, mask=kv_mask, other=0.0).to(q.dtype)
        acc = acc * alpha[:, None] + mma(p.to(v.dtype), v, DOT)
        m_i = m_new
    return acc, m_i, l_i


# ----------------------------------------------------------------------------------------------
# Torch reference helpers


def gather_context(key_cache, value_cache, block_tables, seq_lens, max_len):
    """Gather each sequence's keys/values into `[num_seqs, max_len, num_kv_heads, head_dim]`.

    Returns (keys, values, valid) with `valid[s, l] = l < seq_lens[s]`; positions past a sequence's
    length come out as zeros (padded block-table entries and stale cache slots, possibly NaN, are
    never used).
    """
    block_size = key_cache.shape[1]
    pos = torch.arange(max_len, device=seq_lens.device)
    valid = pos[None, :] < seq_lens[:, None].long()
    col = (pos // block_size).clamp(max=block_tables.shape[1] - 1)
    blocks = torch.where(valid, block_tables[:, col].long(), 0)
    slots = blocks * block_size + pos % block_size
    flat_k = key_cache.reshape(-1, *key_cache.shape[2:])
    flat_v = value_cache.reshape(-1, *value_cache.shape[2:])
    keep = valid[:, :, None, None]
    zero = torch.zeros((), dtype=key_cache.dtype, device=key_cache.device)
    return flat_k[slots].where(keep, zero), flat_v[slots].where(keep, zero), valid


def attend_dense(q, k, v, visible, scale, k_scale=1.0, v_scale=1.0):
    """Softmax attention with GQA through `scaled_dot_product_attention` (the engine's CPU path).

    q: [S, Q, H, D]; k, v: [S, L, Hkv, D]; visible: bool [S, Q, L]. Returns float32 [S, Q, H, D];
    rows that see nothing come out as 0. Math runs in the inputs' dtype with SDPA's float32
    softmax accumulation, which is what makes this reference fast enough to serve on a CPU.
    """
    k, v = from_cache(k, q.dtype, k_scale), from_cache(v, q.dtype, v_scale)
    out = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
        attn_mask=visible[:, None], scale=scale, enable_gqa=True,
    )
    return out.transpose(1, 2).float().nan_to_num(0.0)
