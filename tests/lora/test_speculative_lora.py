"""Speculative decoding with LoRA: the target verifies with the request's adapter, a draft is the base.

Base requests and each of the four adapters, in one mixed batch, give the same greedy tokens with
speculation on as the same engine without it (`lora_engine`), with n-gram lookup and with the base
model as draft. Each adapter's requests must have had proposals accepted, so a verification that
left out the adapter at the proposed positions (or a draft that used one) would change tokens.
"""

import pytest

PROMPTS = ["Once upon a time " + "there was a small robot who liked to count the stars at night. " * 6,
           "The Kubernetes operator pattern is"]
NEW_TOKENS = 24
METHODS = {"ngram": {"method": "ngram"}, "draft": {"method": "draft", "min_acceptance": 0.0}}


@pytest.fixture(scope="module", params=list(METHODS))
def spec_engine(request, hf_checkpoint_dir, adapter_dirs, lora_kit):
    """`lora_engine`'s configuration plus speculation (4 tokens, always on); the draft is the
    base checkpoint itself."""
    from llmop.engine.engine import LLMEngine

    spec = {**METHODS[request.param], "num_tokens": 4, "max_batch_size": 16}
    if request.param == "draft":
        spec["draft_model"] = str(hf_checkpoint_dir)
    return LLMEngine(lora_kit.engine_config(hf_checkpoint_dir, adapter_dirs, speculative=spec))


def generate(engine, kit, tag, on_step=None):
    """Every prompt under every model (None = base) at once; (prompt index, model) -> tokens."""
    pairs = [(i, m) for i in range(len(PROMPTS)) for m in kit.MODELS]
    for k, (i, m) in enumerate(pairs):
        engine.add_request(f"{tag}-{k}", engine.tokenizer.encode(PROMPTS[i]), kit.greedy(NEW_TOKENS), adapter=m)
    tokens = kit.run_to_completion(engine, on_step)
    return {pair: tokens[f"{tag}-{k}"] for k, pair in enumerate(pairs)}


def test_greedy_tokens_with_adapters_equal_without_speculation(spec_engine, lora_engine, lora_kit):
    accepted: dict[str | None, int] = {}

    def record(engine):
        for r in engine.scheduler.running:
            accepted[r.adapter] = max(accepted.get(r.adapter, 0), r.num_spec_accepted)

    before = {name: gen for name, _, _, gen in spec_engine.lora.stats().counters}
    got = generate(spec_engine, lora_kit, "spec", record)
    want = generate(lora_engine, lora_kit, "plain")
    assert got == want
    # Per-adapter generated-token counters count every emitted token, not one per step.
    counted = {name: gen - before.get(name, 0) for name, _, _, gen in spec_engine.lora.stats().counters}
    emitted = {m: sum(len(v) for (i, mm), v in got.items() if mm == m) for m in lora_kit.MODELS if m is not None}
    assert {m: counted.get(m, 0) for m in emitted} == emitted
    assert all(accepted.get(m, 0) > 0 for m in lora_kit.MODELS), f"proposals accepted per model: {accepted}"
    draft_blocks = getattr(spec_engine.speculator.proposer, "blocks", None)  # the draft's own cache
    for pool in [spec_engine.blocks.pool] + ([draft_blocks.pool] if draft_blocks else []):
        assert pool.num_free == pool.num_blocks, "a block outlived its request"
