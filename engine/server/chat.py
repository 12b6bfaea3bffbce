"""POST /v1/chat/completions: messages rendered with the model's chat template, chat shapes out."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from starlette.concurrency import run_in_threadpool

from llmop.engine.outputs import RequestOutput
from llmop.engine.server.errors import APIError
from llmop.engine.server.logprobs import chat_logprobs
from llmop.engine.server.protocol import (AssistantMessage, ChatChoice, ChatChunkChoice, ChatCompletionChunk,
                                          ChatCompletionRequest, ChatCompletionResponse, ChatMessage,
                                          DeltaMessage, Usage)
from llmop.engine.server.serving import Choice, serve
from llmop.engine.server.state import ServerState, get_state

router = APIRouter()


class ChatFormat:
    id_prefix = "chatcmpl"

    def __init__(self, state: ServerState, want_logprobs: bool):
        self.tokenizer = state.tokenizer
        self.want_logprobs = want_logprobs

    def chunk(self, rid: str, model: str, out: RequestOutput, index: int, first: bool) -> ChatCompletionChunk:
        delta = DeltaMessage(role="assistant" if first else None, content=out.new_text)
        lps = chat_logprobs(self.tokenizer, out.logprobs) if self.want_logprobs else None
        return ChatCompletionChunk(id=rid, model=model, choices=[ChatChunkChoice(
            index=index, delta=delta, logprobs=lps, finish_reason=out.finish_reason, stop_reason=out.stop_reason)])

    def usage_chunk(self, rid: str, model: str, usage: Usage) -> ChatCompletionChunk:
        return ChatCompletionChunk(id=rid, model=model, choices=[], usage=usage)

    def response(self, rid: str, model: str, choices: list[Choice], usage: Usage) -> ChatCompletionResponse:
        return ChatCompletionResponse(id=rid, model=model, usage=usage, choices=[ChatChoice(
            index=c.index, message=AssistantMessage(content="".join(c.text)), finish_reason=c.finish_reason,
            stop_reason=c.stop_reason,
            logprobs=chat_logprobs(self.tokenizer, c.logprobs) if self.want_logprobs else None)
            for c in choices])


def render_chat(state: ServerState, messages: list[ChatMessage]) -> list[int]:
    """Token ids of `messages` under the model's chat template, ready for the assistant's turn."""
    if not messages:
        raise APIError(400, "messages must contain at least one message", reason="invalid_request", param="messages")
    try:
        return state.tokenizer.apply_chat_template([{"role": m.role, "content": m.text()} for m in messages])
    except ValueError as e:
        raise APIError(400, str(e), reason="unsupported", param="messages") from None
    except Exception as e:  # jinja2.TemplateError: the template refused these messages
        raise APIError(400, f"the chat template rejected the messages: {e}", reason="invalid_request",
                       param="messages") from None


@router.post("/v1/chat/completions")
async def create_chat_completion(body: ChatCompletionRequest, request: Request,
                                 state: ServerState = Depends(get_state)):
    state.check_open()
    state.resolve_model(body.model)  # an unknown model is refused before any templating
    prompt = await run_in_threadpool(render_chat, state, body.messages)
    return await serve(request, state, body, [prompt], ChatFormat(state, body.logprobs))
