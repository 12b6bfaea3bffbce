"""The one place an OpenAI request becomes `SamplingParams` (completions and chat alike).

Length admission happens here too, because the output cap depends on the prompt: prompt +
max_tokens must fit in max_model_len, and a request without max_tokens gets what is left.
Range checks are `SamplingParams`'s own; its ValueError becomes a 400 naming the field.
"""

from __future__ import annotations

from llmop.engine.grammar.spec import GrammarSpec
from llmop.engine.sampling_params import INT64_MAX, INT64_MIN, SamplingParams
from llmop.engine.server.errors import APIError
from llmop.engine.server.protocol import MAX_LOGPROBS, MAX_N, ChatCompletionRequest, CompletionRequest, SamplingRequest

# OpenAI fields this engine knows but does not implement: refused by name when given.
_REFUSED_CHAT = {
    "audio": "audio output is not supported",
    "prediction": "predicted outputs are not supported",
    "reasoning_effort": "reasoning_effort is not supported: this model does not reason in a separate channel",
    "verbosity": "verbosity is not supported",
    "web_search_options": "web search is not supported",
    "functions": "functions (deprecated) is not supported; use tools",
    "function_call": "function_call (deprecated) is not supported; use tool_choice",
}


def check_supported(req: SamplingRequest) -> None:
    """Reject the OpenAI fields this engine does not implement, rather than ignoring them."""
    def unsupported(param: str, message: str) -> APIError:
        return APIError(400, message, reason="unsupported", param=param)

    if not 1 <= req.n <= MAX_N:
        raise APIError(400, f"n must be between 1 and {MAX_N}", reason="invalid_request", param="n")
    if req.store:
        raise unsupported("store", "store is not supported: this server keeps no completions")
    if req.seed is not None and not INT64_MIN <= req.seed <= INT64_MAX:
        raise APIError(400, "seed must be a 64-bit signed integer", reason="invalid_request", param="seed")
    if req.response_format is not None and req.structured_outputs is not None:
        raise unsupported("structured_outputs", "give either response_format or structured_outputs, not both")
    if isinstance(req, CompletionRequest):
        if req.echo:
            raise unsupported("echo", "echo is not supported")
        if req.suffix:
            raise unsupported("suffix", "suffix is not supported")
        if req.best_of is not None and req.best_of != req.n:
            raise unsupported("best_of", "best_of other than n is not supported")
    if isinstance(req, ChatCompletionRequest):
        for name, message in _REFUSED_CHAT.items():
            if getattr(req, name) is not None:
                raise unsupported(name, message)
        if req.modalities is not None and set(req.modalities) - {"text"}:
            raise unsupported("modalities", "only the text modality is supported")
        # checked even when the other field is the one used: an out-of-range value is a client bug
        for name in ("max_tokens", "max_completion_tokens"):
            if getattr(req, name) is not None and getattr(req, name) < 1:
                raise APIError(400, f"{name} must be at least 1", reason="invalid_request", param=name)
        # checked even with logprobs off: an out-of-range value is a client bug, not something to ignore
        if req.top_logprobs is not None and not 0 <= req.top_logprobs <= MAX_LOGPROBS:
            raise APIError(400, f"top_logprobs must be in [0, {MAX_LOGPROBS}]", reason="invalid_request",
                           param="top_logprobs")


def logit_bias_of(req: SamplingRequest, vocab_size: int) -> tuple[tuple[int, float], ...]:
    """OpenAI's `{"token id": bias}` as (id, bias) pairs; keys must be decimal ids in the vocabulary."""
    pairs = []
    for key, bias in (req.logit_bias or {}).items():
        if not (key.isascii() and key.isdigit()) or int(key) >= vocab_size:
            raise APIError(400, f"logit_bias key {key!r} is not a token id in the vocabulary (0..{vocab_size - 1})",
                           reason="invalid_request", param="logit_bias")
        pairs.append((int(key), bias))
    return tuple(pairs)


def to_sampling_params(req: SamplingRequest, num_prompt_tokens: int, max_model_len: int, vocab_size: int,
                       choice: int = 0, grammar: GrammarSpec | None = None) -> SamplingParams:
    """SamplingParams for choice `choice` of `req` (seeded choices get seed + choice, so the n
    choices differ yet each is reproducible), constrained by `grammar` if given."""
    room = max_model_len - num_prompt_tokens
    max_tokens = req.requested_max_tokens()
    if max_tokens is None:
        if room < 1:
            raise APIError(400, f"prompt ({num_prompt_tokens} tokens) leaves no room for output in "
                                f"max_model_len {max_model_len}", reason="context_length",
                           param="messages", code="context_length_exceeded")
        max_tokens = room
    elif max_tokens >= 1 and max_tokens > room:
        raise APIError(400, f"prompt ({num_prompt_tokens} tokens) + max_tokens ({max_tokens}) exceeds "
                            f"max_model_len {max_model_len} by {max_tokens - room} tokens",
                       reason="context_length", param=_max_tokens_param(req), code="context_length_exceeded")
    stop = (req.stop,) if isinstance(req.stop, str) else tuple(req.stop or ())
    fields = dict(
        max_tokens=max_tokens,
        min_tokens=req.min_tokens,
        temperature=1.0 if req.temperature is None else req.temperature,
        top_p=1.0 if req.top_p is None else req.top_p,
        top_k=0 if req.top_k in (None, -1) else req.top_k,  # vLLM spells "off" -1
        min_p=req.min_p or 0.0,
        seed=None if req.seed is None else req.seed + choice,
        presence_penalty=req.presence_penalty or 0.0,
        frequency_penalty=req.frequency_penalty or 0.0,
        repetition_penalty=1.0 if req.repetition_penalty is None else req.repetition_penalty,
        stop=stop,
        stop_token_ids=tuple(req.stop_token_ids or ()),
        ignore_eos=req.ignore_eos,
        logprobs=req.requested_logprobs(),
        skip_special_tokens=req.skip_special_tokens,
        include_stop_str_in_output=req.include_stop_str_in_output,
        logit_bias=logit_bias_of(req, vocab_size),
        grammar=grammar,
    )
    try:
        params = SamplingParams(**fields)
        params.check_vocab(vocab_size)
        return params
    except ValueError as e:
        message = str(e)
        field = message.split(" ", 1)[0]
        param = {"max_tokens": _max_tokens_param(req), "logprobs": _logprobs_param(req)}.get(field, field)
        raise APIError(400, message, reason="invalid_request",
                       param=param if field in fields else None) from None


def _max_tokens_param(req: SamplingRequest) -> str:
    return "max_completion_tokens" if getattr(req, "max_completion_tokens", None) is not None else "max_tokens"


def _logprobs_param(req: SamplingRequest) -> str:
    return "logprobs" if isinstance(req, CompletionRequest) else "top_logprobs"
