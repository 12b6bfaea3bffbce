"""A server with n-gram speculation: streamed completions carry several tokens per event when
proposals are accepted, the text equals the server-less greedy text, and the speculation metrics
count what happened."""

import json

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

PROMPT = ("Repeat the list exactly.\nList: apples, pears, plums, cherries, grapes, lemons, limes.\n"
          "Again: apples, pears, plums, cherries, grapes, lemons, limes.\nAgain:")


@pytest.fixture(scope="module")
def spec_server():
    from llmop.engine.config import EngineConfig
    from llmop.engine.engine import LLMEngine
    from llmop.engine.server.app import create_app
    from llmop.engine.server.runner import BackgroundServer

    config = EngineConfig(dtype="float32", kv_cache_memory_bytes=64 << 20, speculative={"method": "ngram"})
    server = BackgroundServer(create_app(LLMEngine(config), config)).start()
    yield server
    server.stop()


def counters(url) -> dict[str, float]:
    text = httpx.get(url + "/metrics").text
    return {s.name + "".join(f"[{v}]" for k, v in sorted(s.labels.items()) if k == "position"): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples if "spec_decode" in s.name}


def test_stream_carries_accepted_runs_and_metrics_count_them(spec_server, engine_llm):
    url = spec_server.url
    before = counters(url)
    body = {"prompt": PROMPT, "max_tokens": 40, "temperature": 0, "ignore_eos": True, "stream": True}
    with httpx.Client(timeout=300) as client, client.stream("POST", url + "/v1/completions", json=body) as r:
        events = [json.loads(line[5:]) for line in r.iter_lines() if line.startswith("data:") and line != "data: [DONE]"]
    text = "".join(e["choices"][0]["text"] for e in events if e["choices"])
    from llmop.engine.sampling_params import SamplingParams

    expected = engine_llm.generate([engine_llm.tokenizer.encode(PROMPT)],
                                   SamplingParams(max_tokens=40, temperature=0.0, ignore_eos=True))[0].text
    assert text == expected
    assert len([e for e in events if e["choices"]]) < 40, "accepted proposals arrive together"
    after = counters(url)
    drafts = after["llmop_spec_decode_drafts_total"] - before["llmop_spec_decode_drafts_total"]
    accepted = after["llmop_spec_decode_accepted_tokens_total"] - before["llmop_spec_decode_accepted_tokens_total"]
    proposed = after["llmop_spec_decode_draft_tokens_total"] - before["llmop_spec_decode_draft_tokens_total"]
    assert drafts > 0 and 0 < accepted <= proposed
    first = after["llmop_spec_decode_accepted_tokens_per_position_total[0]"] - before[
        "llmop_spec_decode_accepted_tokens_per_position_total[0]"]
    assert 0 < first <= drafts
