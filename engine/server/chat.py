"""POST /v1/chat/completions: messages rendered with the model's chat template, chat shapes out.

With tools offered, each choice's text goes through the tool format's parser (streamed or whole):
calls become `tool_calls` (ids `call_…`, arguments as JSON text) and the finish reason
"tool_calls"; the rest stays `content`.
"""

from __future__ import annotations

import uuid

from fastapi import APIRouter, Depends, Request
from starlette.concurrency import run_in_threadpool

from llmop.engine.outputs import RequestOutput
from llmop.engine.server.errors import ERROR_RESPONSES, APIError
from llmop.engine.server.logprobs import chat_logprobs
from llmop.engine.server.protocol import (AssistantMessage, ChatChoice, ChatChunkChoice, ChatCompletionChunk,
                                          ChatCompletionRequest, ChatCompletionResponse, ChatMessage,
                                          DeltaFunctionCall, DeltaMessage, DeltaToolCall, ResponseFunctionCall,
                                          ResponseToolCall, Usage)
from llmop.engine.server.serving import Choice, serve
from llmop.engine.server.state import ServerState, get_state
from llmop.engine.server.structured import output_grammar
from llmop.engine.server.tool_formats import ParsedCall, StreamParser, parse_tool_calls
from llmop.engine.server.tools import NO_TOOLS, ToolPlan, template_inputs, tool_plan

router = APIRouter()


def _call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def _finish_reason(reason: str | None, has_calls: bool) -> str | None:
    return "tool_calls" if has_calls and reason == "stop" else reason


class ChatFormat:
    id_prefix = "chatcmpl"

    def __init__(self, state: ServerState, want_logprobs: bool, plan: ToolPlan | None = None):
        self.tokenizer = state.tokenizer
        self.want_logprobs = want_logprobs
        self.plan = plan if plan is not None and plan.offered else None
        self._parsers: dict[int, StreamParser] = {}
        self._num_calls: dict[int, int] = {}

    def chunk(self, rid: str, model: str, out: RequestOutput, index: int, first: bool) -> ChatCompletionChunk:
        text, calls = out.new_text, []
        if self.plan is not None:
            parser = self._parsers.setdefault(index, StreamParser(self.plan.fmt))
            text, calls = parser.feed(text)
            if out.finished:
                text += parser.finish()
        delta = DeltaMessage(role="assistant" if first else None, content=text if text or not calls else None,
                             tool_calls=self._deltas(index, calls) or None)
        lps = chat_logprobs(self.tokenizer, out.logprobs) if self.want_logprobs else None
        reason = _finish_reason(out.finish_reason, self._num_calls.get(index, 0) > 0)
        return ChatCompletionChunk(id=rid, model=model, choices=[ChatChunkChoice(
            index=index, delta=delta, logprobs=lps, finish_reason=reason, stop_reason=out.stop_reason)])

    def _deltas(self, index: int, calls: list[ParsedCall]) -> list[DeltaToolCall]:
        deltas = []
        for call in calls:
            k = self._num_calls.get(index, 0)
            self._num_calls[index] = k + 1
            deltas.append(DeltaToolCall(index=k, id=_call_id(), type="function",
                                        function=DeltaFunctionCall(name=call.name, arguments=call.arguments)))
        return deltas

    def usage_chunk(self, rid: str, model: str, usage: Usage) -> ChatCompletionChunk:
        return ChatCompletionChunk(id=rid, model=model, choices=[], usage=usage)

    def _message(self, text: str) -> tuple[AssistantMessage, bool]:
        if self.plan is None:
            return AssistantMessage(content=text), False
        content, calls = parse_tool_calls(self.plan.fmt, text)
        if not calls:
            return AssistantMessage(content=text), False
        return AssistantMessage(content=content, tool_calls=[
            ResponseToolCall(id=_call_id(), function=ResponseFunctionCall(name=c.name, arguments=c.arguments))
            for c in calls]), True

    def response(self, rid: str, model: str, choices: list[Choice], usage: Usage) -> ChatCompletionResponse:
        out = []
        for c in choices:
            message, has_calls = self._message("".join(c.text))
            out.append(ChatChoice(
                index=c.index, message=message, finish_reason=_finish_reason(c.finish_reason, has_calls),
                stop_reason=c.stop_reason,
                logprobs=chat_logprobs(self.tokenizer, c.logprobs) if self.want_logprobs else None))
        return ChatCompletionResponse(id=rid, model=model, usage=usage, choices=out)


def render_chat(state: ServerState, messages: list[ChatMessage], plan: ToolPlan | None = None) -> list[int]:
    """Token ids of `messages` (and the tools `plan` offers) under the model's chat template,
    ready for the assistant's turn."""
    template = state.tokenizer.chat_template
    if template is None:
        raise APIError(400, "this model has no chat template; use /v1/completions", reason="unsupported",
                       param="messages")
    msgs, tools = template_inputs(messages, plan or NO_TOOLS, template.supports_tools)
    try:
        return state.tokenizer.apply_chat_template(msgs, tools=tools)
    except ValueError as e:
        raise APIError(400, str(e), reason="unsupported", param="messages") from None
    except Exception as e:  # jinja2.TemplateError: the template refused these messages
        raise APIError(400, f"the chat template rejected the messages: {e}", reason="invalid_request",
                       param="messages") from None


@router.post("/v1/chat/completions", responses={
    200: {"model": ChatCompletionResponse, "content": {"text/event-stream": {}}}, **ERROR_RESPONSES})
async def create_chat_completion(body: ChatCompletionRequest, request: Request,
                                 state: ServerState = Depends(get_state)):
    state.check_open()
    state.resolve_model(body.model)  # an unknown model is refused before any templating
    plan = tool_plan(body)
    grammar = plan.grammar() or output_grammar(body)
    prompt = await run_in_threadpool(render_chat, state, body.messages, plan)
    return await serve(request, state, body, [prompt], ChatFormat(state, body.logprobs, plan), grammar)
