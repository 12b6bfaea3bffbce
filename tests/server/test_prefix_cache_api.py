"""Prefix caching as clients see it: `usage.prompt_tokens_details.cached_tokens`, `cache_salt`, n > 1
choices sharing one prompt, and the hit counters on /metrics."""

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

SYSTEM = ("You are a careful assistant for a hardware store. Answer briefly, name the aisle, and never "
          "invent prices. The store sells tools, paint, garden supplies, lumber and plumbing parts. ") * 2


def counters(url) -> dict[str, float]:
    text = httpx.get(url + "/metrics").text
    return {s.name: s.value for fam in text_string_to_metric_families(text) for s in fam.samples
            if s.name.startswith("llmop_prefix_cache_")}


@pytest.fixture(scope="module")
def model(engine_server):
    return engine_server.state.model_name


def chat(client, model, question, **extra):
    return client.chat.completions.create(
        model=model, max_tokens=4, temperature=0, extra_body=extra or None,
        messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}])


def test_a_shared_system_prompt_is_served_from_the_cache(engine_server, openai_client, model):
    before = counters(engine_server.url)
    first = chat(openai_client, model, "Where are the hammers?", cache_salt="api-test-1")
    second = chat(openai_client, model, "Do you sell rakes?", cache_salt="api-test-1")
    after = counters(engine_server.url)
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    hit = second.usage.prompt_tokens_details.cached_tokens
    assert hit > 64 and hit % 16 == 0 and hit < second.usage.prompt_tokens
    queried = after["llmop_prefix_cache_queries_total"] - before["llmop_prefix_cache_queries_total"]
    assert queried == first.usage.prompt_tokens + second.usage.prompt_tokens
    assert after["llmop_prefix_cache_hits_total"] - before["llmop_prefix_cache_hits_total"] == hit


def test_salts_keep_tenants_apart(openai_client, model):
    chat(openai_client, model, "Is there a key cutter?", cache_salt="tenant-x")
    other = chat(openai_client, model, "Is there a key cutter?", cache_salt="tenant-y")
    same = chat(openai_client, model, "Is there a key cutter?", cache_salt="tenant-x")
    assert other.usage.prompt_tokens_details.cached_tokens == 0
    assert same.usage.prompt_tokens_details.cached_tokens > 64


def test_completions_report_cached_tokens_and_n_choices_count_the_prompt_once(openai_client, model):
    prompt = SYSTEM + "Question: which aisle has paint thinner?\nAnswer:"
    r = openai_client.completions.create(model=model, prompt=prompt, max_tokens=5, temperature=0, n=3,
                                         extra_body={"cache_salt": "api-test-n"})
    texts = {c.text for c in r.choices}
    assert len(r.choices) == 3 and len(texts) == 1  # greedy: the shared prompt KV gives the same answer
    assert r.usage.prompt_tokens_details.cached_tokens == 0  # the first choice computed the prompt
    again = openai_client.completions.create(model=model, prompt=prompt, max_tokens=5, temperature=0,
                                             extra_body={"cache_salt": "api-test-n"})
    assert again.choices[0].text in texts
    assert again.usage.prompt_tokens_details.cached_tokens == (r.usage.prompt_tokens - 1) // 16 * 16


def test_an_empty_salt_is_rejected(engine_server, model):
    r = httpx.post(engine_server.url + "/v1/completions",
                   json={"model": model, "prompt": "hi", "max_tokens": 1, "cache_salt": ""})
    assert r.status_code == 400 and r.json()["error"]["param"] == "cache_salt"
