"""Speculative decoding with a draft model, on the real model: exactly the target's output.

Two drafts: the embedded model itself (it proposes what the target will say: acceptance near 100%)
and a truncated copy keeping its first 4 layers (written as a HF checkpoint by a fixture; it
disagrees often, so rejections and the residual draw are exercised). Greedy: the tokens equal
those without speculation for every prompt, one at a time and 16 at once under a KV budget small
enough to preempt, and every block of both pools (the target's and the draft's) is free after.
Sampled: the per-position token distribution with speculation equals the target's (chi-square);
and the rejection sampler alone, on hand-made distributions, draws from p_target.
"""

import json
import shutil

import pytest
import torch

from llmop.engine.rejection_sampler import accept_or_resample
from llmop.engine.sampling_params import SamplingParams

DRAFT_LAYERS = 4
P_VALUE_FLOOR = 1e-3  # a chi-square p-value below this fails a distribution test


def chi_square_p_value(stat: float, dof: int) -> float:
    """P(X >= stat) for X ~ chi-square(dof): the regularized upper incomplete gamma Q(dof/2, stat/2)."""
    return float(torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64),
                                         torch.tensor(stat / 2, dtype=torch.float64)))


def homogeneity_p_value(a: list[int], b: list[int], min_count: int = 10) -> float:
    """Two-sample chi-square test of homogeneity: the p-value of "a and b are draws from one
    distribution". Tokens seen fewer than `min_count` times in a and b together share one cell."""
    counts: dict[int, list[int]] = {}
    for i, sample in enumerate((a, b)):
        for t in sample:
            counts.setdefault(t, [0, 0])[i] += 1
    cells, other = [], [0, 0]
    for c in counts.values():
        if sum(c) >= min_count:
            cells.append(c)
        else:
            other = [other[0] + c[0], other[1] + c[1]]
    if sum(other):
        cells.append(other)
    if len(cells) < 2:
        return 1.0  # one cell: both samples are the same token throughout
    n = (len(a), len(b))
    total = sum(n)
    stat = sum((c[i] - n[i] * sum(c) / total) ** 2 / (n[i] * sum(c) / total) for c in cells for i in range(2))
    return chi_square_p_value(stat, len(cells) - 1)


def test_rejection_sampling_draws_from_the_target_distribution():
    """Hand-made p and q over 6 tokens (q puts mass where p has none, and lacks mass where p has
    some): the draft draws x ~ q, the verifier keeps x or resamples; over 20,000 draws the tokens
    must follow p (chi-square goodness of fit, p-value >= 1e-3), while the proposals themselves
    must not (the same test rejects q: it has the power to fail)."""
    p = torch.tensor([0.40, 0.25, 0.20, 0.10, 0.05, 0.00], dtype=torch.float32)
    q = torch.tensor([0.10, 0.40, 0.00, 0.10, 0.20, 0.20], dtype=torch.float32)
    n = 20_000
    gen = torch.Generator().manual_seed(1234)
    proposals = torch.multinomial(q, n, replacement=True, generator=gen).tolist()
    tokens = [accept_or_resample(p, q, x, gen) for x in proposals]

    def goodness_of_fit(sample: list[int]) -> float:
        observed = torch.bincount(torch.tensor(sample), minlength=len(p)).double()
        support = p > 0
        if bool((observed[~support] > 0).any()):
            return 0.0  # a token p never draws
        expected = n * p.double()[support]
        return chi_square_p_value(float(((observed[support] - expected) ** 2 / expected).sum()), int(support.sum()) - 1)

    assert goodness_of_fit(tokens) >= P_VALUE_FLOOR
    assert goodness_of_fit(proposals) < P_VALUE_FLOOR
    assert accept_or_resample(p, p.clone(), 3, gen) == 3, "q == p: every proposal is accepted"


def test_draft_config_needs_a_draft_model_and_ngram_refuses_one():
    from pydantic import ValidationError

    from llmop.engine.config import SpeculativeConfig

    assert SpeculativeConfig(method="draft", draft_model="/m").draft_model == "/m"
    with pytest.raises(ValidationError, match="needs draft_model"):
        SpeculativeConfig(method="draft")
    with pytest.raises(ValidationError, match="method draft only"):
        SpeculativeConfig(method="ngram", draft_model="/m")


def test_the_cli_takes_a_draft_section():
    import argparse

    from llmop.engine.server.cli import configure, load_config

    parser = argparse.ArgumentParser()
    configure(parser)
    spec = load_config(parser.parse_args(["--speculative", "{method: draft, draft_model: /models/draft}"])).speculative
    assert (spec.method, spec.draft_model) == ("draft", "/models/draft")


@pytest.fixture(scope="module")
def truncated_draft_dir(hf_checkpoint_dir, tmp_path_factory):
    """The embedded model's first DRAFT_LAYERS layers, embeddings, final norm and (tied) head."""
    from llmop.engine.draft_checkpoint import truncate_checkpoint

    return truncate_checkpoint(hf_checkpoint_dir, DRAFT_LAYERS,
                               tmp_path_factory.mktemp("draft") / f"smollm2-first-{DRAFT_LAYERS}-layers")


