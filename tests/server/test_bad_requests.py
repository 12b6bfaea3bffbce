"""Malformed and hostile requests: each gets the right 4xx in an OpenAI error body, leaves no
state behind, and the very next normal request still succeeds."""

import json

import httpx
import pytest

CMPL, CHAT = "/v1/completions", "/v1/chat/completions"
MSGS = [{"role": "user", "content": "hi"}]

# (id, path, body (dict, or raw bytes), status, error `param` expected or None)
CASES = [
    ("invalid-json", CMPL, b'{"prompt": "x",', 400, None),
    ("not-an-object", CMPL, b"[1, 2, 3]", 400, None),
    ("missing-prompt", CMPL, {"max_tokens": 2}, 400, "prompt"),
    ("prompt-wrong-type", CMPL, {"prompt": 42}, 400, "prompt"),
    ("temperature-string", CMPL, {"prompt": "x", "temperature": "hot"}, 400, "temperature"),
    ("temperature-negative", CMPL, {"prompt": "x", "temperature": -0.5}, 400, "temperature"),
    ("top-p-zero", CMPL, {"prompt": "x", "top_p": 0.0}, 400, "top_p"),
    ("top-p-above-one", CMPL, {"prompt": "x", "top_p": 1.5}, 400, "top_p"),
    ("max-tokens-zero", CMPL, {"prompt": "x", "max_tokens": 0}, 400, "max_tokens"),
    ("max-tokens-string", CMPL, {"prompt": "x", "max_tokens": "10"}, 400, "max_tokens"),
    ("max-tokens-huge", CMPL, {"prompt": "x", "max_tokens": 10**9}, 400, "max_tokens"),
    ("prompt-200k-tokens", CMPL, {"prompt": "hi " * 200_000, "max_tokens": 1}, 400, "prompt"),
    ("body-too-large", CMPL, {"prompt": "x" * (5 << 20)}, 413, None),
    ("unknown-model", CMPL, {"prompt": "x", "model": "gpt-17"}, 404, "model"),
    ("token-id-out-of-vocab", CMPL, {"prompt": [1, 2, 10**9]}, 400, "prompt"),
    ("logprobs-too-many", CMPL, {"prompt": "x", "logprobs": 50}, 400, "logprobs"),
    ("presence-penalty-range", CMPL, {"prompt": "x", "presence_penalty": 5}, 400, "presence_penalty"),
    ("empty-stop-string", CMPL, {"prompt": "x", "stop": [""]}, 400, "stop"),
    ("n-zero", CMPL, {"prompt": "x", "n": 0}, 400, "n"),
    ("min-tokens-over-max", CMPL, {"prompt": "x", "max_tokens": 2, "min_tokens": 5}, 400, "min_tokens"),
    ("seed-float", CMPL, {"prompt": "x", "seed": 1.5}, 400, "seed"),
    ("stream-not-bool", CMPL, {"prompt": "x", "stream": "yes"}, 400, "stream"),
    ("logit-bias-out-of-vocab", CMPL, {"prompt": "x", "logit_bias": {"49152": 5}}, 400, "logit_bias"),
    ("logit-bias-negative-id", CMPL, {"prompt": "x", "logit_bias": {"-1": 5}}, 400, "logit_bias"),
    ("logit-bias-not-an-id", CMPL, {"prompt": "x", "logit_bias": {"hello": 5}}, 400, "logit_bias"),
    ("logit-bias-not-a-number", CMPL, {"prompt": "x", "logit_bias": {"5": "up"}}, 400, "logit_bias.5"),
    ("stop-token-ids-out-of-vocab", CMPL, {"prompt": "x", "stop_token_ids": [10**6]}, 400, "stop_token_ids"),
    ("stop-token-ids-negative", CMPL, {"prompt": "x", "stop_token_ids": [-1]}, 400, "stop_token_ids"),
    ("token-id-negative", CMPL, {"prompt": [1, -5]}, 400, "prompt"),
    ("token-id-batch-out-of-vocab", CMPL, {"prompt": [[1, 2], [3, 10**9]]}, 400, "prompt"),
    ("seed-2-to-the-70", CMPL, {"prompt": "x", "seed": 2**70}, 400, "seed"),
    ("top-k-2-to-the-70", CMPL, {"prompt": "x", "top_k": 2**70}, 400, "top_k"),
    ("temperature-nan", CMPL, b'{"prompt": "x", "temperature": NaN}', 400, "temperature"),
    ("unknown-field", CMPL, {"prompt": "x", "frobnicate": 1}, 400, "frobnicate"),
    ("unknown-nested-field", CHAT, {"messages": [{"role": "user", "content": "hi", "mood": "ok"}]}, 400,
     "messages.0.mood"),
    ("unknown-stream-option", CMPL, {"prompt": "x", "stream_options": {"include_usage": True, "x": 1}}, 400,
     "stream_options.x"),
    ("response-format-unknown-type", CHAT, {"messages": MSGS, "response_format": {"type": "xml"}}, 400,
     "response_format.type"),
    ("response-format-malformed-schema", CHAT, {"messages": MSGS, "response_format": {
        "type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "strnig"}}}}, 400,
     "response_format.json_schema.schema"),
    ("response-format-schema-contradiction", CMPL, {"prompt": "x", "response_format": {
        "type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "integer", "minimum": 5,
                                                                        "maximum": 2}}}}, 400,
     "response_format.json_schema.schema"),
    ("structured-outputs-bad-regex", CMPL, {"prompt": "x", "structured_outputs": {"regex": "a(b"}}, 400,
     "structured_outputs.regex"),
    ("structured-outputs-two-at-once", CMPL, {"prompt": "x", "structured_outputs": {"regex": "a", "choice": ["a"]}},
     400, "structured_outputs"),
    ("structured-outputs-empty-choice", CMPL, {"prompt": "x", "structured_outputs": {"choice": []}}, 400,
     "structured_outputs.choice"),
    ("response-format-and-structured-outputs", CMPL, {"prompt": "x", "response_format": {"type": "json_object"},
                                                      "structured_outputs": {"regex": "a"}}, 400, "structured_outputs"),
    ("store-true", CHAT, {"messages": MSGS, "store": True}, 400, "store"),
    ("audio-output", CHAT, {"messages": MSGS, "audio": {"voice": "alloy", "format": "wav"}}, 400, "audio"),
    ("modalities-audio", CHAT, {"messages": MSGS, "modalities": ["text", "audio"]}, 400, "modalities"),
    ("reasoning-effort", CHAT, {"messages": MSGS, "reasoning_effort": "high"}, 400, "reasoning_effort"),
    ("image-content-part", CHAT, {"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:,"}}]}]}, 400, "messages.0.content.0.type"),
    ("tool-choice-unknown-function", CHAT, {"messages": MSGS, "tools": [
        {"type": "function", "function": {"name": "f"}}], "tool_choice": {"type": "function", "function": {"name": "g"}}},
     400, "tool_choice"),
    ("tool-choice-required-without-tools", CHAT, {"messages": MSGS, "tool_choice": "required"}, 400, "tool_choice"),
    ("tool-parameters-malformed", CHAT, {"messages": MSGS, "tool_choice": "required", "tools": [
        {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
            "a": {"type": "strnig"}}}}}]}, 400, "tools"),
    ("tool-message-without-id", CHAT, {"messages": [*MSGS, {"role": "tool", "content": "42"}]}, 400,
     "messages.1.tool_call_id"),
    ("tool-call-arguments-not-json", CHAT, {"messages": [*MSGS, {"role": "assistant", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{oops"}}]}]}, 400,
     "messages.1.tool_calls.0.function.arguments"),
    ("empty-messages", CHAT, {"messages": []}, 400, "messages"),
    ("messages-not-a-list", CHAT, {"messages": "hello"}, 400, "messages"),
    ("bad-role", CHAT, {"messages": [{"role": "wizard", "content": "hi"}]}, 400, "messages.0.role"),
    ("chat-top-logprobs-range", CHAT, {"messages": MSGS, "logprobs": True, "top_logprobs": 30}, 400, "top_logprobs"),
    ("chat-max-completion-huge", CHAT, {"messages": MSGS, "max_completion_tokens": 10**6}, 400,
     "max_completion_tokens"),
    ("chat-unknown-model", CHAT, {"messages": MSGS, "model": "nope"}, 404, "model"),
    ("tokenize-prompt-and-messages", "/tokenize", {"prompt": "x", "messages": MSGS}, 400, "prompt"),
    ("tokenize-neither", "/tokenize", {}, 400, "prompt"),
    ("tokenize-unknown-model", "/tokenize", {"prompt": "x", "model": "nope"}, 404, "model"),
    ("detokenize-out-of-vocab", "/detokenize", {"tokens": [1, -3]}, 400, "tokens"),
    ("detokenize-not-ints", "/detokenize", {"tokens": ["a"]}, 400, "tokens.0"),
]


def _post(url, path, body):
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(url + path, content=raw, headers={"content-type": "application/json"}, timeout=120)


def _assert_error_body(r, status):
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert isinstance(err["message"], str) and err["message"]
    assert isinstance(err["type"], str) and err["type"]
    return err


@pytest.mark.parametrize("path,body,status,param", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_rejected_with_openai_error_and_no_state_left(engine_server, path, body, status, param):
    state = engine_server.state
    err = _assert_error_body(_post(engine_server.url, path, body), status)
    assert err["param"] == param
    assert state.num_in_flight == 0 and state.num_queued == 0
    s = engine_server.fresh_stats()
    assert s.num_waiting == s.num_running == 0 and s.num_free_blocks == s.num_total_blocks
    ok = _post(engine_server.url, CMPL, {"prompt": "Hello", "max_tokens": 1})
    assert ok.status_code == 200 and ok.json()["choices"][0]["finish_reason"] in ("length", "stop")


def test_context_overflow_says_by_how_much(engine_server):
    err = _assert_error_body(_post(engine_server.url, CMPL, {"prompt": [1] * 48, "max_tokens": 2048 - 40}), 400)
    assert "by 8 tokens" in err["message"] and err["code"] == "context_length_exceeded"


def test_unknown_route_and_wrong_method_are_openai_errors(engine_server):
    _assert_error_body(httpx.get(engine_server.url + "/v1/nothing-here"), 404)
    _assert_error_body(httpx.get(engine_server.url + CMPL), 405)


def test_the_sdk_maps_them_to_its_exceptions(openai_client):
    import openai

    with pytest.raises(openai.BadRequestError) as e:
        openai_client.completions.create(model="SmolLM2-135M-Instruct", prompt="x", temperature=-1)
    assert e.value.body["param"] == "temperature"
    with pytest.raises(openai.NotFoundError):
        openai_client.chat.completions.create(model="nope", messages=MSGS)
