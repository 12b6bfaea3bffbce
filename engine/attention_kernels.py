"""The attention backend over `llmop.kernels`: Triton kernels on the GPU, their torch references
on the CPU — one code path, two implementations of each op chosen by name.

New keys/values go into the cache by slot (`reshape_and_cache`); a batch of decode rows only uses
the decode op (split-KV on the GPU), anything else (prefill chunks, mixed batches) the varlen
prefill op, which treats decode rows as one-token queries. Under `TRITON_INTERPRET=1` the Triton
kernels run in the interpreter, which is how the CPU tests exercise that path.
"""

from __future__ import annotations

from llmop.engine.attention import AttentionMetadata
from llmop.kernels.registry import get_attention_ops


class KernelAttentionBackend:
    def __init__(self, name: str) -> None:
        self.ops = get_attention_ops(name)

    def forward(self, query, key, value, kv_cache, meta: AttentionMetadata, scale: float):
        k_cache, v_cache = kv_cache
        self.ops.reshape_and_cache(key, value, k_cache, v_cache, meta.slot_mapping)
        if meta.is_pure_decode and query.shape[0] == meta.num_seqs:
            return self.ops.decode(query, k_cache, v_cache, meta.block_tables, meta.seq_lens, scale,
                                   max_seq_len=meta.max_seq_len)
        return self.ops.prefill(query, k_cache, v_cache, meta.block_tables, meta.seq_lens, meta.query_start_loc, scale)
