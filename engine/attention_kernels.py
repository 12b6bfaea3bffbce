"""The attention backend over `llmop.kernels`: Triton kernels on the GPU, their torch references
on the CPU — one code path, two implementations of each op chosen by name.

New keys/values go into the cache by slot (`reshape_and_cache`); a batch of decode rows only uses
the decode op (split-KV on the GPU), anything else (prefill chunks, mixed batches) the varlen
prefill op, which treats decode rows as one-token queries. Under `TRITON_INTERPRET=1` the Triton
kernels run in the interpreter, which is how the CPU tests exercise that path. An fp8 cache is read
with per-tensor scales `k_scale`/`v_scale` (1.0: no calibrated scales yet).
"""

from __future__ import annotations

import dataclasses

from llmop.engine.attention import AttentionMetadata
from llmop.kernels.registry import get_attention_ops


class KernelAttentionBackend:
    def __init__(self, name: str, k_scale: float = 1.0, v_scale: float = 1.0) -> None:
        self.ops = get_attention_ops(name)
        self.k_scale, self.v_scale = k_scale, v_scale

    def _decode_only(self, meta: AttentionMetadata, num_tokens: int) -> bool:
        return meta.is_pure_decode and num_tokens == meta.num_seqs

    def prepare(self, meta: AttentionMetadata, key_cache) -> AttentionMetadata:
        qsl = None if self._decode_only(meta, int(meta.slot_mapping.shape[0])) else meta.query_start_loc
        return dataclasses.replace(meta, plan=self.ops.plan(key_cache, meta.block_tables, meta.seq_lens, qsl))

    def forward(self, query, key, value, kv_cache, meta: AttentionMetadata, scale: float):
        k_cache, v_cache = kv_cache
        ks, vs = self.k_scale, self.v_scale
        self.ops.reshape_and_cache(key, value, k_cache, v_cache, meta.slot_mapping, ks, vs)
        if self._decode_only(meta, query.shape[0]):
            return self.ops.decode(query, k_cache, v_cache, meta.block_tables, meta.seq_lens, scale,
                                   max_seq_len=meta.max_seq_len, plan=meta.plan, k_scale=ks, v_scale=vs)
        return self.ops.prefill(query, k_cache, v_cache, meta.block_tables, meta.seq_lens, meta.query_start_loc,
                                scale, plan=meta.plan, k_scale=ks, v_scale=vs)
