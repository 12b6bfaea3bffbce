"""Tenants' adapters on an engine pod (issue 21): named `<namespace>/<name>`, and restored at start-up
from the operator's adapter manifest before the pod reports ready, where a bad entry is reported
under `failed` in GET /v1/adapters and never stops the engine."""

import json
import time

import httpx
import pytest

from llmop.engine.config import AdapterSource, adapter_name_error
from llmop.engine.server.adapter_manifest import FailedAdapter, parse_manifest

GOOD = "team-a/summarizer"  # the manifest's adapter, attn-r8's weights
CHAT = [{"role": "user", "content": "Summarize the operator pattern in one line."}]


# --- names and the manifest file, without an engine --------------------------------------------------


@pytest.mark.parametrize("name", ["attn-r8", "A.b_c:d-1", "x" * 128, GOOD, "kube-system/a.b-c", "a/b",
                                  "n" * 63 + "/" + "o" * 253])
def test_names_that_are_accepted(name):
    assert adapter_name_error(name) is None
    assert AdapterSource(name=name, source="/a").name == name


@pytest.mark.parametrize("name", ["a/b/c", "team-a/", "/summarizer", "Team-A/summarizer", "team-a/Summarizer",
                                  "team_a/summarizer", "a:b/c", "-a/b", "a-/b", "a/b.-c", "a/.b", "a//b",
                                  "n" * 64 + "/b", "a/" + "o" * 254, "x" * 129, "-x", "a b"])
def test_names_that_are_refused(name):
    assert adapter_name_error(name) is not None
    with pytest.raises(ValueError, match="adapter name"):
        AdapterSource(name=name, source="/a")


def test_a_manifest_entry_is_refused_alone():
    text = json.dumps({"adapters": [
        {"name": GOOD, "source": "/roots/s"},
        {"name": "team-b/pinned", "source": "/roots/p", "pinned": True},
        {"name": "a/b/c", "source": "/roots/x"},
        {"name": "team-c/no-source"},
        {"name": "team-c/extra", "source": "/roots/e", "ranks": 8},
        42,
        {"name": "team-d/twice", "source": "/roots/1"},
        {"name": "team-d/twice", "source": "/roots/2"},
    ]})
    m = parse_manifest(text, "m.json")
    assert m.error is None
    assert [(e.name, e.source, e.pinned) for e in m.entries] == [(GOOD, "/roots/s", False),
                                                                  ("team-b/pinned", "/roots/p", True)]
    refused = {(f.name, f.source): f.error for f in m.refused}
    assert set(refused) == {("a/b/c", "/roots/x"), ("team-c/no-source", None), ("team-c/extra", "/roots/e"),
                            (None, None), ("team-d/twice", "/roots/1"), ("team-d/twice", "/roots/2")}
    assert "adapters[2]: name: an adapter name with a slash must be <namespace>/<name>" in refused["a/b/c", "/roots/x"]
    assert "adapters[3]: source: Field required" in refused["team-c/no-source", None]
    assert "adapters[4]: ranks: Extra inputs are not permitted" in refused["team-c/extra", "/roots/e"]
    assert refused[None, None] == "m.json: adapters[5] is not a JSON object"
    assert "2 entries name 'team-d/twice': none is loaded" in refused["team-d/twice", "/roots/1"]


@pytest.mark.parametrize("text,error", [
    ("{not json", "m.json: not valid JSON"), ("[]", 'expected a JSON object {"adapters": [...]}'),
    ('{"adapters": {}}', "expected a JSON object"), ('{"adapters": [], "version": 2}', "unknown fields ['version']"),
])
def test_a_manifest_that_is_not_one_loads_nothing(text, error):
    m = parse_manifest(text, "m.json")
    assert (m.entries, m.refused) == ((), ()) and error in m.error


def test_an_empty_manifest_loads_nothing():
    assert parse_manifest("{}") == parse_manifest('{"adapters": []}') == parse_manifest('{"adapters": []}', "x")


# --- a pod starting with a manifest: the real engine --------------------------------------------------


def wait_ready(srv, timeout=300):
    """Poll /ready until it answers 200; the admin listing at that moment, and the 503 bodies seen."""
    not_ready, deadline = [], time.monotonic() + timeout
    while (r := httpx.get(srv.url + "/ready")).status_code != 200:
        assert r.status_code == 503 and time.monotonic() < deadline, r.text
        not_ready.append(r.json())
        time.sleep(0.01)
    return srv.admin.get("/v1/adapters").json(), not_ready


def chat(srv, model, n=8):
    r = httpx.post(srv.url + "/v1/chat/completions", timeout=300, json={
        "model": model, "messages": CHAT, "max_tokens": n, "temperature": 0.0, "ignore_eos": True})
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["message"]["content"]


