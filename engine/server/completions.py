"""POST /v1/completions: text (or token ids) in, text out, in the legacy completions shape."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from starlette.concurrency import run_in_threadpool

from llmop.engine.outputs import RequestOutput
from llmop.engine.server.errors import ERROR_RESPONSES, APIError
from llmop.engine.server.logprobs import completion_logprobs
from llmop.engine.server.protocol import CompletionChoice, CompletionRequest, CompletionResponse, Usage
from llmop.engine.server.serving import Choice, serve
from llmop.engine.server.state import ServerState, get_state
from llmop.engine.server.structured import output_grammar

router = APIRouter()


class CompletionFormat:
    id_prefix = "cmpl"

    def __init__(self, state: ServerState, want_logprobs: bool):
        self.tokenizer = state.tokenizer
        self.want_logprobs = want_logprobs
        self._offsets: dict[int, int] = {}

    def chunk(self, rid: str, model: str, out: RequestOutput, index: int, first: bool) -> CompletionResponse:
        lps = None
        if self.want_logprobs:
            lps = completion_logprobs(self.tokenizer, out.logprobs, self._offsets.get(index, 0))
            self._offsets[index] = self._offsets.get(index, 0) + sum(len(t) for t in lps.tokens)
        return CompletionResponse(id=rid, model=model, choices=[CompletionChoice(
            index=index, text=out.new_text, logprobs=lps, finish_reason=out.finish_reason,
            stop_reason=out.stop_reason)])

    def usage_chunk(self, rid: str, model: str, usage: Usage) -> CompletionResponse:
        return CompletionResponse(id=rid, model=model, choices=[], usage=usage)

    def response(self, rid: str, model: str, choices: list[Choice], usage: Usage) -> CompletionResponse:
        return CompletionResponse(id=rid, model=model, usage=usage, choices=[CompletionChoice(
            index=c.index, text="".join(c.text), finish_reason=c.finish_reason, stop_reason=c.stop_reason,
            logprobs=completion_logprobs(self.tokenizer, c.logprobs) if self.want_logprobs else None)
            for c in choices])


def _prompts(state: ServerState, prompt: str | list[int] | list[str] | list[list[int]]) -> list[list[int]]:
    """The prompts as token ids: a text, token ids, or a batch of either."""
    if isinstance(prompt, str):
        return [state.tokenizer.encode(prompt)]
    if prompt and all(isinstance(p, str) for p in prompt):
        return [state.tokenizer.encode(p) for p in prompt]
    batch = prompt if prompt and isinstance(prompt[0], list) else [prompt]
    for ids in batch:
        bad = [t for t in ids if not 0 <= t < state.vocab_size]
        if bad:
            raise APIError(400, f"token id {bad[0]} is outside the vocabulary (0..{state.vocab_size - 1})",
                           reason="invalid_request", param="prompt")
    return [list(ids) for ids in batch]


@router.post("/v1/completions", responses={
    200: {"model": CompletionResponse, "content": {"text/event-stream": {}}}, **ERROR_RESPONSES})
async def create_completion(body: CompletionRequest, request: Request, state: ServerState = Depends(get_state)):
    state.check_open()
    state.resolve_model(body.model)  # an unknown model is refused before any tokenizing
    prompts = await run_in_threadpool(_prompts, state, body.prompt)
    return await serve(request, state, body, prompts, CompletionFormat(state, body.logprobs is not None),
                       output_grammar(body))
