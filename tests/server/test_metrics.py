"""/metrics after a known workload: exact counts of requests and tokens, non-empty histograms."""

import httpx
from prometheus_client.parser import text_string_to_metric_families

PROMPTS = ["One two three", "The sky is", "Metrics are"]


def scrape(url) -> dict[tuple[str, tuple], float]:
    text = httpx.get(url + "/metrics").text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def value(samples, name, **labels):
    return sum(v for (n, ls), v in samples.items() if n == name and all((k, lv) in ls for k, lv in labels.items()))


def test_counts_after_a_known_workload(engine_server, openai_client):
    model = engine_server.state.model_name
    tok = engine_server.engine.tokenizer
    before = scrape(engine_server.url)
    for p in PROMPTS:
        openai_client.completions.create(model=model, prompt=p, max_tokens=3, extra_body={"ignore_eos": True})
    list(openai_client.completions.create(model=model, prompt=PROMPTS[0], max_tokens=3, stream=True,
                                          extra_body={"ignore_eos": True}))
    httpx.post(engine_server.url + "/v1/completions", json={"prompt": "x", "model": "no-such-model"})
    after = scrape(engine_server.url)

    def delta(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)

    n = len(PROMPTS) + 1
    prompt_tokens = sum(len(tok.encode(p)) for p in PROMPTS) + len(tok.encode(PROMPTS[0]))
    assert delta("llmop_request_success_total", finish_reason="length") == n
    assert delta("llmop_generation_tokens_total") == 3 * n
    assert delta("llmop_prompt_tokens_total") == prompt_tokens
    assert delta("llmop_request_rejected_total", reason="unknown_model") == 1
    for hist, count in [("llmop_e2e_request_latency_seconds", n), ("llmop_time_to_first_token_seconds", n),
                        ("llmop_inter_token_latency_seconds", 2 * n), ("llmop_request_queue_time_seconds", n),
                        ("llmop_request_prompt_tokens", n), ("llmop_request_generation_tokens", n)]:
        assert delta(hist + "_count") == count, hist
        assert delta(hist + "_bucket", le="+Inf") == count, hist
    assert delta("llmop_request_generation_tokens_sum") == 3 * n
    assert delta("llmop_request_prompt_tokens_sum") == prompt_tokens
    assert delta("llmop_e2e_request_latency_seconds_sum") > 0
    assert delta("llmop_inter_token_latency_seconds_sum") > 0
    assert value(after, "llmop_kv_cache_total_blocks", model=model) == engine_server.engine.kv_spec.num_blocks
    assert 0 <= value(after, "llmop_kv_cache_usage_ratio") <= 1


def test_every_documented_metric_is_exposed(engine_server):
    import re
    from pathlib import Path

    doc = (Path(__file__).parents[2] / "docs" / "metrics.md").read_text()
    # Per-adapter LoRA series need a registered adapter (tests/lora/test_adapters_api.py checks those);
    # per-position speculation series need speculation (tests/server/test_speculative_server.py).
    documented = {m for m in re.findall(r"`(llmop_[a-z0-9_]+)`", doc)
                  if not m.startswith("llmop_lora_") and "per_position" not in m}
    names = {name for name, _ in scrape(engine_server.url)}
    missing = {d for d in documented if d not in names and d + "_count" not in names}
    assert len(documented) >= 17 and not missing, missing
