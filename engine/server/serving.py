"""The flow every generation endpoint shares: admit → run → answer (JSON or SSE).

Endpoints differ only in how prompts are built and how results are shaped; they pass prompts and
a `Format` (completions.py, chat.py) and this module does the rest, in one order: supported
fields, model, prompt length, sampling params and context length, the grammar (compiled here,
off the event loop), then the queue (so a rejected
request never touches the engine). A streaming response starts only after the first token, so
a queue timeout or bad input is still a proper status code; later failures end the stream with
an error event.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import AsyncIterator, Protocol

from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel

from llmop.engine.outputs import RequestOutput, TokenLogprob
from llmop.engine.server.errors import APIError, error_body
from llmop.engine.server.generation import ClientDisconnected, Generation, SubRequest, unless_disconnected
from llmop.engine.server.protocol import PromptTokensDetails, SamplingRequest, Usage
from llmop.engine.server.sampling import check_supported, to_sampling_params
from llmop.engine.server.state import ServerState
from llmop.engine.server.structured import OutputGrammar, compile_or_400


@dataclass
class Choice:
    """The accumulated result of one choice (a non-streaming response is built from these)."""

    index: int
    num_prompt_tokens: int = 0
    num_cached_tokens: int = 0
    text: list[str] = field(default_factory=list)
    num_output_tokens: int = 0
    logprobs: list[TokenLogprob] = field(default_factory=list)
    finish_reason: str | None = None
    stop_reason: str | int | None = None

    def add(self, out: RequestOutput) -> None:
        self.num_prompt_tokens = out.num_prompt_tokens
        self.num_cached_tokens = out.num_cached_tokens
        self.num_output_tokens = out.num_output_tokens
        self.text.append(out.new_text)
        self.logprobs.extend(out.logprobs)
        if out.finished:
            self.finish_reason, self.stop_reason = out.finish_reason, out.stop_reason


class Format(Protocol):
    """How one endpoint shapes its answers."""

    id_prefix: str

    def chunk(self, rid: str, model: str, out: RequestOutput, index: int, first: bool) -> BaseModel: ...

    def usage_chunk(self, rid: str, model: str, usage: Usage) -> BaseModel: ...

    def response(self, rid: str, model: str, choices: list[Choice], usage: Usage) -> BaseModel: ...


def usage_of(choices: list[Choice], prompt_tokens_per_prompt: list[int]) -> Usage:
    """Prompts count once however many choices they have; so do their cached tokens (those of each
    prompt's first choice: the others share its prompt)."""
    prompt = sum(prompt_tokens_per_prompt)
    completion = sum(c.num_output_tokens for c in choices)
    n = len(choices) // max(1, len(prompt_tokens_per_prompt))
    cached = sum(c.num_cached_tokens for c in choices[::n]) if n else 0
    return Usage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion,
                 prompt_tokens_details=PromptTokensDetails(cached_tokens=cached))


def _sse(obj) -> str:
    data = obj.model_dump_json() if isinstance(obj, BaseModel) else json.dumps(obj)
    return f"data: {data}\n\n"


async def serve(request: Request, state: ServerState, body: SamplingRequest, prompts: list[list[int]],
                fmt: Format, grammar: OutputGrammar | None = None) -> Response:
    """Answer a generation request for `prompts` (token ids), n choices each, whose output
    matches `grammar` if given."""
    state.check_open()
    check_supported(body)
    state.check_priority(body.priority, request)
    target = state.resolve_model(body.model)
    subs: list[SubRequest] = []
    for p, ids in enumerate(prompts):
        if not ids:
            raise APIError(400, "the prompt is empty", reason="invalid_request", param="prompt")
        if len(ids) > state.max_prompt_tokens:
            raise APIError(400, f"the prompt has {len(ids)} tokens, more than the limit of "
                                f"{state.max_prompt_tokens} by {len(ids) - state.max_prompt_tokens}",
                           reason="prompt_too_long", param="prompt", code="context_length_exceeded")
        first = len(subs)  # the prompt's first choice computes it; the others share it
        subs += [SubRequest(ids, to_sampling_params(body, len(ids), state.max_model_len, state.vocab_size, choice,
                                                    grammar.spec if grammar else None),
                            shares_prompt_of=first if choice else None)
                 for choice in range(body.n)]
    if grammar is not None:
        await compile_or_400(state, grammar)
    ticket = state.admit(len(subs))
    rid = f"{fmt.id_prefix}-{uuid.uuid4().hex}"
    gen = Generation(state, rid, subs, target, body.priority, ticket, body.cache_salt)
    model = target.name
    prompt_tokens = [len(ids) for ids in prompts]
    outputs = gen.stream()
    try:
        if body.stream:
            first = await unless_disconnected(request, anext(outputs))
        else:
            choices = await unless_disconnected(request, _collect(outputs, len(subs)))
    except ClientDisconnected:
        await gen.aclose()
        return Response(status_code=499)
    except BaseException:
        await gen.aclose()
        raise
    if not body.stream:
        await gen.aclose()
        return JSONResponse(fmt.response(rid, model, choices, usage_of(choices, prompt_tokens)).model_dump(mode="json"))
    include_usage = bool(body.stream_options and body.stream_options.include_usage)
    return StreamingResponse(_events(gen, outputs, first, fmt, rid, model, len(subs), prompt_tokens, include_usage),
                             media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


async def _collect(outputs: AsyncIterator[tuple[int, RequestOutput]], n: int) -> list[Choice]:
    choices = [Choice(i) for i in range(n)]
    async for index, out in outputs:
        choices[index].add(out)
    return choices


async def _events(gen: Generation, outputs, first, fmt: Format, rid: str, model: str, n: int,
                  prompt_tokens: list[int], include_usage: bool) -> AsyncIterator[str]:
    """The SSE body; if the client goes away, starlette cancels this and `finally` aborts."""
    choices = [Choice(i) for i in range(n)]
    seen: set[int] = set()
    try:
        item = first
        while True:
            index, out = item
            choices[index].add(out)
            yield _sse(fmt.chunk(rid, model, out, index, index not in seen))
            seen.add(index)
            try:
                item = await anext(outputs)
            except StopAsyncIteration:
                break
        if include_usage:
            yield _sse(fmt.usage_chunk(rid, model, usage_of(choices, prompt_tokens)))
    except APIError as e:  # after the headers went out: the error travels as the last event
        gen.state.metrics.reject(e.reason)
        yield _sse(error_body(e.status, e.message, e.type, e.param, e.code))
    finally:
        await outputs.aclose()
        await gen.aclose()
    yield "data: [DONE]\n\n"
