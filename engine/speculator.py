"""Speculative decoding in the engine core: proposals before the schedule, acceptance after the step.

Before `schedule()`, each eligible running request gets up to `num_tokens` proposed tokens
(`spec_token_ids`, n-gram prompt lookup); the scheduler adds them to the request's decode chunk
with the budget and blocks left after every other request (proposals never cost anyone their
tokens or blocks), and the forward pass computes logits at every proposed position plus the bonus
one. After the step the target's token at each position, sampled exactly as without speculation
(the same seeded generator per output index), is compared with the proposal: tokens are emitted up
to and including the first disagreement (or the bonus token when all agree), and the rejected
positions' KV is dropped (`Scheduler.commit(rejected=...)`). An n-gram proposal puts probability 1
on its token, so rejection sampling reduces to exactly this: accept when the target's own sample
equals it. The output, greedy or seeded, is token for token what it would be without speculation
(a draft model's proposals would need min(1, p/q) acceptance and a residual draw).

Speculation stays off in steps with more than `max_batch_size` running requests (decode there is
already batched), for requests with a grammar or penalties (their per-token state is not
speculated), and for a request whose acceptance rate fell below `min_acceptance`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from llmop.engine.config import SpeculativeConfig
from llmop.engine.ngram_proposer import propose_ngram
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
    def __init__(self, config: SpeculativeConfig | None, max_model_len: int):
        self.config, self.max_model_len = config, max_model_len
        k = config.num_tokens if config is not None else 0
        self.counters = SpeculationCounters(accepted_by_position=[0] * k)

    def propose(self, running: Sequence[Request]) -> None:
        """Set (or clear) every running request's proposals for the next step."""
        c = self.config
        if c is None:
            return
        on = len(running) <= c.max_batch_size
        for r in running:
            r.spec_token_ids = self._proposal(r) if on else []

    def _proposal(self, r: Request) -> list[int]:
        c, p = self.config, r.params
        if r.num_uncomputed_tokens != 1 or p.grammar is not None or p.has_penalties:
            return []
        if r.num_spec_proposed >= GATING_MIN_PROPOSED and r.num_spec_accepted < c.min_acceptance * r.num_spec_proposed:
            return []
        k = min(c.num_tokens, p.max_tokens - len(r.output_token_ids) - 1, self.max_model_len - r.num_tokens - 1)
        if k < 1:
            return []
        return propose_ngram(r.prompt_token_ids + r.output_token_ids, k, c.ngram_min, c.ngram_max)

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
            if k:
                accepted = len(out) - 1
                rejected[r.request_id] = k - accepted
                self._count(r, k, accepted)
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
