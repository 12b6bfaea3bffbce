"""The adapter admin API (on its own listener) and adapter selection by `model`, over HTTP, under
concurrent traffic. Who may reach the admin API, and from where it loads: test_admin_security.py."""

import asyncio

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families


@pytest.fixture(scope="module")
def server(lora_server):
    return lora_server


def body(model, prompt, n):
    return {"model": model, "prompt": prompt, "max_tokens": n, "temperature": 0.0, "ignore_eos": True}


async def complete(client, model, prompt, n):
    r = await client.post("/v1/completions", json=body(model, prompt, n))
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["text"]


def test_models_list_adapters_with_their_parent(server, lora_engine, lora_kit):
    data = httpx.get(server.url + "/v1/models").json()["data"]
    base = lora_engine.model_name
    assert data[0]["id"] == base and data[0]["parent"] is None
    assert {d["id"]: d["parent"] for d in data[1:]} == {a: base for a in lora_kit.ADAPTERS}
    r = httpx.post(server.url + "/v1/completions", json=body("no-such-adapter", "Hi", 2))
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"


def test_load_use_unload_reload_under_traffic(server, lora_engine, adapter_dirs, references, lora_kit):
    tok = lora_engine.tokenizer
    prompts = lora_kit.PROMPTS
    expect = {(i, m): tok.decode(references[(i, m)][0]) for (i, m) in references}
    corrupt = server.adapter_root / "corrupt"
    corrupt.mkdir(exist_ok=True)
    (corrupt / "adapter_config.json").write_text("{not json")
    auth = {"Authorization": f"Bearer {server.admin_token}"}

    async def main():
        async with httpx.AsyncClient(base_url=server.url, timeout=300) as c, \
                httpx.AsyncClient(base_url=server.admin_url, headers=auth, timeout=300) as admin:
            async def traffic():  # base and two registered adapters, round after round
                got = []
                for rnd in range(3):
                    jobs = [(i, m) for i in range(len(prompts)) for m in (None, "attn-r8", "mlp-r16")]
                    texts = await asyncio.gather(*(complete(c, m or lora_engine.model_name, prompts[i],
                                                            lora_kit.NEW_TOKENS) for i, m in jobs))
                    got += [(job, t) for job, t in zip(jobs, texts)]
                return got

            background = asyncio.create_task(traffic())
            source = str(adapter_dirs["qv-r4"])
            for round_ in range(2):  # load, use, unload; then the same again (reload)
                r = await admin.post("/v1/adapters", json={"name": "qv-again", "source": source})
                assert r.status_code == 201, r.text
                assert r.json()["state"] in ("cpu", "resident")
                texts = await asyncio.gather(*(complete(c, "qv-again", p, lora_kit.NEW_TOKENS) for p in prompts))
                assert texts == [expect[(i, "qv-r4")] for i in range(len(prompts))], round_
                assert (await admin.delete("/v1/adapters/qv-again")).status_code == 204
                r = await c.post("/v1/completions", json=body("qv-again", prompts[0], 2))
                assert r.status_code == 404
                assert (await admin.delete("/v1/adapters/qv-again")).status_code == 404

            r = await admin.post("/v1/adapters", json={"name": "broken", "source": str(corrupt)})
            assert r.status_code == 422 and "not valid JSON" in r.json()["error"]["message"]
            listed = {a["name"]: a for a in (await admin.get("/v1/adapters")).json()["data"]}
            assert listed["broken"]["state"] == "failed" and "not valid JSON" in listed["broken"]["error"]
            assert (await admin.post("/v1/adapters", json={"name": "attn-r8", "source": source})).status_code == 409
            assert (await admin.delete("/v1/adapters/broken")).status_code == 204

            # An adapter with a running request cannot be unloaded.
            stream = c.stream("POST", "/v1/completions", json={**body("all-r32", prompts[0], 48), "stream": True})
            async with stream as resp:
                lines = resp.aiter_lines()
                while not (await anext(lines)).startswith("data:"):
                    pass
                r = await admin.delete("/v1/adapters/all-r32")
                assert r.status_code == 409 and r.json()["error"]["code"] == "adapter_in_use"
            for job, text in await background:
                assert text == expect[job], job

    asyncio.run(main())


def test_metrics_per_adapter_and_lora_requests_info(server, lora_kit):
    text = httpx.get(server.url + "/metrics").text
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    (info,) = fams["llmop_lora_requests_info"].samples
    assert info.labels["max_lora"] == "4"
    assert set(info.labels["running_lora_adapters"].split(",")) - {""} <= set(lora_kit.ADAPTERS)
    reqs = {s.labels["adapter"]: s.value for s in fams["llmop_lora_requests"].samples}
    assert set(reqs) == set(lora_kit.ADAPTERS) and reqs["attn-r8"] >= 9
    gen = {s.labels["adapter"]: s.value for s in fams["llmop_lora_generation_tokens"].samples}
    assert gen["attn-r8"] >= 9 * lora_kit.NEW_TOKENS
    states = {s.labels["state"]: s.value for s in fams["llmop_lora_adapters"].samples}
    assert sum(states.values()) == len(lora_kit.ADAPTERS)


def test_lora_metrics_are_exact_once_the_engine_is_idle(server):
    """While stepping, the LoRA snapshot is refreshed at most every 0.25 s; the step in which the
    last request finished must still reach the metrics once the engine is idle (no adapter left
    running, every generated token counted)."""
    import time

    def series():
        fams = {f.name: f for f in text_string_to_metric_families(httpx.get(server.url + "/metrics").text)}
        (info,) = fams["llmop_lora_requests_info"].samples
        gen = {s.labels["adapter"]: s.value for s in fams["llmop_lora_generation_tokens"].samples}
        return info.labels["running_lora_adapters"], gen["mlp-r16"]

    _, generated = series()
    assert httpx.post(server.url + "/v1/completions", json=body("mlp-r16", "Hi", 5), timeout=120).status_code == 200
    deadline = time.monotonic() + 5
    while (seen := series()) != ("", generated + 5) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert seen == ("", generated + 5)


def test_every_documented_lora_metric_is_exposed(server):
    import re
    from pathlib import Path

    doc = (Path(__file__).parents[2] / "docs" / "metrics.md").read_text()
    documented = set(re.findall(r"`(llmop_lora_[a-z0-9_]+)`", doc))
    exposed = {s.name for f in text_string_to_metric_families(httpx.get(server.url + "/metrics").text) for s in f.samples}
    assert len(documented) >= 5 and documented <= exposed, documented - exposed
