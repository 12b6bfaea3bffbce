"""N-gram prompt lookup: propose the tokens that followed the last time this text appeared.

Speculative decoding's cheapest proposer (no model): take the longest suffix of the request's
tokens, of length in [n_min, n_max], that also occurs earlier in them, and propose the k tokens that
followed its most recent earlier occurrence. It pays on outputs that repeat their input (edits,
rewrites, code, extraction) and proposes nothing elsewhere.
"""

from __future__ import annotations

from typing import Sequence

from llmop.engine.proposer import Proposal
from llmop.engine.request import Request


def propose_ngram(tokens: Sequence[int], k: int, n_min: int, n_max: int) -> list[int]:
    """Up to `k` proposed next tokens ([] when no suffix of length n_min..n_max recurs)."""
    size = len(tokens)
    if k < 1:
        return []
    for n in range(min(n_max, size - 1), n_min - 1, -1):
        suffix = list(tokens[size - n:])
        first = suffix[0]
        # The most recent earlier occurrence, scanning back from size - n - 1 (so at least one token
        # follows it). A plain loop with a first-token filter: faster here than a vectorised
        # window compare (measured: 0.29 vs 0.63 ms on 4,000 tokens).
        for start in range(size - n - 1, -1, -1):
            if tokens[start] == first and list(tokens[start:start + n]) == suffix:
                return list(tokens[start + n:start + n + k])
    return []


class NgramProposer:
    """`propose_ngram` behind the `Proposer` interface: no state, probability 1 on each token."""

    def __init__(self, n_min: int, n_max: int):
        self.n_min, self.n_max = n_min, n_max

    def propose(self, wanted: Sequence[tuple[Request, int]]) -> list[Proposal]:
        return [Proposal(tuple(propose_ngram(r.prompt_token_ids + r.output_token_ids, k, self.n_min, self.n_max)))
                for r, k in wanted]

    def verified(self, request: Request, num_proposed: int, num_accepted: int) -> None:
        pass

    def release(self, request_id: str) -> None:
        pass
