"""Prompts and Hugging Face reference continuations shared by the engine tests, and the greedy
checks shared by the speculative-decoding tests."""

import pytest

PROMPTS = [
    "The Kubernetes operator pattern is",
    "def fibonacci(n):\n    ",
    "Here is a shopping list:\n1. eggs\n2.",
    "Question: what is 17 times 23?\nAnswer:",
    "Paris is the capital of France. Berlin is the capital of",
    "Il était une fois, dans un petit village,",
    "A",
    "Once upon a time " + "there was a small robot who liked to count the stars at night. " * 12,
]
NEW_TOKENS = 64


def hf_greedy(model, ids: list[int], n: int) -> tuple[list[int], "torch.Tensor"]:
    """HF transformers' greedy continuation and its first-step logits (the independent reference).

    A plain argmax loop over HF's forward with its own KV cache: `generate(min_new_tokens=...)`
    would mask EOS, which the engine's `ignore_eos` does not."""
    import torch

    with torch.inference_mode():
        out = model(torch.tensor([ids]), use_cache=True)
        first = out.logits[0, -1].float()
        logits, tokens = first, []
        for _ in range(n):
            tokens.append(int(logits.argmax()))
            out = model(torch.tensor([[tokens[-1]]]), past_key_values=out.past_key_values, use_cache=True)
            logits = out.logits[0, -1]
    return tokens, first


@pytest.fixture(scope="session")
def new_tokens():
    return NEW_TOKENS


@pytest.fixture(scope="session")
def prompt_ids(engine_llm):
    return [engine_llm.tokenizer.encode(p) for p in PROMPTS]


@pytest.fixture(scope="session")
def greedy():
    """greedy(n): SamplingParams for exactly n greedy tokens (EOS ignored)."""
    from llmop.engine.sampling_params import SamplingParams

    return lambda n: SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True)


@pytest.fixture(scope="session")
def reference_tokens(engine_llm, prompt_ids, greedy):
    """The engine's own greedy continuation of each prompt, speculation off."""
    return [list(engine_llm.generate([ids], greedy(NEW_TOKENS))[0].token_ids) for ids in prompt_ids]


@pytest.fixture(scope="session")
def hf_continuations(hf_reference, prompt_ids):
    """Greedy continuation of each prompt by HF, one prompt at a time."""
    return [hf_greedy(hf_reference, ids, NEW_TOKENS) for ids in prompt_ids]


@pytest.fixture(scope="session")
def greedy_equality(prompt_ids, reference_tokens, new_tokens, greedy):
    """The two greedy checks every speculative engine passes (n-gram in test_speculative.py, the
    drafts in test_draft_speculation.py), written once:

    - `one_at_a_time(llm, invariant=None)`: each prompt alone gives `reference_tokens`, and
      `invariant(llm)` (a block-accounting check) holds after every prompt.
    - `concurrently_with_preemption(llm)`: every prompt twice at once gives them too, the engine
      preempted and speculated meanwhile (its KV budget must be small enough)."""
    import types

    def one_at_a_time(llm, invariant=None):
        for ids, expected in zip(prompt_ids, reference_tokens):
            assert list(llm.generate([ids], greedy(new_tokens))[0].token_ids) == expected
            assert invariant is None or invariant(llm), f"{invariant.__name__} fails after prompt {ids[:8]}..."

    def concurrently_with_preemption(llm):
        eng = llm.engine
        before = (eng.stats().num_preemptions, eng.speculator.counters.drafts)
        outs = llm.generate(prompt_ids * 2, greedy(new_tokens))
        assert [list(o.token_ids) for o in outs] == reference_tokens * 2
        assert eng.stats().num_preemptions > before[0], "the small KV budget must force preemption"
        assert eng.speculator.counters.drafts > before[1], "speculation must have run"

    return types.SimpleNamespace(one_at_a_time=one_at_a_time, concurrently_with_preemption=concurrently_with_preemption)
