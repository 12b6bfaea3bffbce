"""Prefix caching under LoRA on the real model: cached KV never crosses adapters, nor registrations.

An adapter changes the K and V of every layer it targets, so a block computed under one adapter is
wrong under any other, including one registered later under the same name (unloaded, then another
adapter loaded as that name). Such requests must compute their prompt (0 cached tokens) and give
exactly the tokens of an engine with caching off; the same adapter again must hit.
"""

import pytest

A, B = "all-r32", "qv-r4"  # the strongest and a light adapter: their greedy tokens differ early
BS = 16  # the engine's default block size
NEW_TOKENS = 16  # the small adapters change greedy tokens of this prompt only after 9 or more
TEXT = ("A Kubernetes operator watches custom resources and reconciles the cluster towards them: "
        "it creates Deployments, Services and ConfigMaps, and reports status back on the resource.")


@pytest.fixture(scope="module")
def dirs(adapter_dirs):
    return {n: adapter_dirs[n] for n in (A, B)}


@pytest.fixture(scope="module")
def uncached(hf_checkpoint_dir, dirs, lora_kit):
    from llmop.engine.engine import LLMEngine

    return LLMEngine(lora_kit.engine_config(hf_checkpoint_dir, dirs, enable_prefix_caching=False))


@pytest.fixture
def cached(hf_checkpoint_dir, dirs, lora_kit):
    """A fresh engine per test: what one test cached cannot answer another's first request."""
    from llmop.engine.engine import LLMEngine

    return LLMEngine(lora_kit.engine_config(hf_checkpoint_dir, dirs))


@pytest.fixture(scope="module")
def prompt(uncached):
    ids = uncached.tokenizer.encode(TEXT)
    assert len(ids) > 2 * BS, "the prompt must hold full blocks for the cache to serve"
    return ids


@pytest.fixture(scope="module")
def expected(uncached, prompt, lora_kit):
    """Adapter -> greedy tokens with caching off; A's and B's must differ for the tests to mean anything."""
    out = {a: generate(uncached, prompt, a, lora_kit)[0] for a in (A, B)}
    assert out[A] != out[B]
    return out


def generate(engine, prompt, adapter, lora_kit) -> tuple[list[int], int]:
    """One request run to the end alone: (its tokens, its prompt tokens served by the cache)."""
    rid = f"iso-{next(_ids)}"
    engine.add_request(rid, prompt, lora_kit.greedy(NEW_TOKENS), adapter=adapter)
    tokens, num_cached = [], None
    while engine.has_unfinished():
        for out in engine.step():
            tokens.extend(out.new_token_ids)
            num_cached = out.num_cached_tokens
    return tokens, num_cached


_ids = iter(range(1_000_000))


def test_two_adapters_never_share_cached_blocks(cached, prompt, expected, lora_kit):
    hit = (len(prompt) - 1) // BS * BS  # whole blocks, the last token always computed
    runs = [(a, *generate(cached, prompt, a, lora_kit)) for a in (A, B, A)]
    assert [(a, n) for a, _, n in runs] == [(A, 0), (B, 0), (A, hit)], "B must miss, A again must hit"
    assert [t for _, t, _ in runs] == [expected[A], expected[B], expected[A]]


def test_an_adapter_loaded_under_an_unloaded_ones_name_never_reuses_its_blocks(cached, dirs, prompt,
                                                                                 expected, lora_kit):
    """The cache must key by the registration, not the name: `x` unloaded and loaded again from
    other weights is another adapter, and its requests must not read the old one's KV."""
    cached.lora.add("x", str(dirs[A]))
    assert generate(cached, prompt, "x", lora_kit) == (expected[A], 0)
    cached.lora.remove("x")
    cached.lora.add("x", str(dirs[B]))
    tokens, num_cached = generate(cached, prompt, "x", lora_kit)
    assert num_cached == 0, f"the new `x` reused {num_cached} tokens of KV computed by the old `x`"
    assert tokens == expected[B]
    assert generate(cached, prompt, "x", lora_kit)[1] > 0, "the new `x` still hits its own blocks"
