"""Sampling: the filters never sample outside their set; seeds make outputs reproducible."""

import torch

from llmop.engine.sampler import SampleRow, sample
from llmop.engine.sampling_params import SamplingParams

DRAWS = 4000


def _draw(logits_row: torch.Tensor, params: SamplingParams, seed: int = 0) -> torch.Tensor:
    rows = [SampleRow(params)] * DRAWS
    gen = torch.Generator().manual_seed(seed)
    return torch.tensor(sample(logits_row.repeat(DRAWS, 1), rows, eos_ids=[], generator=gen).token_ids)


def _probs():
    p = torch.tensor([0.30, 0.25, 0.15, 0.10, 0.08, 0.05, 0.04, 0.03])
    return p, p.log()


def test_top_k_samples_only_the_k_most_likely_in_proportion():
    p, logits = _probs()
    got = _draw(logits, SamplingParams(top_k=3))
    assert set(got.tolist()) <= {0, 1, 2}
    freq = torch.bincount(got, minlength=8).float() / DRAWS
    expect = p[:3] / p[:3].sum()
    assert torch.allclose(freq[:3], expect, atol=0.04)  # ~5 sigma at 4000 draws


def test_top_p_keeps_the_smallest_prefix_reaching_p():
    _, logits = _probs()
    got = _draw(logits, SamplingParams(top_p=0.6))  # 0.30 + 0.25 < 0.6 <= 0.70: three tokens
    assert set(got.tolist()) == {0, 1, 2}


def test_min_p_drops_tokens_below_a_fraction_of_the_top():
    _, logits = _probs()
    got = _draw(logits, SamplingParams(min_p=0.3))  # keep p >= 0.09
    assert set(got.tolist()) == {0, 1, 2, 3}


def test_temperature_zero_is_argmax_and_penalties_apply():
    _, logits = _probs()
    rows = [SampleRow(SamplingParams(temperature=0.0)),
            SampleRow(SamplingParams(temperature=0.0, frequency_penalty=2.0), output_token_ids=[0, 0]),
            SampleRow(SamplingParams(temperature=0.0, repetition_penalty=100.0), prompt_token_ids=[0, 1]),
            SampleRow(SamplingParams(temperature=0.0, min_tokens=3), block_eos=True)]
    out = sample(logits.repeat(4, 1), rows, eos_ids=[0])
    assert out.token_ids == [0, 1, 2, 1]


def test_logprobs_are_of_the_raw_distribution():
    p, logits = _probs()
    rows = [SampleRow(SamplingParams(temperature=0.0, logprobs=2))]
    out = sample(logits.clone().unsqueeze(0) + 5.0, rows, eos_ids=[])
    lp, top = out.logprobs[0]
    assert abs(lp - float(p[0].log())) < 1e-5
    assert [t for t, _ in top] == [0, 1]


def test_seeded_request_is_reproducible_whatever_else_is_in_the_batch(engine_llm):
    tok = engine_llm.tokenizer
    ids = tok.encode("My favourite animal is")
    seeded = SamplingParams(max_tokens=24, temperature=1.0, top_p=0.95, seed=1234, ignore_eos=True)
    alone = engine_llm.generate([ids], seeded)[0].token_ids
    others = [tok.encode(t) for t in ("Hello", "Write a poem about the sea", "1, 2, 3,")]
    mixed = engine_llm.generate(
        [others[0], ids, others[1], others[2]],
        [SamplingParams(max_tokens=30, temperature=1.0, ignore_eos=True), seeded,
         SamplingParams(max_tokens=5, temperature=0.7, seed=9, ignore_eos=True),
         SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)],
    )
    assert mixed[1].token_ids == alone
    other_seed = engine_llm.generate([ids], SamplingParams(max_tokens=24, temperature=1.0, top_p=0.95,
                                                            seed=4321, ignore_eos=True))[0].token_ids
    assert other_seed != alone
