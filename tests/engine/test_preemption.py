"""Preemption by recompute: a KV cache too small for the batch changes no token, leaks no block."""

from llmop.engine.llm import LLM
from llmop.engine.sampling_params import SamplingParams

BLOCK_BYTES_FP32 = 2 * 30 * 3 * 64 * 4 * 16  # SmolLM2: layers x KV heads x head dim x (K,V), 16 tokens


def test_tiny_cache_preempts_and_matches_ample_cache(engine_llm):
    tok = engine_llm.tokenizer
    prompts = [tok.encode(t) for t in (
        "The three laws of robotics are", "A recipe for pancakes:", "In 1969, astronauts",
        "The difference between TCP and UDP is", "My grandmother's garden had", "Prime numbers are",
    )]
    params = [SamplingParams(max_tokens=40 + 4 * i, temperature=0.0, ignore_eos=True) for i in range(len(prompts))]
    small = LLM(None, dtype="float32", kv_cache_memory_bytes=12 * BLOCK_BYTES_FP32, max_num_seqs=6)
    assert small.engine.kv_spec.num_blocks == 12  # 192 tokens for ~400 the batch needs at its peak
    got = small.generate(prompts, params)
    assert small.engine.scheduler.num_preemptions > 0
    ample = engine_llm.generate(prompts, params)
    assert [o.token_ids for o in got] == [o.token_ids for o in ample]
    pool = small.engine.blocks.pool
    assert pool.num_free == pool.num_blocks and not any(pool.ref_counts)
