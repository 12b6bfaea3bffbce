"""The engine's greedy tokens and logits equal Hugging Face transformers' on the embedded model.

HF loads the same GGUF with its own dequantizer and its own model code: an independent reference.
fp32 logits agree to within LOGIT_ATOL (differences come from summation order only).
"""

import torch

from llmop.engine.sampling_params import SamplingParams

LOGIT_ATOL = 2e-3


def _greedy(n):
    return SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True)


def test_one_at_a_time_matches_hf(engine_llm, prompt_ids, hf_continuations, new_tokens):
    for ids, (ref, _) in zip(prompt_ids, hf_continuations):
        out = engine_llm.generate([ids], _greedy(new_tokens))[0]
        assert list(out.token_ids) == ref, engine_llm.tokenizer.decode(ids)


def test_concurrent_batch_matches_hf(engine_llm, prompt_ids, hf_continuations, new_tokens):
    """16 requests of different prompt and output lengths in one engine: batching, chunked prefill
    (the budget is 512 tokens) and block reuse must not change any token."""
    reqs, refs = [], []
    for i in range(16):
        ids = prompt_ids[i % len(prompt_ids)]
        n = new_tokens - 3 * (i // len(prompt_ids)) * (i % 5)  # different output lengths
        ids = ids[: max(1, len(ids) - (i // len(prompt_ids)))]  # and different prompts
        reqs.append((ids, n))
        refs.append(hf_continuations[i % len(prompt_ids)][0][:n] if i < len(prompt_ids) else None)
    outs = engine_llm.generate([r[0] for r in reqs], [_greedy(r[1]) for r in reqs])
    for (ids, n), out, ref in zip(reqs, outs, refs):
        assert len(out.token_ids) == n
        if ref is not None:
            assert list(out.token_ids) == ref
    # The other eight were shortened prompts: check them against single runs of the same engine,
    # which the test above ties to HF.
    for (ids, n), out in list(zip(reqs, outs))[len(prompt_ids):]:
        assert list(out.token_ids) == list(engine_llm.generate([ids], _greedy(n))[0].token_ids)


def test_prefill_logits_match_hf(engine_llm, prompt_ids, hf_continuations):
    """Logits of the first generated position, engine vs HF, for every prompt."""
    eng = engine_llm.engine
    for i, (ids, (_, ref_logits)) in enumerate(zip(prompt_ids, hf_continuations)):
        req = eng.add_request(f"logits-{i}", ids, _greedy(1))
        out = eng.scheduler.schedule()
        logits = eng.executor.logits(eng.build_batch(out))[0]
        eng.abort(req.request_id)
        torch.testing.assert_close(logits, ref_logits, atol=LOGIT_ATOL, rtol=0)
    assert eng.blocks.pool.num_free == eng.blocks.pool.num_blocks
