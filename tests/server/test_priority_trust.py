"""`priority` reorders every queue, so it is honoured only from trusted callers: requests that
present the engine's admin credential as a bearer token (the router, the operator). Anyone else
sending a non-default priority gets a 400 naming `priority`; the default (0, or no field) is fine."""

import httpx
import pytest

CHAT = [{"role": "user", "content": "Say hi"}]


def chat_body(engine_server, **extra):
    return {"model": engine_server.state.model_name, "messages": CHAT, "max_completion_tokens": 2, **extra}


def completion_body(engine_server, **extra):
    return {"model": engine_server.state.model_name, "prompt": "Hello", "max_tokens": 2, **extra}


ENDPOINTS = [("/v1/chat/completions", chat_body), ("/v1/completions", completion_body)]


@pytest.mark.parametrize("path,body", ENDPOINTS, ids=["chat", "completions"])
@pytest.mark.parametrize("priority", [-5, 1])
@pytest.mark.parametrize("auth", [None, "Bearer unused", "Bearer test-admin-credential-0123456789x", "Basic x"])
def test_untrusted_priority_is_refused_by_name(engine_server, path, body, priority, auth):
    headers = {"Authorization": auth} if auth else {}
    r = httpx.post(engine_server.url + path, json=body(engine_server, priority=priority), headers=headers,
                   timeout=300)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert (error["param"], error["code"], error["type"]) == ("priority", "untrusted_priority",
                                                              "invalid_request_error")


@pytest.mark.parametrize("path,body", ENDPOINTS, ids=["chat", "completions"])
def test_the_default_priority_needs_no_trust(engine_server, path, body):
    for extra in ({}, {"priority": 0}):
        r = httpx.post(engine_server.url + path, json=body(engine_server, **extra),
                       headers={"Authorization": "Bearer unused"}, timeout=300)
        assert r.status_code == 200, r.text


@pytest.mark.parametrize("path,body", ENDPOINTS, ids=["chat", "completions"])
@pytest.mark.parametrize("priority", [-5, 1])
def test_a_trusted_caller_sets_priority(engine_server, path, body, priority):
    r = httpx.post(engine_server.url + path, json=body(engine_server, priority=priority),
                   headers={"Authorization": f"Bearer {engine_server.admin_token}"}, timeout=300)
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] >= 1


def test_untrusted_priority_is_counted_as_its_own_rejection(engine_server):
    def rejected() -> float:
        from prometheus_client.parser import text_string_to_metric_families

        fams = text_string_to_metric_families(httpx.get(engine_server.url + "/metrics").text)
        return next(s.value for f in fams for s in f.samples
                    if s.name == "llmop_request_rejected_total" and s.labels["reason"] == "untrusted_priority")

    before = rejected()
    httpx.post(engine_server.url + "/v1/completions", json=completion_body(engine_server, priority=3), timeout=300)
    assert rejected() == before + 1
