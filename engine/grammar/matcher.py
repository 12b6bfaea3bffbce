"""One request's position in its grammar: which tokens may come next, and advancing on each.

The engine keeps one matcher per request with a grammar (for its whole life: a preempted request
recomputes its KV cache but keeps its sampled tokens, so its matcher state stays valid). Each step
`fill_bitmasks` writes the masks of the step's grammar rows into one packed int32 tensor, bit
`t % 32` of word `t // 32` set when token t is allowed; `sampler.apply_token_bitmask` applies it.
"""

from __future__ import annotations

from typing import Sequence

import torch


def bitmask_width(vocab_size: int) -> int:
    return (vocab_size + 31) // 32


class GrammarMatcher:
    def __init__(self, compiled):
        import xgrammar as xgr

        self._m = xgr.GrammarMatcher(compiled)

    def fill(self, bitmask: torch.Tensor, row: int) -> None:
        self._m.fill_next_token_bitmask(bitmask, row)

    def accept(self, token_id: int) -> bool:
        """Advance on the sampled token; False if the grammar does not allow it."""
        return self._m.accept_token(token_id)

    @property
    def is_terminated(self) -> bool:
        """The grammar is complete and a stop token was accepted: nothing more may follow."""
        return self._m.is_terminated()


def fill_bitmasks(matchers: Sequence[GrammarMatcher], vocab_size: int) -> torch.Tensor:
    """The packed masks of `matchers`, one row each: [len(matchers), ceil(vocab / 32)] int32."""
    bitmask = torch.full((len(matchers), bitmask_width(vocab_size)), -1, dtype=torch.int32)
    for i, m in enumerate(matchers):
        m.fill(bitmask, i)
    return bitmask
