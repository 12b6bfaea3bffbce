"""Structured output through the official SDK: `chat.completions.parse` with pydantic models
returns parsed objects whose JSON validates against the schema the SDK sent, streamed and not;
the completions endpoint takes response_format and the regex/choice extension."""

import enum
import json
import re
from typing import Literal, Optional

import jsonschema
import pytest
from openai.lib._pydantic import to_strict_json_schema
from pydantic import BaseModel, Field

MODEL = "SmolLM2-135M-Instruct"
Short = Field(max_length=24)


class Person(BaseModel):
    name: str = Short
    age: int = Field(ge=0, le=120)


class Color(str, enum.Enum):
    red = "red"
    green = "green"
    blue = "blue"


class Paint(BaseModel):
    color: Color
    hex: str = Field(pattern=r"^#[0-9a-f]{6}$")


class Address(BaseModel):
    street: str = Short
    city: str = Short
    zip: str = Field(pattern=r"^[0-9]{5}$")


class Company(BaseModel):
    name: str = Short
    address: Address
    employees: list[Person] = Field(max_length=3)


class Scores(BaseModel):
    values: list[int] = Field(min_length=1, max_length=5)
    mean: float = Field(ge=0, le=100)


class Profile(BaseModel):
    username: str = Field(pattern=r"^[a-z]{3,12}$")
    nickname: Optional[str] = Field(default=None, max_length=16)
    verified: bool


class Reading(BaseModel):
    confidence: float = Field(ge=0.0, le=1.0)
    date: str = Field(pattern=r"^20[0-9]{2}-[01][0-9]-[0-3][0-9]$")


class Task(BaseModel):
    title: str = Short
    done: bool


class TodoList(BaseModel):
    owner: str = Short
    tasks: list[Task] = Field(min_length=1, max_length=3)


class Verdict(BaseModel):
    label: Literal["positive", "negative", "neutral"]
    stars: int = Field(ge=1, le=5)


class Measurement(BaseModel):
    value: int | str
    unit: Literal["kg", "m", "s"]


class Inventory(BaseModel):
    sku: str = Field(pattern=r"^[A-Z]{3}-[0-9]{4}$")
    colors: list[Color] = Field(max_length=3)
    price: float = Field(ge=0, le=1000)
    note: Optional[str] = Field(default=None, max_length=20)


class Trip(BaseModel):
    origin: Address
    destination: Address
    travelers: list[Person] = Field(min_length=1, max_length=2)


SCHEMAS = [Person, Paint, Company, Scores, Profile, Reading, TodoList, Verdict, Measurement, Inventory, Trip]
ASK = [{"role": "user", "content": "Give me an example as JSON."}]


def _check(model_cls, message):
    assert message.parsed is not None and isinstance(message.parsed, model_cls)
    jsonschema.validate(json.loads(message.content), to_strict_json_schema(model_cls))


@pytest.fixture(scope="module")
def parsed(engine_server):
    """Every schema parsed and stream-parsed, plus n=3 choices, all sent at once (the engine
    batches them: the machine is small). {(schema name, "whole" | "stream" | "n"): completion}."""
    import asyncio

    import openai

    client = openai.AsyncOpenAI(base_url=engine_server.url + "/v1", api_key="unused", max_retries=0, timeout=1200)

    async def whole(model_cls):
        return await client.chat.completions.parse(model=MODEL, messages=ASK, response_format=model_cls,
                                                   max_completion_tokens=400, temperature=0)

    async def stream(model_cls):
        async with client.chat.completions.stream(model=MODEL, messages=ASK, response_format=model_cls,
                                                  max_completion_tokens=400, temperature=0.7, seed=5) as s:
            async for _ in s:
                pass
            return await s.get_final_completion()

    async def n_choices():
        return await client.chat.completions.parse(model=MODEL, messages=ASK, response_format=Verdict, n=3,
                                                   temperature=1.0, seed=11, max_completion_tokens=100)

    async def main():
        jobs = {(m.__name__, kind): fn(m) for m in SCHEMAS for kind, fn in (("whole", whole), ("stream", stream))}
        jobs[("Verdict", "n")] = n_choices()
        return dict(zip(jobs, await asyncio.gather(*jobs.values())))

    return asyncio.run(main())


@pytest.mark.parametrize("kind", ["whole", "stream"])
@pytest.mark.parametrize("model_cls", SCHEMAS, ids=[m.__name__ for m in SCHEMAS])
def test_parse_returns_a_valid_object(parsed, model_cls, kind):
    r = parsed[(model_cls.__name__, kind)]
    assert r.choices[0].finish_reason == "stop"
    _check(model_cls, r.choices[0].message)


def test_n_choices_each_follow_the_schema(parsed):
    r = parsed[("Verdict", "n")]
    assert len(r.choices) == 3
    for c in r.choices:
        _check(Verdict, c.message)


def test_json_object_on_both_endpoints(openai_client):
    chat = openai_client.chat.completions.create(model=MODEL, messages=ASK, max_completion_tokens=200,
                                                 temperature=0, response_format={"type": "json_object"})
    assert isinstance(json.loads(chat.choices[0].message.content), dict)
    cmpl = openai_client.completions.create(model=MODEL, prompt="A JSON object:", max_tokens=200, temperature=0,
                                            extra_body={"response_format": {"type": "json_object"}})
    assert cmpl.choices[0].finish_reason == "stop" and isinstance(json.loads(cmpl.choices[0].text), dict)


def test_completions_json_schema_regex_and_choice(openai_client):
    schema = to_strict_json_schema(Reading)
    r = openai_client.completions.create(model=MODEL, prompt="Reading:", max_tokens=100, temperature=0, extra_body={
        "response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": schema, "strict": True}}})
    jsonschema.validate(json.loads(r.choices[0].text), schema)
    pattern = r"\(?[0-9]{3}\)? [0-9]{3}-[0-9]{4}"
    r = openai_client.completions.create(model=MODEL, prompt="Call me at", max_tokens=30, temperature=0,
                                         extra_body={"structured_outputs": {"regex": pattern}})
    assert re.fullmatch(pattern, r.choices[0].text) and r.choices[0].finish_reason == "stop"
    chunks = list(openai_client.completions.create(
        model=MODEL, prompt="Is water wet? Answer:", max_tokens=10, temperature=0, stream=True,
        extra_body={"structured_outputs": {"choice": ["Yes, it is", "No"]}}))
    assert "".join(c.choices[0].text for c in chunks) in ("Yes, it is", "No")
