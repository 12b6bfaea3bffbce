"""Many clients at once, and clients that leave: batching must not change greedy outputs, and an
abandoned stream must give its KV blocks back."""

import asyncio
import time

import httpx

from llmop.engine.sampling_params import SamplingParams

PROMPTS = [f"Item {i}: a short fact about the number {i} is that" for i in range(32)]


def test_32_concurrent_streams_match_the_offline_engine(engine_server, async_openai_client, engine_llm):
    model = engine_server.state.model_name

    async def one(prompt):
        stream = await async_openai_client.completions.create(model=model, prompt=prompt, max_tokens=5,
                                                             temperature=0, stream=True)
        parts, reasons = [], []
        async for chunk in stream:
            parts.append(chunk.choices[0].text)
            reasons.append(chunk.choices[0].finish_reason)
        return "".join(parts), reasons[-1]

    async def all_of_them():
        return await asyncio.gather(*(one(p) for p in PROMPTS))

    served = asyncio.run(all_of_them())
    offline = engine_llm.generate(PROMPTS, SamplingParams(max_tokens=5, temperature=0))
    assert [s[0] for s in served] == [o.text for o in offline]
    assert [s[1] for s in served] == [o.finish_reason for o in offline]


def _wait_idle(engine_server, attempts=600):
    for _ in range(attempts):
        s = engine_server.fresh_stats()
        if s.num_running == 0 and s.num_waiting == 0 and s.num_free_blocks == s.num_total_blocks:
            return s
        time.sleep(0.05)
    raise AssertionError(f"engine never became idle: {s}")


def _abort_count(engine_server):
    m = engine_server.state.metrics
    return m.success.labels(m.model, "abort")._value.get()


def test_disconnect_mid_stream_frees_the_kv_cache(engine_server, openai_client):
    model = engine_server.state.model_name
    aborts = _abort_count(engine_server)
    stream = openai_client.completions.create(model=model, prompt="Count forever: 1, 2, 3,", max_tokens=1500,
                                              temperature=0, stream=True, extra_body={"ignore_eos": True})
    it = iter(stream)
    next(it), next(it)
    assert engine_server.fresh_stats().num_running == 1
    stream.close()  # the client goes away mid-stream

    _wait_idle(engine_server)
    assert _abort_count(engine_server) == aborts + 1
    assert engine_server.state.num_in_flight == 0 and engine_server.state.num_queued == 0
    assert httpx.get(engine_server.url + "/health").status_code == 200
    r = openai_client.completions.create(model=model, prompt="Hello", max_tokens=2)
    assert r.choices[0].finish_reason in ("length", "stop")


def test_disconnect_of_a_non_streaming_request_aborts_it(engine_server):
    aborts = _abort_count(engine_server)
    body = {"prompt": "Count forever: 1, 2, 3,", "max_tokens": 1500, "ignore_eos": True}
    with httpx.Client(base_url=engine_server.url) as client:
        try:
            client.post("/v1/completions", json=body, timeout=httpx.Timeout(30, read=1.0))
        except httpx.ReadTimeout:
            pass  # leaving without the answer; closing the client drops the connection
    _wait_idle(engine_server)
    assert _abort_count(engine_server) == aborts + 1
    assert engine_server.state.num_in_flight == 0
