"""Speculative decoding (n-gram prompt lookup) on the real model: exactly the target's output.

Greedy: the tokens with speculation on equal those with it off, one prompt at a time and as 16
concurrent requests under a KV budget small enough to preempt; every block is free afterwards.
Sampled: seeded requests give the same tokens with speculation as without, seed by seed (n-gram
proposals have probability 1, so exact rejection sampling accepts exactly when the target's own
sample equals the proposal).
"""

import pytest

from llmop.engine.ngram_proposer import propose_ngram
from llmop.engine.sampling_params import SamplingParams


def test_ngram_lookup_proposes_what_followed_the_latest_match():
    assert propose_ngram([1, 2, 3, 4, 5, 1, 2, 3], 3, 2, 4) == [4, 5, 1]
    assert propose_ngram([9, 1, 2, 7, 1, 2, 8, 1, 2], 2, 2, 2) == [8, 1]  # the most recent occurrence
    assert propose_ngram([5, 6, 7, 8], 4, 2, 4) == []  # no suffix recurs
    assert propose_ngram([1, 2, 3, 1, 2], 4, 3, 4) == []  # the recurring suffix is shorter than n_min


@pytest.fixture(scope="module")
def spec_llm():
    from llmop.engine.llm import LLM

    per_block = 2 * 30 * 3 * 64 * 4 * 16  # fp32 K and V of 16 tokens
    return LLM(None, dtype="float32", kv_cache_memory_bytes=48 * per_block, max_num_seqs=16,
               max_num_batched_tokens=512, speculative={"method": "ngram", "num_tokens": 4, "max_batch_size": 16})


def test_greedy_tokens_equal_without_speculation_one_at_a_time(spec_llm, prompt_ids, reference_tokens, new_tokens,
                                                                greedy):
    counters = spec_llm.engine.speculator.counters
    before = counters.accepted_tokens
    for ids, expected in zip(prompt_ids, reference_tokens):
        assert list(spec_llm.generate([ids], greedy(new_tokens))[0].token_ids) == expected
    assert counters.accepted_tokens > before, "speculation must have run and been accepted"


def test_greedy_tokens_equal_concurrently_with_preemption(spec_llm, prompt_ids, reference_tokens, new_tokens, greedy):
    eng = spec_llm.engine
    before = (eng.stats().num_preemptions, eng.speculator.counters.drafts)
    outs = spec_llm.generate(prompt_ids * 2, greedy(new_tokens))
    assert [list(o.token_ids) for o in outs] == reference_tokens * 2
    assert eng.stats().num_preemptions > before[0], "the small KV budget must force preemption"
    assert eng.speculator.counters.drafts > before[1]
    assert eng.blocks.pool.num_free == eng.blocks.pool.num_blocks, "rejected proposals leaked blocks"


def test_stop_strings_and_max_tokens_cut_inside_an_accepted_run(spec_llm, engine_llm, prompt_ids):
    ids = prompt_ids[-1]  # the repetitive prompt: long accepted runs
    for params in (SamplingParams(max_tokens=7, temperature=0.0, ignore_eos=True),
                   SamplingParams(max_tokens=60, temperature=0.0, stop=["stars"], ignore_eos=True)):
        got, want = spec_llm.generate([ids], params)[0], engine_llm.generate([ids], params)[0]
        assert (got.token_ids, got.text, got.finish_reason) == (want.token_ids, want.text, want.finish_reason)


def test_sampled_outputs_equal_without_speculation_seed_by_seed(spec_llm, engine_llm, prompt_ids):
    """An n-gram proposal has probability 1, so exact rejection sampling is "accept when the target's
    own sample equals it": with the same seeded generator per output index, speculation changes no
    token of a sampled request, whatever else runs (a stronger check than comparing distributions)."""
    counters = spec_llm.engine.speculator.counters
    before = counters.accepted_tokens
    prompts = [prompt_ids[-1], prompt_ids[2]]
    params = [SamplingParams(max_tokens=32, temperature=t, top_p=0.95, seed=s, ignore_eos=True)
              for s in range(4) for t in (0.6, 1.0)]
    for ids in prompts:
        with_spec = spec_llm.generate([ids] * len(params), params)
        without = engine_llm.generate([ids] * len(params), params)
        assert [o.token_ids for o in with_spec] == [o.token_ids for o in without]
    assert counters.accepted_tokens > before, "speculation must have run on the sampled requests"


@pytest.mark.parametrize("num_blocks,expected_spec", [(5, 0), (6, 4)])
def test_proposals_only_take_blocks_nobody_else_needs(num_blocks, expected_spec):
    """Blocks of 4 tokens. After the prefills, `a` (7 computed, 1 to decode) has 4 proposals that
    need a new block; `b` (8 computed) needs a new block for its decode. With one free block `b`
    gets it and `a` decodes without proposals (before, `a`'s proposals took it and `b` was
    preempted); with two, both get theirs."""
    from llmop.engine.block_manager import BlockManager
    from llmop.engine.request import Request
    from llmop.engine.scheduler import Scheduler, SchedulerConfig

    blocks = BlockManager(num_blocks, 4, enable_caching=False)
    sched = Scheduler(SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=64, max_model_len=64), blocks)
    a = Request("a", list(range(7)), SamplingParams(max_tokens=8))
    b = Request("b", list(range(8)), SamplingParams(max_tokens=8))
    for r in (a, b):
        sched.add(r)
    sched.commit(sched.schedule())
    for r in (a, b):
        r.output_token_ids.append(1)
    a.spec_token_ids = [2, 3, 4, 5]
    out = sched.schedule()
    assert not out.preempted
    spec = {c.request.request_id: c.num_spec for c in out.chunks}
    assert spec == {"a": expected_spec, "b": 0}
