"""A request inside the engine: its tokens, its progress counter, its blocks' owner id, its clock.

`num_computed_tokens` catching up with `num_tokens` is the only progress state: a prefill chunk, a
decode step and a recompute after preemption are all "compute the next n uncomputed tokens".
"""

from __future__ import annotations

import enum
import itertools
import time
from dataclasses import dataclass, field

from llmop.engine.sampling_params import SamplingParams

_arrival_counter = itertools.count()


class RequestStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    PREEMPTED = "preempted"
    FINISHED = "finished"


class FinishReason(enum.StrEnum):
    """Why a request ended (the OpenAI `finish_reason`; ABORT: cancelled, timed out or failed)."""

    STOP = "stop"
    LENGTH = "length"
    ABORT = "abort"


@dataclass
class RequestTimes:
    """Monotonic timestamps (time.monotonic()); every latency metric is derived from these."""

    arrival: float = field(default_factory=time.monotonic)
    first_scheduled: float | None = None
    first_token: float | None = None
    tokens: list[float] = field(default_factory=list)
    finished: float | None = None


@dataclass(eq=False)
class Request:
    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    priority: int = 0  # smaller runs first, as in vLLM; ties go to the earlier arrival
    adapter: str | None = None
    adapter_generation: int | None = None  # which registration of `adapter` (names can be reused)
    cache_salt: str | None = None  # requests share cached KV only under the same adapter and salt
    prompt_leader: "Request | None" = field(default=None, repr=False)  # an earlier choice of the same prompt
    output_token_ids: list[int] = field(default_factory=list)
    num_computed_tokens: int = 0
    status: RequestStatus = RequestStatus.WAITING
    finish_reason: FinishReason | None = None
    num_preemptions: int = 0
    num_cached_tokens: int = 0  # prompt tokens not computed at its first admission (prefix cache, n > 1)
    block_hashes: list[bytes] = field(default_factory=list, repr=False)  # names of its full blocks
    spec_token_ids: list[int] = field(default_factory=list)  # proposed next tokens, not yet verified
    num_spec_proposed: int = 0  # speculative tokens proposed / accepted so far (acceptance gating)
    num_spec_accepted: int = 0
    times: RequestTimes = field(default_factory=RequestTimes)
    arrival_seq: int = field(default_factory=lambda: next(_arrival_counter))

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    @property
    def num_uncomputed_tokens(self) -> int:
        return self.num_tokens - self.num_computed_tokens

    def token_at(self, i: int) -> int:
        p = len(self.prompt_token_ids)
        return self.prompt_token_ids[i] if i < p else self.output_token_ids[i - p]

    def token_slice(self, start: int, end: int) -> list[int]:
        """Tokens [start, end); past `num_tokens` come the proposed (speculative) tokens."""
        out: list[int] = []
        offset = 0  # each part sliced where [start, end) overlaps it: a decode never copies the prompt
        for part in (self.prompt_token_ids, self.output_token_ids, self.spec_token_ids):
            lo, hi = max(start - offset, 0), min(end - offset, len(part))
            if lo < hi:
                out.extend(part[lo:hi])
            offset += len(part)
            if offset >= end:
                break
        return out

    @property
    def is_finished(self) -> bool:
        return self.status is RequestStatus.FINISHED

    @property
    def order_key(self) -> tuple[int, int]:
        """Scheduling order: priority first, then arrival."""
        return (self.priority, self.arrival_seq)
