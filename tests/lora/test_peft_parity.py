"""Base requests and four adapters interleaved in one engine give PEFT's own tokens and logits.

PEFT applies each adapter to HF transformers' model one request at a time: an independent
reference. fp32 logits agree within LOGIT_ATOL (summation order only; the base model alone agrees
with HF to 2e-3).
"""

import pytest
import torch

LOGIT_ATOL = 2e-3


@pytest.fixture
def kit(lora_kit):
    return lora_kit


def interleaved(prompt_ids, models):
    """Every (prompt, model) pair, models interleaved, so each batch mixes all five."""
    return [(i, m) for i in range(len(prompt_ids)) for m in models]


def test_the_adapters_change_the_model(references, prompt_ids, kit):
    """Otherwise the parity below would hold even if the engine ignored adapters."""
    for m in kit.ADAPTERS:
        diffs = [(references[(i, m)][1] - references[(i, None)][1]).abs().max().item() for i in range(len(prompt_ids))]
        assert min(diffs) > 0.5, (m, diffs)
    assert len({tuple(references[(0, m)][0]) for m in kit.MODELS}) >= 4


def test_mixed_batch_logits_match_peft(lora_engine, references, prompt_ids, kit):
    """One forward pass holding the prefill of all 15 requests."""
    eng = lora_engine
    pairs = interleaved(prompt_ids, kit.MODELS)
    for k, (i, m) in enumerate(pairs):
        eng.add_request(f"logits-{k}", prompt_ids[i], kit.greedy(1), adapter=m)
    out = eng.scheduler.schedule()
    assert len(out.chunks) == len(pairs) and all(c.completes for c in out.chunks)
    batch = eng.build_batch(out)  # chunks ordered by slot: row_requests say which request each row is
    assert len(kit.slots_of(eng)) == len(kit.ADAPTERS)
    logits = eng.executor.logits(batch)
    for k in range(len(pairs)):
        eng.abort(f"logits-{k}")
    assert len(batch.row_requests) == len(pairs)
    for row, rid in enumerate(batch.row_requests):
        i, m = pairs[int(rid.removeprefix("logits-"))]
        torch.testing.assert_close(logits[row], references[(i, m)][1], atol=LOGIT_ATOL, rtol=0, msg=f"{m} prompt {i}")
    assert eng.blocks.pool.num_free == eng.blocks.pool.num_blocks


def test_mixed_batch_greedy_tokens_match_peft(lora_engine, references, prompt_ids, kit):
    eng = lora_engine
    pairs = interleaved(prompt_ids, kit.MODELS)
    for k, (i, m) in enumerate(pairs):
        eng.add_request(f"mixed-{k}", prompt_ids[i], kit.greedy(), adapter=m)
    distinct = []
    tokens = kit.run_to_completion(eng, lambda e: distinct.append(len(kit.slots_of(e))))
    assert max(distinct) == len(kit.ADAPTERS), "all four adapters ran in the same steps"
    for k, (i, m) in enumerate(pairs):
        assert tokens[f"mixed-{k}"] == references[(i, m)][0][:kit.NEW_TOKENS], (m, i)


def test_base_only_steps_skip_the_lora_path(lora_engine, prompt_ids, references, kit):
    eng = lora_engine
    eng.add_request("base-only", prompt_ids[0], kit.greedy())
    seen = []
    tokens = kit.run_to_completion(eng, lambda e: seen.append(e.last_batch.lora))
    assert seen and all(m is None or m.token_slots is None for m in seen)
    assert tokens["base-only"] == references[(0, None)][0]
