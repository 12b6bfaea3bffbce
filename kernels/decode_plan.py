"""The torch decode path's per-step plan: which cache blocks each decode row reads, bucketed by length.

On a CPU the decode step is bound by copying each sequence's context out of the paged cache, so the
reference does that work once per step instead of once per layer, and copies as little as it can:

- rows are grouped into buckets of similar context length (the longest at most `GROWTH` × the
  shortest), so padding to the longest row wastes little;
- whole blocks are gathered (`index_select` of `[block_size, kv_heads, head_dim]` rows, not token
  slots), into workspaces allocated once per step and reused by every layer (fresh large
  allocations cost page faults that make a gather ~3× slower on this kind of machine);
- positions past a row's length are zeroed after the gather, so stale (even NaN) cache slots and
  the padding never reach the softmax or the value product.

Every layer of a step shares the block tables and lengths, so one plan serves them all; the
Triton kernels read the block table themselves and need no plan.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ._paged_attention import FP8, from_cache

GROWTH = 1.5


def length_buckets(lengths: list[int], growth: float = GROWTH) -> list[list[int]]:
    """Indices of `lengths` (> 0 only) grouped so each group's max is ≤ growth × its min, shortest
    group first, each sorted by length. Pure; the number of groups grows with log(max / min)."""
    order = sorted((i for i, n in enumerate(lengths) if n > 0), key=lambda i: lengths[i])
    groups: list[list[int]] = []
    for i in order:
        if groups and lengths[i] <= growth * lengths[groups[-1][0]]:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


@dataclass(frozen=True)
class DecodeBucket:
    """Decode rows of similar length and the workspaces their contexts are gathered into."""

    tokens: torch.Tensor  # [n] int64: their query rows
    blocks: torch.Tensor  # [n * nb] int64: block ids, row-major (padding: block 0, zeroed later)
    invalid: torch.Tensor  # [m] int64: flat positions in [n * nb * block_size] past each row's length
    visible: torch.Tensor  # [n, 1, 1, nb * block_size] bool: the SDPA mask
    key_buf: torch.Tensor  # [n, nb * block_size, kv_heads, head_dim]
    value_buf: torch.Tensor


@dataclass(frozen=True)
class DecodePlan:
    """Everything the torch decode needs that does not change between the layers of one step."""

    buckets: tuple[DecodeBucket, ...]
    empty_tokens: torch.Tensor  # [k] int64: query rows of sequences of length 0 (batch padding)
    cache_shape: tuple[int, ...]  # [num_blocks, block_size, kv_heads, head_dim] the plan was made for
    dtype: torch.dtype

    def gather(self, bucket: DecodeBucket, key_cache: torch.Tensor, value_cache: torch.Tensor):
        """Copy the bucket's contexts of one layer into its workspaces; returns (keys, values)
        as `[n, context, kv_heads, head_dim]` with every position past a row's length zero."""
        if tuple(key_cache.shape) != self.cache_shape or key_cache.dtype != self.dtype:
            raise ValueError("the decode plan was made for a cache of another shape or dtype")
        out = []
        for cache, buf in ((key_cache, bucket.key_buf), (value_cache, bucket.value_buf)):
            if cache.dtype == FP8:  # gathered and zeroed as bytes (0x00 is +0.0 in e4m3)
                cache, buf = cache.view(torch.uint8), buf.view(torch.uint8)
            flat = buf.view(-1, *cache.shape[1:])
            torch.index_select(cache, 0, bucket.blocks, out=flat)
            if bucket.invalid.numel():
                buf.view(-1, *cache.shape[2:]).index_fill_(0, bucket.invalid, 0)
            out.append(buf.view(self.dtype))
        return out[0], out[1]

    def attend(self, query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
               scale: float, out: torch.Tensor, k_scale: float = 1.0, v_scale: float = 1.0) -> torch.Tensor:
        """Write decode attention of the planned rows of `query` into the same rows of `out`
        (rows of empty sequences get zeros), one SDPA per bucket (GQA without repeating K/V).
        A cache in another dtype than the query is converted (fp8 with its scales) after the gather."""
        for b in self.buckets:
            keys, values = self.gather(b, key_cache, value_cache)
            if keys.dtype != query.dtype:
                keys, values = from_cache(keys, query.dtype, k_scale), from_cache(values, query.dtype, v_scale)
            o = torch.nn.functional.scaled_dot_product_attention(
                query[b.tokens][:, :, None], keys.transpose(1, 2), values.transpose(1, 2),
                attn_mask=b.visible, scale=scale, enable_gqa=True,
            )
            out.index_copy_(0, b.tokens, o[:, :, 0].to(out.dtype))
        if self.empty_tokens.numel():
            out.index_fill_(0, self.empty_tokens, 0)
        return out


def no_plan(key_cache, block_tables, seq_lens, query_start_loc=None) -> None:
    """The Triton kernels read the block table themselves: nothing to plan."""
    return None


def plan_decode(key_cache: torch.Tensor, block_tables: torch.Tensor, seq_lens: torch.Tensor,
                query_start_loc: torch.Tensor | None = None) -> DecodePlan:
    """The plan for the sequences with exactly one query token (all of them without
    `query_start_loc`). Reads the lengths on the host (a sync on CUDA: this is the torch path)."""
    _, block_size, kv_heads, head_dim = key_cache.shape
    device = key_cache.device
    lens = seq_lens.tolist()
    if query_start_loc is None:
        tokens = list(range(len(lens)))
    else:
        starts = query_start_loc.tolist()
        tokens = [a if b - a == 1 else -1 for a, b in zip(starts[:-1], starts[1:])]
    decode_lens = [n if t >= 0 else 0 for n, t in zip(lens, tokens)]
    tables = block_tables.long()
    buckets = []
    for group in length_buckets(decode_lens):
        n = len(group)
        nb = -(-decode_lens[group[-1]] // block_size)
        seqs = torch.tensor(group, device=device)
        row_lens = torch.tensor([decode_lens[i] for i in group], device=device)
        ctx = nb * block_size
        pos = torch.arange(ctx, device=device)
        visible = pos[None, :] < row_lens[:, None]
        cols = min(nb, tables.shape[1])
        blocks = torch.zeros(n, nb, dtype=torch.long, device=device)
        blocks[:, :cols] = tables[seqs, :cols]
        blocks = torch.where(visible.view(n, nb, block_size)[:, :, 0], blocks, 0)
        buckets.append(DecodeBucket(
            tokens=torch.tensor([tokens[i] for i in group], device=device),
            blocks=blocks.reshape(-1),
            invalid=(~visible).reshape(-1).nonzero().reshape(-1),
            visible=visible[:, None, None, :],
            key_buf=torch.empty(n, ctx, kv_heads, head_dim, dtype=key_cache.dtype, device=device),
            value_buf=torch.empty(n, ctx, kv_heads, head_dim, dtype=key_cache.dtype, device=device),
        ))  # fmt: skip
    empty = torch.tensor([t for t, n in zip(tokens, lens) if t >= 0 and n == 0], dtype=torch.long, device=device)
    return DecodePlan(tuple(buckets), empty, tuple(key_cache.shape), key_cache.dtype)