def complete(srv, model, prompt, n):
    r = httpx.post(srv.url + "/v1/completions", timeout=300, json={
        "model": model, "prompt": prompt, "max_tokens": n, "temperature": 0.0, "ignore_eos": True})
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["text"]


@pytest.fixture(scope="module")
def manifest(adapter_dirs, bad_adapters, tmp_path_factory):
    """The operator's manifest: two good adapters (one pinned) and one entry for each way to fail;
    name -> the error fragment expected for the bad ones."""
    failing = {
        "team-a/broken": (str(bad_adapters["corrupt"][0]), bad_adapters["corrupt"][1]),
        "team-a/too-big": (str(bad_adapters["rank-64"][0]), bad_adapters["rank-64"][1]),
        "team-c/outside": ("/etc", "inside one of the engine's adapter_roots"),
        "team-a/x/y": (str(adapter_dirs["qv-r4"]), "must be <namespace>/<name>"),
        "attn-r8": (str(adapter_dirs["qv-r4"]), "already exists"),  # taken by the config's adapter
    }
    entries = [{"name": GOOD, "source": str(adapter_dirs["attn-r8"]), "pinned": False},
               {"name": "team-b/pinned", "source": str(adapter_dirs["qv-r4"]), "pinned": True},
               *({"name": n, "source": s} for n, (s, _) in failing.items())]
    path = tmp_path_factory.mktemp("configmap") / "adapters.json"
    path.write_text(json.dumps({"adapters": entries}))
    return path, {n: why for n, (_, why) in failing.items()}


@pytest.fixture(scope="module")
def tenant_pod(hf_checkpoint_dir, adapter_dirs, bad_adapters, manifest, tmp_path_factory, lora_kit):
    """A fresh engine, as a restarted pod: attn-r8 from its config (the old way), its tenants'
    adapters from the manifest; served with its admin API. `.ready_listing` is GET /v1/adapters at
    the moment /ready first answered 200, `.not_ready` the 503 bodies before it."""
    from llmop.engine.engine import LLMEngine

    engine = LLMEngine(lora_kit.engine_config(hf_checkpoint_dir, {"attn-r8": adapter_dirs["attn-r8"]}))
    roots = [next(iter(adapter_dirs.values())).parent, bad_adapters["corrupt"][0].parent]
    try:
        with lora_kit.admin_served(engine, tmp_path_factory.mktemp("admin"), roots,
                                   adapter_manifest=str(manifest[0])) as srv:
            srv.ready_listing, srv.not_ready = wait_ready(srv)
            yield srv
    finally:
        engine.shutdown()


def test_the_pod_is_ready_only_with_its_adapters_back(tenant_pod, manifest):
    listing, failures = tenant_pod.ready_listing, manifest[1]
    data = {a["name"]: a for a in listing["data"]}
    assert set(data) == {"attn-r8", GOOD, "team-b/pinned"}
    assert data[GOOD]["state"] in ("cpu", "resident") and data[GOOD]["pinned"] is False
    assert data["team-b/pinned"]["state"] == "resident" and data["team-b/pinned"]["pinned"] is True
    failed = {f["name"]: f for f in listing["failed"]}
    assert set(failed) == set(failures)
    for name, why in failures.items():
        assert why in failed[name]["error"], (name, failed[name])
        assert set(failed[name]) == {"name", "source", "error"}
    assert listing["manifest"] == {"path": str(manifest[0]), "restored": True, "error": None}
    assert all(body == {"ready": False, "draining": False, "restoring_adapters": True}
               for body in tenant_pod.not_ready)


def test_the_tenant_adapter_answers_with_its_own_tokens(tenant_pod, lora_engine, references, lora_kit):
    """By chat, the manifest's adapter answers like the same weights loaded from the config, not like
    the base; by completion, like PEFT with those weights."""
    base = lora_engine.model_name
    tuned = chat(tenant_pod, GOOD)
    assert tuned == chat(tenant_pod, "attn-r8") != chat(tenant_pod, base)
    for i, prompt in enumerate(lora_kit.PROMPTS):
        expect = lora_engine.tokenizer.decode(references[(i, "attn-r8")][0])
        assert complete(tenant_pod, GOOD, prompt, lora_kit.NEW_TOKENS) == expect, prompt
        assert complete(tenant_pod, base, prompt, lora_kit.NEW_TOKENS) == lora_engine.tokenizer.decode(
            references[(i, None)][0]), prompt


def test_models_list_the_restored_adapters_only(tenant_pod, lora_engine, manifest):
    models = [m["id"] for m in httpx.get(tenant_pod.url + "/v1/models").json()["data"]]
    assert models[0] == lora_engine.model_name
    assert set(models[1:]) == {"attn-r8", GOOD, "team-b/pinned"}
    r = httpx.post(tenant_pod.url + "/v1/chat/completions", json={"model": "team-a/broken", "messages": CHAT})
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found", r.text