def draft_llm(draft_model) -> "LLM":  # noqa: F821
    """16 sequences, a 48-block KV budget (preemption with 16 requests at once), speculation
    always on (no acceptance gating)."""
    from llmop.engine.llm import LLM

    per_block = 2 * 30 * 3 * 64 * 4 * 16  # fp32 K and V of 16 tokens
    return LLM(None, dtype="float32", kv_cache_memory_bytes=48 * per_block, max_num_seqs=16,
               max_num_batched_tokens=512, speculative={
                   "method": "draft", "draft_model": str(draft_model), "num_tokens": 4, "max_batch_size": 16,
                   "min_acceptance": 0.0})


@pytest.fixture(scope="module")
def self_draft(embedded_gguf):
    return draft_llm(embedded_gguf)


@pytest.fixture(scope="module")
def truncated_draft(truncated_draft_dir):
    return draft_llm(truncated_draft_dir)


def all_blocks_free(llm) -> bool:
    eng = llm.engine
    draft = eng.speculator.proposer.blocks.pool
    return eng.blocks.pool.num_free == eng.blocks.pool.num_blocks and draft.num_free == draft.num_blocks


def acceptance(llm) -> float:
    c = llm.engine.speculator.counters
    return c.accepted_tokens / max(1, c.draft_tokens)


def test_a_draft_with_another_vocabulary_is_refused(engine_llm, hf_checkpoint_dir, tmp_path):
    from llmop.engine.config import EngineConfig
    from llmop.engine.draft_proposer import build_draft_proposer

    for f in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(hf_checkpoint_dir / f, tmp_path / f)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "vocab_size": config["vocab_size"] + 64}))
    eng = engine_llm.engine
    cfg = EngineConfig(speculative={"method": "draft", "draft_model": str(tmp_path)})
    with pytest.raises(ValueError, match="vocabulary has 49216 tokens, the target's 49152"):
        build_draft_proposer(cfg, torch.float32, eng.checkpoint.config, eng.tokenizer, 8, 1024,
                             eng.tokenizer.eos_token_ids)


@pytest.mark.parametrize("draft", ["self_draft", "truncated_draft"])
def test_greedy_tokens_equal_without_speculation_one_at_a_time(draft, request, greedy_equality):
    llm = request.getfixturevalue(draft)
    greedy_equality.one_at_a_time(llm, invariant=all_blocks_free)
    c = llm.engine.speculator.counters
    assert c.accepted_tokens > 0, "speculation must have run and been accepted"
    if draft == "self_draft":  # the target as its own draft proposes the target's argmax
        assert acceptance(llm) > 0.95


@pytest.mark.parametrize("draft", ["self_draft", "truncated_draft"])
def test_greedy_tokens_equal_concurrently_with_preemption(draft, request, greedy_equality):
    llm = request.getfixturevalue(draft)
    greedy_equality.concurrently_with_preemption(llm)
    assert all_blocks_free(llm), "a rejection, a preemption or a finish leaked a block"


STAT_PROMPT = "Paris is the capital of France. Berlin is the capital of"
STAT_SAMPLES = 320
STAT_TOKENS = 5  # after the first token, 3 proposed positions and the bonus one


def test_sampled_token_distribution_per_position_equals_the_target(truncated_draft, engine_llm, monkeypatch):
    """320 seeded requests (seeds 0..319, temperature 1.0, 5 tokens) with the truncated draft, and
    320 without speculation (seeds 10,000..10,319, so the two samples are independent). At output
    positions 1-4 (position 0 comes from the prefill, before any proposal; 1-3 verify proposals,
    4 is the bonus token when all are accepted) a two-sample chi-square homogeneity test (tokens
    seen fewer than 10 times pooled into one cell) must give a p-value >= 1e-3 at every position.
    Power check: with a verifier that accepts every proposal (the output then follows the draft's
    q, the bug this guards against), the same test fails at some position."""
    ids = engine_llm.tokenizer.encode(STAT_PROMPT)

    def sample(llm, first_seed):
        params = [SamplingParams(max_tokens=STAT_TOKENS, temperature=1.0, seed=first_seed + i, ignore_eos=True)
                  for i in range(STAT_SAMPLES)]
        outs = llm.generate([ids] * STAT_SAMPLES, params)
        return [[o.token_ids[j] for o in outs] for j in range(STAT_TOKENS)]

    counters = truncated_draft.engine.speculator.counters
    before = (counters.draft_tokens, counters.accepted_tokens)
    target = sample(engine_llm, 10_000)
    spec = sample(truncated_draft, 0)
    proposed, accepted = counters.draft_tokens - before[0], counters.accepted_tokens - before[1]
    assert proposed >= 2 * STAT_SAMPLES and 0 < accepted < proposed, "proposals must be both accepted and rejected"
    p_values = [homogeneity_p_value(spec[j], target[j]) for j in range(1, STAT_TOKENS)]
    assert min(p_values) >= P_VALUE_FLOOR, p_values
    assert all_blocks_free(truncated_draft)

    import llmop.engine.sampler as sampler

    monkeypatch.setattr(sampler, "accept_or_resample", lambda p, q, token, generator: token)
    broken = sample(truncated_draft, 0)
    assert min(homogeneity_p_value(broken[j], target[j]) for j in range(1, STAT_TOKENS)) < P_VALUE_FLOOR
