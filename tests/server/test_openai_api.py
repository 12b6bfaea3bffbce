"""The official openai SDK against a live server: the shapes and semantics clients rely on."""

import httpx
import pytest

PROMPT = "The three primary colors are"
CHAT = [{"role": "user", "content": "Name a color."}]


@pytest.fixture(scope="module")
def model(engine_server):
    return engine_server.state.model_name


def test_models_health_ready(engine_server, openai_client, model):
    assert [m.id for m in openai_client.models.list().data] == [model]
    assert httpx.get(engine_server.url + "/health").json() == {"status": "ok"}
    assert httpx.get(engine_server.url + "/ready").status_code == 200


def test_completion_greedy_matches_offline_engine(openai_client, engine_llm, model):
    from llmop.engine.sampling_params import SamplingParams

    r = openai_client.completions.create(model=model, prompt=PROMPT, max_tokens=6, temperature=0)
    offline = engine_llm.generate(PROMPT, SamplingParams(max_tokens=6, temperature=0))[0]
    assert r.choices[0].text == offline.text
    assert r.choices[0].finish_reason == offline.finish_reason
    assert r.usage.prompt_tokens == len(offline.prompt_token_ids)
    assert r.usage.completion_tokens == len(offline.token_ids)
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    assert r.id.startswith("cmpl-") and r.object == "text_completion" and r.model == model


def test_chat_uses_the_chat_template(openai_client, engine_llm, model):
    from llmop.engine.sampling_params import SamplingParams

    r = openai_client.chat.completions.create(model=model, messages=CHAT, max_tokens=5, temperature=0)
    offline = engine_llm.chat(CHAT, SamplingParams(max_tokens=5, temperature=0))
    assert r.choices[0].message.role == "assistant"
    assert r.choices[0].message.content == offline.text
    assert r.usage.prompt_tokens == len(offline.prompt_token_ids)


def test_chat_streaming_with_usage(openai_client, model):
    whole = openai_client.chat.completions.create(model=model, messages=CHAT, max_tokens=5, temperature=0)
    chunks = list(openai_client.chat.completions.create(
        model=model, messages=CHAT, max_tokens=5, temperature=0, stream=True,
        stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].choices == []
    usage, first = chunks[-1].usage, whole.usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (
        first.prompt_tokens, first.completion_tokens, first.total_tokens)
    assert usage.prompt_tokens_details.cached_tokens > 0  # the same prompt again: served from the cache


def test_completion_streaming(openai_client, model):
    whole = openai_client.completions.create(model=model, prompt=PROMPT, max_tokens=5, temperature=0)
    chunks = list(openai_client.completions.create(model=model, prompt=PROMPT, max_tokens=5, temperature=0,
                                                   stream=True))
    assert "".join(c.choices[0].text for c in chunks) == whole.choices[0].text
    assert all(c.usage is None for c in chunks)  # no usage chunk unless asked for


def test_stop_sequence_cuts_the_text(openai_client, model):
    free = openai_client.completions.create(model=model, prompt=PROMPT, max_tokens=8, temperature=0)
    text = free.choices[0].text
    stop = text.strip()[2:5]
    assert stop and stop in text
    r = openai_client.completions.create(model=model, prompt=PROMPT, max_tokens=8, temperature=0, stop=[stop])
    assert r.choices[0].text == text[: text.index(stop)]
    assert r.choices[0].finish_reason == "stop"


def test_seeded_sampling_is_reproducible(openai_client, model):
    def sample(seed):
        return openai_client.completions.create(model=model, prompt=PROMPT, max_tokens=8, temperature=1.0,
                                                seed=seed).choices[0].text

    assert sample(1234) == sample(1234)
    assert len({sample(seed) for seed in (1, 2, 3, 4)}) > 1, "the seed must change what is sampled"


def test_n_choices_differ_by_seed_and_are_reproducible(openai_client, model):
    def sample():
        r = openai_client.completions.create(model=model, prompt=PROMPT, max_tokens=6, temperature=1.0,
                                             seed=7, n=2)
        return [c.text for c in sorted(r.choices, key=lambda c: c.index)], r.usage

    (first, usage), (again, _) = sample(), sample()
    assert first == again and len(first) == 2
    assert first[0] != first[1], "the n choices must be sampled independently"
    assert usage.completion_tokens == 12


def test_every_sampling_field_is_accepted(openai_client, model):
    """The fields the issue lists beyond the SDK's typed ones go through `extra_body`; the
    penalties edit the logits in place, which once failed on the engine's inference tensors."""
    r = openai_client.chat.completions.create(
        model=model, messages=CHAT, max_completion_tokens=5, temperature=0.8, top_p=0.9, seed=3,
        frequency_penalty=0.5, presence_penalty=0.2,
        extra_body={"top_k": 20, "min_p": 0.05, "min_tokens": 2, "repetition_penalty": 1.1,
                    "ignore_eos": True})
    assert r.usage.completion_tokens == 5 and r.choices[0].finish_reason == "length"


def test_completion_logprobs(openai_client, model):
    r = openai_client.completions.create(model=model, prompt=PROMPT, max_tokens=4, temperature=0, logprobs=3)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == r.usage.completion_tokens
    assert "".join(lp.tokens) == r.choices[0].text
    for chosen, top in zip(lp.token_logprobs, lp.top_logprobs):
        assert len(top) == 3 and chosen <= 0
        assert chosen == pytest.approx(max(top.values()))  # greedy picks the most likely token


def test_chat_logprobs(openai_client, model):
    r = openai_client.chat.completions.create(model=model, messages=CHAT, max_tokens=4, temperature=0,
                                              logprobs=True, top_logprobs=2)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens
    for t in content:
        assert len(t.top_logprobs) == 2
        assert t.logprob == pytest.approx(t.top_logprobs[0].logprob)
        assert bytes(t.bytes).decode() == t.token


def test_tokenize_detokenize_round_trip(engine_server):
    ids = httpx.post(engine_server.url + "/tokenize", json={"prompt": PROMPT}).json()
    assert ids["count"] == len(ids["tokens"]) == len(engine_server.engine.tokenizer.encode(PROMPT))
    back = httpx.post(engine_server.url + "/detokenize", json={"tokens": ids["tokens"]}).json()
    assert back["prompt"].strip() == PROMPT
    chat = httpx.post(engine_server.url + "/tokenize", json={"messages": CHAT}).json()
    assert chat["tokens"] == engine_server.engine.tokenizer.apply_chat_template(CHAT)