def test_namespaced_names_through_the_admin_api(tenant_pod, adapter_dirs):
    admin = tenant_pod.admin
    failed = lambda: {f["name"] for f in admin.get("/v1/adapters").json()["failed"]}  # noqa: E731
    # A later successful POST of a failed name clears its failure; DELETE of a failed name forgets it.
    r = admin.post("/v1/adapters", json={"name": "team-a/broken", "source": str(adapter_dirs["mlp-r16"])})
    assert r.status_code == 201 and r.json()["name"] == "team-a/broken", r.text
    assert "team-a/broken" not in failed()
    assert chat(tenant_pod, "team-a/broken") != chat(tenant_pod, GOOD)
    assert admin.delete("/v1/adapters/team-a/too-big").status_code == 204
    assert "team-a/too-big" not in failed() and "team-c/outside" in failed()
    assert admin.delete("/v1/adapters/team-a/too-big").status_code == 404
    # Unload and load again under the namespaced name.
    before = chat(tenant_pod, GOOD)
    assert admin.delete(f"/v1/adapters/{GOOD}").status_code == 204
    assert httpx.post(tenant_pod.url + "/v1/completions", json={"model": GOOD, "prompt": "Hi"}).status_code == 404
    r = admin.post("/v1/adapters", json={"name": GOOD, "source": str(adapter_dirs["attn-r8"])})
    assert r.status_code == 201, r.text
    assert chat(tenant_pod, GOOD) == before
    # Any other slash is a 400 that says what a name may be.
    for name in ("team-a/x/y", "Team-A/summarizer", "team-a/", "a:b/c"):
        r = admin.post("/v1/adapters", json={"name": name, "source": str(adapter_dirs["qv-r4"])})
        assert r.status_code == 400, (name, r.text)
        error = r.json()["error"]
        assert error["param"] == "name" and "<namespace>/<name>" in error["message"], error
    assert admin.delete("/v1/adapters/team-a/broken").status_code == 204


def test_readiness_waits_for_the_restore(lora_engine, adapter_dirs, tmp_path, lora_kit):
    """Without the app's lifespan nothing restores the manifest until the test does: until then /ready
    is 503 with the engine running, and the manifest's adapter is unknown; after it, 200 and served."""
    import asyncio

    from fastapi.testclient import TestClient

    from llmop.engine.lora import admin
    from llmop.engine.server.adapter_restore import restore_adapters

    path = tmp_path / "adapters.json"
    path.write_text(json.dumps({"adapters": [{"name": "team-z/gated", "source": str(adapter_dirs["qv-r4"])}]}))
    app, _ = lora_kit.admin_apps(lora_engine, tmp_path, [adapter_dirs["qv-r4"].parent], adapter_manifest=str(path))
    state, client = app.state.llmop, TestClient(app)  # no `with`: no lifespan
    models = lambda: {m["id"] for m in client.get("/v1/models").json()["data"]}  # noqa: E731
    state.engine.start()
    try:
        time.sleep(0.5)
        r = client.get("/ready")
        assert r.status_code == 503 and r.json()["restoring_adapters"] is True, r.text
        assert "team-z/gated" not in models()
        asyncio.run(restore_adapters(state))
        assert client.get("/ready").status_code == 200
        assert "team-z/gated" in models() and state.manifest.failed == []
        asyncio.run(admin.unload_adapter(state.engine, "team-z/gated"))
    finally:
        state.engine.shutdown()


@pytest.mark.parametrize("content,error", [(None, None), ("{not json", "not valid JSON"),
                                           ("dir", "cannot be read")], ids=["absent", "invalid-json", "directory"])
def test_a_manifest_absent_or_unusable_starts_with_no_adapters(lora_engine, tmp_path, lora_kit, content, error):
    """An absent file is an empty manifest; one that cannot be read or parsed is reported, and the pod
    still becomes ready and serves the base model (and its config's adapters)."""
    path = tmp_path / "adapters.json"
    if content == "dir":
        path.mkdir()
    elif content is not None:
        path.write_text(content)
    with lora_kit.admin_served(lora_engine, tmp_path, [tmp_path], adapter_manifest=str(path)) as srv:
        listing, _ = wait_ready(srv)
        assert {a["name"] for a in listing["data"]} == set(lora_kit.ADAPTERS) and listing["failed"] == []
        assert listing["manifest"]["restored"] is True
        if error is None:
            assert listing["manifest"]["error"] is None
        else:
            assert error in listing["manifest"]["error"] and str(path) in listing["manifest"]["error"]
        assert chat(srv, lora_engine.model_name, n=2)


def test_a_failed_adapter_record_has_the_wire_shape():
    assert FailedAdapter("a/b", "/s", "why").to_json() == {"name": "a/b", "source": "/s", "error": "why"}
