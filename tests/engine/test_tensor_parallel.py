"""Tensor parallelism on the real model: TP=3 (three worker processes over gloo, 3 of the 9
attention heads and 1 of the 3 KV heads each) computes what TP=1 computes.

Greedy tokens must be identical; logits agree to LOGIT_ATOL in fp32 (the all-reduce sums three
partial products in another order than one matmul). The TP=3 engine has a small KV budget, so the
concurrent run preempts; the GGUF path is used here (each rank dequantizes and slices its tensors),
the safetensors path by the LoRA test (tests/lora/test_tp_lora.py).
"""

import pytest
import torch

from llmop.engine.sampling_params import SamplingParams

LOGIT_ATOL = 1e-3
TP3_KV_BLOCKS = 48  # per rank, 16 tokens each: 16 concurrent requests do not fit, so some are preempted


def greedy(n):
    return SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True)


@pytest.fixture(scope="module")
def tp3_llm():
    from llmop.engine.llm import LLM

    kv_bytes_per_block = 2 * 30 * 1 * 64 * 4 * 16  # layers x 1 KV head per rank x head_dim x fp32 x block
    llm = LLM(None, dtype="float32", tensor_parallel_size=3, kv_cache_memory_bytes=TP3_KV_BLOCKS * kv_bytes_per_block,
              max_num_seqs=16, max_num_batched_tokens=512)
    yield llm
    llm.engine.shutdown()


@pytest.fixture(scope="module")
def tp1_tokens(engine_llm, prompt_ids, new_tokens):
    """TP=1 greedy continuations, one prompt at a time."""
    return [list(engine_llm.generate([ids], greedy(new_tokens))[0].token_ids) for ids in prompt_ids]


def test_each_rank_holds_its_share(tp3_llm, engine_llm):
    ranks = tp3_llm.engine.executor.describe()
    assert [r.rank for r in ranks] == [0, 1, 2]
    assert len({r.pid for r in ranks}) == 3
    assert all((r.num_heads, r.num_kv_heads, r.num_blocks) == (3, 1, TP3_KV_BLOCKS) for r in ranks)
    full = engine_llm.engine.executor.describe()[0]
    # Sharded projections are split three ways; embedding (tied head) and norms are replicated.
    assert all(r.weight_bytes < 0.6 * full.weight_bytes for r in ranks)
    assert all(r.kv_bytes * 3 == pytest.approx(full.kv_bytes / full.num_blocks * TP3_KV_BLOCKS) for r in ranks)


def test_tp3_greedy_tokens_equal_tp1_one_at_a_time(tp3_llm, prompt_ids, tp1_tokens, new_tokens):
    assert len(prompt_ids) >= 8
    for ids, expected in zip(prompt_ids, tp1_tokens):
        assert list(tp3_llm.generate([ids], greedy(new_tokens))[0].token_ids) == expected


def test_tp3_sixteen_concurrent_requests_with_preemption(tp3_llm, prompt_ids, tp1_tokens, new_tokens):
    eng = tp3_llm.engine
    before = eng.stats().num_preemptions
    outs = tp3_llm.generate(prompt_ids * 2, greedy(new_tokens))
    assert eng.stats().num_preemptions > before, "the small KV budget must force preemption"
    assert [list(o.token_ids) for o in outs] == tp1_tokens * 2
    assert eng.blocks.pool.num_free == eng.blocks.pool.num_blocks


def test_tp3_prefill_logits_match_tp1(tp3_llm, engine_llm, prompt_ids):
    def logits(llm, ids):
        eng = llm.engine
        eng.add_request("tp-logits", ids, greedy(1))
        out = eng.scheduler.schedule()
        got = eng.executor.logits(eng.build_batch(out, all_logits=True))
        eng.abort("tp-logits")
        return got

    for ids in prompt_ids[:4]:
        torch.testing.assert_close(logits(tp3_llm, ids), logits(engine_llm, ids), atol=LOGIT_ATOL, rtol=0)


def test_seeded_sampling_is_the_same_at_tp3(tp3_llm, engine_llm, prompt_ids):
    params = SamplingParams(max_tokens=16, temperature=1.0, top_p=0.9, seed=11, ignore_eos=True)
    assert tp3_llm.generate([prompt_ids[0]], params)[0].token_ids == engine_llm.generate([prompt_ids[0]], params)[0].token_ids


def test_a_size_that_cannot_split_the_heads_is_refused_before_any_worker_starts():
    from llmop.engine.engine import LLMEngine

    # 9 would split the heads (replicating KV heads) but not the MLP width of 1536.
    with pytest.raises(ValueError, match=r"tensor_parallel_size 2 cannot split this model \(9 attention heads, "
                                         r"3 KV heads.*valid sizes: \[1, 3\]"):
        LLMEngine(tensor_parallel_size=2)


def test_one_worker_process_at_tp1_gives_the_same_tokens(engine_llm, prompt_ids, tp1_tokens, new_tokens):
    from llmop.engine.llm import LLM

    llm = LLM(None, dtype="float32", worker_processes=True, kv_cache_memory_bytes=64 << 20)
    try:
        info = llm.engine.executor.describe()
        assert len(info) == 1 and info[0].pid != __import__("os").getpid()
        outs = llm.generate(prompt_ids[:3], greedy(new_tokens))
        assert [list(o.token_ids) for o in outs] == tp1_tokens[:3]
    finally:
        llm.engine.shutdown()
    assert llm.engine.failure is None


def test_grammar_rows_at_tp3_give_the_tp1_json(tp3_llm, engine_llm):
    """The grammar's token bitmask travels in the ForwardBatch to rank 0, which samples."""
    import json

    from llmop.engine.grammar.spec import GrammarSpec

    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                               "age": {"type": "integer", "minimum": 0, "maximum": 120}},
              "required": ["name", "age"], "additionalProperties": False}
    params = SamplingParams(max_tokens=60, temperature=0.0, grammar=GrammarSpec.json_schema(schema))
    prompts = ["Describe a person as JSON:", "A JSON record of a sailor:"]
    got = [o.text for o in tp3_llm.generate(prompts, params)]
    assert got == [o.text for o in engine_llm.generate(prompts, params)]
    assert all(set(json.loads(t)) == {"name", "age"} for t in got)
