"""Speculative decoding (n-gram prompt lookup) on the real model: exactly the target's output.

Greedy: the tokens with speculation on equal those with it off, one prompt at a time and as 16
concurrent requests under a KV budget small enough to preempt; every block is free afterwards.
Sampled: seeded requests give the same tokens with speculation as without, seed by seed (n-gram
proposals have probability 1, so exact rejection sampling accepts exactly when the target's own
sample equals the proposal). Several tokens per step keep min_tokens and top-5 logprobs exact; a
rejection gives its blocks back in the step; grammar and penalty requests are not speculated.
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


def test_greedy_tokens_equal_without_speculation_one_at_a_time(spec_llm, greedy_equality):
    counters = spec_llm.engine.speculator.counters
    before = counters.accepted_tokens
    greedy_equality.one_at_a_time(spec_llm)
    assert counters.accepted_tokens > before, "speculation must have run and been accepted"


def test_greedy_tokens_equal_concurrently_with_preemption(spec_llm, greedy_equality):
    greedy_equality.concurrently_with_preemption(spec_llm)
    eng = spec_llm.engine
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


MIN_TOKENS_PROMPTS = ["Question: what is 17 times 23?\nAnswer:",  # greedy: EOS after 23 tokens
                      "Paris is the capital of France. Berlin is the capital of"]  # EOS after 26


def test_logprobs_and_min_tokens_with_several_tokens_per_step(spec_llm, engine_llm):
    """Both prompts answer, end with EOS, and repeat their answer when EOS is held back: long
    accepted runs in which the EOS mask of min_tokens moves (each verified position is its own
    output index) and each accepted token needs its own logprobs. With top-5 logprobs and
    min_tokens 0, 24, 31 and 40 the tokens, the finish reasons and the logprobs (top-5 ids in
    order, values within 1e-4) equal those without speculation; no EOS comes before min_tokens,
    and min_tokens changed some output (it can fail)."""
    eos = set(engine_llm.tokenizer.eos_token_ids)
    cases = [(engine_llm.tokenizer.encode(p), m) for p in MIN_TOKENS_PROMPTS for m in (0, 24, 31, 40)]
    params = [SamplingParams(max_tokens=48, min_tokens=m, temperature=0.0, logprobs=5) for _, m in cases]
    counters = spec_llm.engine.speculator.counters
    before = counters.accepted_tokens
    got = spec_llm.generate([ids for ids, _ in cases], params)
    assert counters.accepted_tokens > before, "speculation must have accepted several tokens per step"
    want = engine_llm.generate([ids for ids, _ in cases], params)
    for (_, m), g, w in zip(cases, got, want):
        assert (g.token_ids, g.finish_reason) == (w.token_ids, w.finish_reason)
        assert len(g.logprobs) == len(g.token_ids)
        for a, b in zip(g.logprobs, w.logprobs):
            assert a.token_id == b.token_id and [t for t, _ in a.top] == [t for t, _ in b.top]
            assert a.logprob == pytest.approx(b.logprob, abs=1e-4)
            assert [lp for _, lp in a.top] == pytest.approx([lp for _, lp in b.top], abs=1e-4)
        assert len(g.token_ids) >= m and not eos & set(g.token_ids[:m])
    lengths = [len(g.token_ids) for g in got]  # min_tokens 40 is past both natural ends
    assert lengths[3] > lengths[0] and lengths[7] > lengths[4], "min_tokens must have held EOS back"


def test_rejected_tokens_give_their_blocks_back_in_the_step(spec_llm, prompt_ids, greedy, monkeypatch):
    """Every verify step ends with each verified request holding exactly the blocks of its
    computed tokens (ceil(computed / block size)), the blocks that held only rejected proposals
    back in the pool at once, not when the request finishes. Some step must have shrunk a table
    (a rejection that crossed a block boundary), so the check cannot pass vacuously."""
    eng = spec_llm.engine
    blocks, commit = eng.blocks, eng.scheduler.commit
    shrunk = []

    def checked_commit(out, rejected=None):
        verified = [c.request for c in out.chunks if c.num_spec]
        held = {r.request_id: len(blocks.tables[r.request_id]) for r in verified}
        free = blocks.pool.num_free
        commit(out, rejected)
        for r in verified:
            table = blocks.tables[r.request_id]
            assert len(table) == blocks.blocks_for(r.num_computed_tokens), (r.request_id, len(table))
            shrunk.append(held[r.request_id] - len(table))
        assert blocks.pool.num_free == free + sum(shrunk[len(shrunk) - len(verified):])

    monkeypatch.setattr(eng.scheduler, "commit", checked_commit)
    spec_llm.generate(prompt_ids, greedy(64))
    assert max(shrunk, default=0) > 0, "no rejection released a block: the check did not run"


def test_grammar_and_penalty_requests_are_not_speculated(spec_llm, engine_llm, prompt_ids):
    """A grammar's state and the penalties' token counts advance one token at a time, so these
    requests are never given proposals (speculator._num_tokens): on the repetitive prompt, where
    n-gram lookup proposes at nearly every step, no draft is counted and the tokens equal those
    without speculation."""
    from llmop.engine.grammar.spec import GrammarSpec

    params = [SamplingParams(max_tokens=24, temperature=0.0, grammar=GrammarSpec.regex(r"( [a-z]+)+")),
              SamplingParams(max_tokens=24, temperature=0.0, repetition_penalty=1.3),
              SamplingParams(max_tokens=24, temperature=0.0, frequency_penalty=0.5)]
    counters = spec_llm.engine.speculator.counters
    before = counters.drafts
    for p in params:  # one at a time: each must go unspeculated on its own
        got = spec_llm.generate([prompt_ids[-1]], p)[0]
        assert got.token_ids == engine_llm.generate([prompt_ids[-1]], p)[0].token_ids
    assert counters.drafts == before, "a grammar or penalty request was speculated"
    # The positive control: the same prompt, plain greedy, is speculated (so "no draft" above means
    # the requests were excluded, not that the prompt gives n-gram lookup nothing to propose).
    spec_llm.generate([prompt_ids[-1]], SamplingParams(max_tokens=24, temperature=0.0))
    assert counters.drafts > before
