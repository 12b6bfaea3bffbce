"""The CPU attention backend: plain PyTorch over the paged cache.

Decode rows (one query token each) are gathered into one padded batch and attended in a single
call; prefill chunks go one sequence at a time through scaled_dot_product_attention with a causal
mask offset by the tokens already in the cache.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from llmop.engine.attention import AttentionMetadata


def write_kv(key, value, kv_cache, slot_mapping) -> None:
    """Scatter the new tokens' k/v into their slots."""
    k_cache, v_cache = kv_cache
    nb, bs, h, d = k_cache.shape
    k_cache.view(nb * bs, h, d).index_copy_(0, slot_mapping, key.to(k_cache.dtype))
    v_cache.view(nb * bs, h, d).index_copy_(0, slot_mapping, value.to(v_cache.dtype))


def gather_context(cache: torch.Tensor, block_table: torch.Tensor, length: int) -> torch.Tensor:
    """The first `length` cached tokens of one sequence: [length, kv_heads, head_dim]."""
    bs = cache.shape[1]
    blocks = block_table[: (length + bs - 1) // bs]
    return cache[blocks].flatten(0, 1)[:length]


class TorchAttentionBackend:
    def forward(self, query, key, value, kv_cache, meta: AttentionMetadata, scale: float):
        write_kv(key, value, kv_cache, meta.slot_mapping)
        k_cache, v_cache = kv_cache
        out = torch.empty_like(query)
        decode_rows = [i for i, q in enumerate(meta.query_lens_list) if q == 1]
        if len(decode_rows) > 1:
            self._decode_batch(query, k_cache, v_cache, meta, decode_rows, scale, out)
            done = set(decode_rows)
        else:
            done = set()
        starts = meta.query_start_loc.tolist()
        for i, (q_len, s_len) in enumerate(zip(meta.query_lens_list, meta.seq_lens_list)):
            if i in done:
                continue
            q = query[starts[i] : starts[i] + q_len]
            k = gather_context(k_cache, meta.block_tables[i], s_len)
            v = gather_context(v_cache, meta.block_tables[i], s_len)
            mask = None
            if q_len > 1:
                # Query j (absolute position s_len - q_len + j) sees keys 0..s_len - q_len + j.
                qpos = torch.arange(s_len - q_len, s_len).unsqueeze(1)
                mask = torch.arange(s_len).unsqueeze(0) <= qpos
            o = F.scaled_dot_product_attention(
                q.transpose(0, 1).unsqueeze(0),
                k.transpose(0, 1).unsqueeze(0).to(q.dtype),
                v.transpose(0, 1).unsqueeze(0).to(q.dtype),
                attn_mask=mask,
                scale=scale,
                enable_gqa=True,
            )
            out[starts[i] : starts[i] + q_len] = o[0].transpose(0, 1)
        return out

    def _decode_batch(self, query, k_cache, v_cache, meta, rows, scale, out) -> None:
        """All single-token rows at once: gather each row's context into a padded [B, L] batch."""
        bs = k_cache.shape[1]
        lens = torch.tensor([meta.seq_lens_list[i] for i in rows])
        max_len = int(lens.max())
        nblocks = (max_len + bs - 1) // bs
        idx = torch.tensor(rows)
        tables = meta.block_tables[idx, :nblocks].long()  # [B, nblocks]
        k = k_cache[tables].flatten(1, 2)[:, :max_len]  # [B, L, kvh, d]
        v = v_cache[tables].flatten(1, 2)[:, :max_len]
        token_index = meta.query_start_loc[idx].long()
        q = query[token_index]  # [B, heads, d]
        mask = (torch.arange(max_len).unsqueeze(0) < lens.unsqueeze(1))[:, None, None, :]
        o = F.scaled_dot_product_attention(
            q.unsqueeze(2),  # [B, heads, 1, d]
            k.transpose(1, 2).to(q.dtype),
            v.transpose(1, 2).to(q.dtype),
            attn_mask=mask,
            scale=scale,
            enable_gqa=True,
        )
        out[token_index] = o.squeeze(2)
