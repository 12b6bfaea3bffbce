"""The one interface speculative decoding's proposers share (n-gram lookup, a draft model).

Before each schedule the `Speculator` asks its proposer for up to k tokens for each request it
chose; after verification it reports how many the target accepted (a draft model rolls its KV
back to them); a request that finishes or is preempted is released (a draft model frees its
blocks). A proposal says how its tokens were chosen: `probs` None means probability 1 on each
token (n-gram lookup, a greedy draft), else the draft's distribution at each position, which the
target's rejection sampling needs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

import torch

from llmop.engine.request import Request


@dataclass(frozen=True)
class Proposal:
    token_ids: tuple[int, ...] = ()
    probs: tuple[torch.Tensor, ...] | None = None  # per token: [vocab], the distribution it was drawn from


class Proposer(Protocol):
    def propose(self, wanted: Sequence[tuple[Request, int]]) -> list[Proposal]:
        """For each (request, k): up to k proposed next tokens (in order)."""
        ...

    def verified(self, request: Request, num_proposed: int, num_accepted: int) -> None:
        """The target accepted the first `num_accepted` of the request's `num_proposed` tokens
        (called before the step's tokens are appended to the request)."""
        ...

    def release(self, request_id: str) -> None:
        """The request finished, was aborted or preempted: forget it."""
        ...
