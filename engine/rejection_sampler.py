"""Verifying one token a draft model sampled: exact rejection sampling (speculative decoding).

The draft drew `token` from its distribution q; the target's distribution at the same position is
p. Accepting `token` with probability min(1, p(token) / q(token)) and, on rejection, drawing from
normalize(max(p - q, 0)) yields a token distributed exactly as p (Leviathan et al. 2023, Chen et
al. 2023), whatever q is. On rejection the residual is 0 at `token` (rejection means p(token) <
q(token)), so the drawn token always differs from the proposal: "accepted" is "the row's token
equals the proposal", the same test the n-gram path uses (a proposal with q = 1 on its token).
"""

from __future__ import annotations

import torch


def accept_or_resample(p_target: torch.Tensor, q_draft: torch.Tensor, token: int,
                       generator: torch.Generator | None) -> int:
    """`token` (accepted) or a draw from the residual (rejected). `p_target`, `q_draft`: [vocab]
    probabilities on the CPU; `generator` supplies the uniform draw and the residual's noise."""
    u = float(torch.rand((), generator=generator, dtype=torch.float64))
    if u * float(q_draft[token]) < float(p_target[token]):  # u < p / q without dividing by q = 0
        return token
    residual = (p_target - q_draft).clamp_(min=0)
    if not float(residual.sum()) > 0:  # p <= q everywhere (p == q up to rounding): p itself
        residual = p_target
    # Exponential race, as the sampler draws: argmax(r / E), E ~ Exp(1), draws from r / sum(r).
    noise = torch.empty_like(residual).exponential_(generator=generator)
    return int((residual / noise).argmax())
