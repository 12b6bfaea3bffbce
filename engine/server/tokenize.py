"""POST /tokenize and /detokenize: the model's tokenizer over HTTP (clients count tokens with it)."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from starlette.concurrency import run_in_threadpool

from llmop.engine.server.chat import render_chat
from llmop.engine.server.errors import ERROR_RESPONSES, APIError
from llmop.engine.server.protocol import DetokenizeRequest, DetokenizeResponse, TokenizeRequest, TokenizeResponse
from llmop.engine.server.state import ServerState, get_state

router = APIRouter()


@router.post("/tokenize", responses=ERROR_RESPONSES)
async def tokenize(body: TokenizeRequest, state: ServerState = Depends(get_state)) -> TokenizeResponse:
    state.resolve_model(body.model)
    if (body.prompt is None) == (body.messages is None):
        raise APIError(400, "give exactly one of prompt and messages", reason="invalid_request", param="prompt")
    if body.messages is not None:
        ids = await run_in_threadpool(render_chat, state, body.messages)
    else:
        ids = await run_in_threadpool(state.tokenizer.encode, body.prompt, body.add_special_tokens)
    return TokenizeResponse(tokens=ids, count=len(ids), max_model_len=state.max_model_len)


@router.post("/detokenize", responses=ERROR_RESPONSES)
async def detokenize(body: DetokenizeRequest, state: ServerState = Depends(get_state)) -> DetokenizeResponse:
    state.resolve_model(body.model)
    vocab = state.tokenizer.vocab_size
    bad = [t for t in body.tokens if not 0 <= t < vocab]
    if bad:
        raise APIError(400, f"token id {bad[0]} is outside the vocabulary (0..{vocab - 1})",
                       reason="invalid_request", param="tokens")
    return DetokenizeResponse(prompt=state.tokenizer.decode(body.tokens))
