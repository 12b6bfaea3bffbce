"""Tool calling through the official SDK: forced calls ("required", a named function) come back as
tool_calls whose arguments validate against each tool's schema, streamed and not; a history with
an assistant call and a tool result is accepted and rendered; auto-mode output is content or calls."""

import json

import jsonschema
import openai
import pytest
from pydantic import BaseModel, Field

MODEL = "SmolLM2-135M-Instruct"
ASK = [{"role": "user", "content": "What is the weather in Paris, and what is 2 + 3?"}]


class GetWeather(BaseModel):
    """Current weather for a city."""

    city: str = Field(max_length=20)
    unit: str = Field(pattern=r"^(celsius|fahrenheit)$")


class Add(BaseModel):
    """Add two integers."""

    a: int = Field(ge=-1000, le=1000)
    b: int = Field(ge=-1000, le=1000)


TOOLS = [openai.pydantic_function_tool(GetWeather, name="get_weather"), openai.pydantic_function_tool(Add, name="add")]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}


def _check_calls(calls, allowed=tuple(SCHEMAS)):
    assert calls
    for call in calls:
        assert call.id.startswith("call_") and call.type == "function" and call.function.name in allowed
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])


NAMED = {name: {"type": "function", "function": {"name": name}} for name in SCHEMAS}


@pytest.fixture(scope="module")
def answers(engine_server):
    """All the requests below sent at once (the engine batches them: the machine is small)."""
    import asyncio

    client = openai.AsyncOpenAI(base_url=engine_server.url + "/v1", api_key="unused", max_retries=0, timeout=1200)

    def create(**kw):
        return client.chat.completions.create(**{"model": MODEL, "messages": ASK, "tools": TOOLS,
                                                 "max_completion_tokens": 200, "temperature": 0, **kw})

    async def helper_stream(choice):
        async with client.chat.completions.stream(model=MODEL, messages=ASK, tools=TOOLS, tool_choice=choice,
                                                  max_completion_tokens=200, temperature=0) as s:
            return await s.get_final_completion()

    async def raw_stream():
        return [c async for c in await create(tool_choice="required", stream=True)]

    async def main():
        jobs = {"required": create(tool_choice="required"),
                "single": create(tool_choice="required", parallel_tool_calls=False, temperature=0.9, seed=3),
                "raw-stream": raw_stream(), "none": create(tool_choice="none", max_completion_tokens=5),
                "no-tools": client.chat.completions.create(model=MODEL, messages=ASK, max_completion_tokens=5,
                                                           temperature=0)}
        for name, choice in NAMED.items():
            jobs[f"named-{name}"] = create(tool_choice=choice)
            jobs[f"named-stream-{name}"] = helper_stream(choice)
        for seed in range(3):
            jobs[f"auto-{seed}"] = create(max_completion_tokens=60, temperature=1.0, seed=seed)
        return dict(zip(jobs, await asyncio.gather(*jobs.values())))

    return asyncio.run(main())


def test_required_gives_valid_calls(answers):
    choice = answers["required"].choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    _check_calls(choice.message.tool_calls)


def test_required_without_parallel_calls_gives_one(answers):
    calls = answers["single"].choices[0].message.tool_calls
    assert len(calls) == 1
    _check_calls(calls)


@pytest.mark.parametrize("name", list(SCHEMAS))
def test_a_named_function_is_called_streamed_and_not(answers, name):
    whole = answers[f"named-{name}"].choices[0]
    _check_calls(whole.message.tool_calls, (name,))
    assert len(whole.message.tool_calls) == 1 and whole.finish_reason == "tool_calls"
    # The SDK's stream helper reassembled the deltas and parsed the arguments with the pydantic model.
    streamed = answers[f"named-stream-{name}"].choices[0]
    assert streamed.finish_reason == "tool_calls"
    _check_calls(streamed.message.tool_calls, (name,))
    assert streamed.message.tool_calls[0].function.arguments == whole.message.tool_calls[0].function.arguments
    assert isinstance(streamed.message.tool_calls[0].function.parsed_arguments, (GetWeather, Add))


def test_raw_stream_deltas(answers):
    chunks = answers["raw-stream"]
    deltas = [tc for c in chunks for tc in (c.choices[0].delta.tool_calls or [])]
    assert deltas and [d.index for d in deltas] == list(range(len(deltas)))
    assert all(d.id.startswith("call_") and d.function.name in SCHEMAS for d in deltas)
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_tool_result_round_trip(answers, openai_client, engine_server):
    message = answers["named-add"].choices[0].message
    call = message.tool_calls[0]
    history = [*ASK, message, {"role": "tool", "tool_call_id": call.id, "content": "5"}]
    second = openai_client.chat.completions.create(model=MODEL, messages=history, tools=TOOLS,
                                                   max_completion_tokens=8, temperature=0)
    assert second.choices[0].finish_reason in ("stop", "length", "tool_calls")
    # What the model saw: the template has no `tools` variable, so the call and the result are in
    # the Hermes format's words, and the tools are listed in a system message.
    from llmop.engine.server.chat import render_chat
    from llmop.engine.server.protocol import ChatCompletionRequest
    from llmop.engine.server.tools import tool_plan

    req = ChatCompletionRequest.model_validate({"messages": [*ASK, message.model_dump(exclude_none=True),
                                                             history[-1]], "tools": TOOLS}, strict=False)
    text = engine_server.engine.tokenizer.decode(render_chat(engine_server.state, req.messages, tool_plan(req)),
                                                 skip_special_tokens=False)
    assert "<tools>" in text and '"name": "get_weather"' in text
    assert f'<tool_call>\n{{"name": "add", "arguments": {call.function.arguments}}}\n</tool_call>' in text
    assert "<|im_start|>tool\n<tool_response>\n5\n</tool_response><|im_end|>" in text


def test_auto_gives_content_or_valid_calls(answers):
    for seed in range(3):
        r = answers[f"auto-{seed}"]
        m = r.choices[0].message
        if m.tool_calls:
            assert r.choices[0].finish_reason == "tool_calls"
            assert all(isinstance(json.loads(c.function.arguments), dict) for c in m.tool_calls)
        else:
            assert m.content is not None and r.choices[0].finish_reason in ("stop", "length")


def test_tool_choice_none_sends_no_tools(answers):
    r, plain = answers["none"], answers["no-tools"]
    assert r.usage.prompt_tokens == plain.usage.prompt_tokens and r.choices[0].message.tool_calls is None
