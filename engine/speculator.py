"""Speculative decoding in the engine core: proposals before the schedule, acceptance after the step.

Before `schedule()`, each eligible running request gets up to `num_tokens` proposed tokens
(`spec_token_ids`) from the configured `Proposer`: n-gram prompt lookup, or a draft model
(`draft_proposer`). The scheduler adds them to the request's decode chunk with the budget and
blocks left after every other request (proposals never cost anyone their tokens or blocks), and
the forward pass computes logits at every proposed position plus the bonus one. After the step
the target's token at each position is compared with the proposal: tokens are emitted up to and
including the first disagreement (or the bonus token when all agree), and the rejected positions'
KV is dropped (`Scheduler.commit(rejected=...)`); the proposer learns how many were accepted (a
draft rolls its own KV back).

The target's token at a position is what it would be without speculation (greedy argmax, or a
draw from the same seeded generator per output index), except where it verifies a draft model's
sampled proposal: there it is the proposal, accepted with probability min(1, p/q), or a draw from
the residual max(p - q, 0) (`rejection_sampler`), so the output distribution is the target's. A
proposal with probability 1 (n-gram lookup, a greedy draft) needs no q: rejection sampling then is
"accept when the target's own token equals it", which keeps every greedy or seeded n-gram output
token for token what it is without speculation.

Speculation stays off in steps with more than `max_batch_size` running requests (decode there is
already batched), for requests with a grammar or penalties (their per-token state is not
speculated), and for a request whose acceptance rate fell below `min_acceptance`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import torch

from llmop.engine.config import SpeculativeConfig
from llmop.engine.proposer import Proposer
from llmop.engine.request import Request
from llmop.engine.sampler import SampleResult

GATING_MIN_PROPOSED = 16  # proposed tokens before a request's acceptance rate is trusted


@dataclass
class SpeculationCounters:
    """Since start (engine thread). `accepted_by_position[j]`: proposals at position j accepted."""

    drafts: int = 0  # requests that verified at least one proposed token in a step
    draft_tokens: int = 0
    accepted_tokens: int = 0
    accepted_by_position: list[int] = field(default_factory=list)


class Speculator:
    """`proposer`: None exactly when `config` is None (speculation off)."""

    def __init__(self, config: SpeculativeConfig | None, max_model_len: int, proposer: Proposer | None):
        self.config, self.max_model_len, self.proposer = config, max_model_len, proposer
        k = config.num_tokens if config is not None else 0
        self.counters = SpeculationCounters(accepted_by_position=[0] * k)
        self._draft_probs: dict[str, tuple[torch.Tensor, ...]] = {}

    def propose(self, running: Sequence[Request]) -> None:
        """Set (or clear) every running request's proposals for the next step."""
        c = self.config
        if c is None:
            return
        on = len(running) <= c.max_batch_size
        wanted = []
        for r in running:
            r.spec_token_ids = []
            k = self._num_tokens(r) if on else 0
            if k:
                wanted.append((r, k))
        self._draft_probs = {}
        for (r, _), p in zip(wanted, self.proposer.propose(wanted) if wanted else ()):
            r.spec_token_ids = list(p.token_ids)
            if p.probs is not None:
                self._draft_probs[r.request_id] = p.probs

    def _num_tokens(self, r: Request) -> int:
        """How many tokens to propose for `r` (0: none)."""
        c, p = self.config, r.params
        if r.num_uncomputed_tokens != 1 or p.grammar is not None or p.has_penalties:
            return 0
        if r.num_spec_proposed >= GATING_MIN_PROPOSED and r.num_spec_accepted < c.min_acceptance * r.num_spec_proposed:
            return 0
        return max(0, min(c.num_tokens, p.max_tokens - len(r.output_token_ids) - 1,
                          self.max_model_len - r.num_tokens - 1))

    def draft_probs(self, request_id: str) -> tuple[torch.Tensor, ...] | None:
        """The draft's distribution at each of the request's proposed tokens this step; None when
        they have probability 1 (n-gram lookup, a greedy draft)."""
        return self._draft_probs.get(request_id)

    def release(self, request: Request) -> None:
        """The scheduler let go of the request's blocks (finished, aborted, preempted)."""
        if self.proposer is not None:
            self.proposer.release(request.request_id)

    def verify(self, chunks, row_requests: Sequence[str], result: SampleResult | None
               ) -> tuple[dict[str, list[tuple[int, object]]], dict[str, int]]:
        """Per request with sampled rows: the tokens to emit (with logprobs), and the number of
        rejected proposals (whose KV the scheduler drops)."""
        emitted: dict[str, list[tuple[int, object]]] = {}
        rejected: dict[str, int] = {}
        if result is None:
            return emitted, rejected
        chunk_of = {c.request.request_id: c for c in chunks}
        i = 0
        while i < len(row_requests):
            c = chunk_of[row_requests[i]]
            r, k = c.request, c.num_spec
            rows = list(zip(result.token_ids[i:i + k + 1], result.logprobs[i:i + k + 1]))
            out = []
            for j, (token, lp) in enumerate(rows):
                out.append((token, lp))
                if j < k and token != r.spec_token_ids[j]:
                    break
            emitted[r.request_id] = out
            accepted = len(out) - 1
            if k:
                rejected[r.request_id] = k - accepted
                self._count(r, k, accepted)
            if r.spec_token_ids:
                self.proposer.verified(r, len(r.spec_token_ids), accepted)
            r.spec_token_ids = []
            i += k + 1
        return emitted, rejected

    def _count(self, r: Request, k: int, accepted: int) -> None:
        n = self.counters
        n.drafts += 1
        n.draft_tokens += k
        n.accepted_tokens += accepted
        for j in range(accepted):  # k <= num_tokens, the list's length
            n.accepted_by_position[j] += 1
        r.num_spec_proposed += k
        r.num_spec_accepted += accepted
