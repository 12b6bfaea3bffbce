"""Speculative decoding (n-gram prompt lookup) on the real model: exactly the target's output.

Greedy: the tokens with speculation on equal those with it off, one prompt at a time and as 16
concurrent requests under a KV budget small enough to preempt; every block is free afterwards.
Sampled: rejection sampling keeps each position's distribution; checked on the sampler with a
chi-square test (20000 draws, 7 degrees of freedom, critical value 24.32 at p = 0.001), and through
the engine on the first speculated positions of seeded requests.
"""

import pytest
import torch

from llmop.engine.ngram_proposer import propose_ngram
from llmop.engine.sampler import SampleRow, sample
from llmop.engine.sampling_params import SamplingParams

CHI2_CRITICAL_DF7_P001 = 24.32


def greedy(n):
    return SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True)


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


@pytest.fixture(scope="module")
def reference_tokens(engine_llm, prompt_ids, new_tokens):
    return [list(engine_llm.generate([ids], greedy(new_tokens))[0].token_ids) for ids in prompt_ids]


def test_greedy_tokens_equal_without_speculation_one_at_a_time(spec_llm, prompt_ids, reference_tokens, new_tokens):
    counters = spec_llm.engine.speculator.counters
    before = counters.accepted_tokens
    for ids, expected in zip(prompt_ids, reference_tokens):
        assert list(spec_llm.generate([ids], greedy(new_tokens))[0].token_ids) == expected
    assert counters.accepted_tokens > before, "speculation must have run and been accepted"


def test_greedy_tokens_equal_concurrently_with_preemption(spec_llm, prompt_ids, reference_tokens, new_tokens):
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


def _chi2(counts_a: torch.Tensor, counts_b: torch.Tensor) -> float:
    """Two-sample chi-square statistic over the categories either sample hit."""
    keep = (counts_a + counts_b) > 0
    a, b = counts_a[keep].double(), counts_b[keep].double()
    na, nb = a.sum(), b.sum()
    expected_a, expected_b = (a + b) * na / (na + nb), (a + b) * nb / (na + nb)
    return float(((a - expected_a) ** 2 / expected_a + (b - expected_b) ** 2 / expected_b).sum())


@pytest.mark.parametrize("draft", [0, 3, 7])
def test_rejection_sampling_keeps_the_distribution(draft):
    """8 tokens with unequal probabilities, top_p 1: drafts of a likely, a middling and an unlikely token."""
    p = torch.tensor([0.30, 0.22, 0.15, 0.11, 0.09, 0.06, 0.04, 0.03])
    draws = 20000
    params = SamplingParams(temperature=1.0)
    logits = p.log().repeat(draws, 1)
    plain = sample(logits.clone(), [SampleRow(params)] * draws, eos_ids=[], generator=torch.Generator().manual_seed(1))
    spec = sample(logits.clone(), [SampleRow(params, draft_token=draft)] * draws, eos_ids=[],
                  generator=torch.Generator().manual_seed(2))
    a = torch.bincount(torch.tensor(plain.token_ids), minlength=8)
    b = torch.bincount(torch.tensor(spec.token_ids), minlength=8)
    assert _chi2(a, b) < CHI2_CRITICAL_DF7_P001, (a.tolist(), b.tolist())
    assert abs(b[draft] / draws - p[draft]) < 0.02  # the draft is not over-accepted


def test_seeded_sampling_with_speculation_is_reproducible(spec_llm, prompt_ids):
    params = SamplingParams(max_tokens=24, temperature=0.8, seed=5, ignore_eos=True)
    first = spec_llm.generate([prompt_ids[-1]], params)[0].token_ids
    assert spec_llm.generate([prompt_ids[-1]], params)[0].token_ids == first
