"""What the engine hands back each step for each request: frozen, so it can cross threads."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TokenLogprob:
    token_id: int
    logprob: float
    top: tuple[tuple[int, float], ...]  # (token id, logprob) of the most likely alternatives


@dataclass(frozen=True)
class RequestOutput:
    """The delta since the previous output of this request, plus totals."""

    request_id: str
    new_token_ids: tuple[int, ...]
    new_text: str
    finished: bool
    finish_reason: str | None  # "stop", "length", "abort", or None while running
    num_prompt_tokens: int
    num_output_tokens: int
    num_cached_tokens: int = 0  # prompt tokens it did not compute (prefix cache, or shared with choice 0)
    logprobs: tuple[TokenLogprob, ...] = ()
    stop_reason: str | int | None = None  # the stop string or token id that ended it
    # Monotonic timestamps from the request's clock (see request.RequestTimes).
    arrival_time: float = 0.0
    first_scheduled_time: float | None = None
    first_token_time: float | None = None
    finish_time: float | None = None
    token_time: float | None = None  # when the newest token was sampled (None if no new token)
    error: str | None = None  # why a request ended without running: "queue_timeout", "adapter_unavailable"
    error_message: str | None = None


@dataclass(frozen=True)
class CompletionOutput:
    """The whole result of one offline generation."""

    request_id: str
    prompt_token_ids: tuple[int, ...]
    token_ids: tuple[int, ...]
    text: str
    finish_reason: str
    logprobs: tuple[TokenLogprob, ...] = ()
