"""Choosing the next token of every sequence in the batch from its logits.

Logit bias, grammar masks, penalties, temperature, top-k, top-p and min-p are applied to the whole
batch as tensors. A seeded request draws token i from a generator seeded by (seed, i), so its output
does not depend on what else is in the batch, nor on which process samples it (a row carries no
state between steps); unseeded rows share the sampling rank's generator. Independent draws for the
same token (a draft model's proposal, the test that accepts it) use other streams of that seed.

A row verifying a draft model's sampled proposal carries the draft's token and distribution; its
token is the proposal (accepted) or a draw from the residual (`rejection_sampler`).

Grammar rows carry a packed token bitmask (bit t % 32 of word t // 32: token t allowed), filled by
their matcher on the engine thread; `apply_token_bitmask` is applied where sampling happens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from llmop.engine.rejection_sampler import accept_or_resample
from llmop.engine.sampling_params import SamplingParams


class Stream:
    """Independent random streams of one seeded output token."""

    TARGET = 0  # the token itself (the stream every non-speculative draw uses)
    DRAFT = 1  # a draft model's proposal for it
    ACCEPT = 2  # the test accepting a draft's proposal, and the residual draw on rejection


@dataclass(frozen=True)
class SampleRow:
    """What the sampler needs to know about one row beyond its logits."""

    params: SamplingParams
    output_index: int = 0  # which output token this row samples (seeds its generator)
    prompt_token_ids: Sequence[int] = ()  # only needed (and sent) with penalties
    output_token_ids: Sequence[int] = ()
    block_eos: bool = False  # min_tokens not reached: EOS and stop ids may not be sampled
    token_bitmask: torch.Tensor | None = None  # [ceil(vocab / 32)] int32: the grammar's allowed tokens
    draft_token: int | None = None  # a draft model's sampled proposal for this token, verified here
    draft_probs: torch.Tensor | None = None  # [vocab]: the distribution the draft drew it from

    def generator(self, stream: int = Stream.TARGET) -> torch.Generator | None:
        """The seeded request's generator for this token (and stream), else None."""
        if self.params.seed is None:
            return None
        seed = row_seed(self.params.seed, self.output_index)
        return torch.Generator().manual_seed(seed if stream == Stream.TARGET else row_seed(seed, stream))


def row_seed(seed: int, index: int) -> int:
    """A well-mixed 63-bit seed for token `index` of a request seeded with `seed` (splitmix64)."""
    z = (seed * 0x9E3779B97F4A7C15 + (index + 1) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return (z ^ (z >> 31)) >> 1


@dataclass(frozen=True)
class SampleResult:
    token_ids: list[int]
    # Per row: (sampled token's logprob, [(token id, logprob) of the top N]) or None.
    logprobs: list[tuple[float, list[tuple[int, float]]] | None]
    probs: torch.Tensor | None = None  # [rows, vocab] the sampled rows' distributions (`keep_probs`)


def unpack_bitmask(bitmask: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """[rows, words] int32 packed bits → [rows, vocab_size] bool (True: allowed)."""
    if bitmask.shape[-1] * 32 < vocab_size:
        raise ValueError(f"a bitmask of {bitmask.shape[-1]} words cannot cover {vocab_size} tokens")
    shifts = torch.arange(32, dtype=torch.int32, device=bitmask.device)
    bits = (bitmask.unsqueeze(-1) >> shifts) & 1  # arithmetic shift: bit 31 of a negative word is still 1
    return bits.reshape(bitmask.shape[0], -1)[:, :vocab_size].bool()


def apply_token_bitmask(logits: torch.Tensor, bitmask: torch.Tensor, rows: Sequence[int]) -> None:
    """Set to −inf, in place, the logits of `rows` whose token is not allowed by that row's packed
    bitmask (`bitmask[j]` belongs to `rows[j]`); other rows are untouched. Runs on the logits' device."""
    if not len(rows):
        return
    allowed = unpack_bitmask(bitmask.to(logits.device, non_blocking=True), logits.shape[1])
    idx = torch.as_tensor(rows, dtype=torch.long, device=logits.device)
    logits[idx] = logits[idx].masked_fill(~allowed, float("-inf"))


def _apply_logit_bias(logits: torch.Tensor, rows: Sequence[SampleRow]) -> None:
    for i, row in enumerate(rows):
        if row.params.logit_bias:
            ids, bias = zip(*row.params.logit_bias)
            logits[i, list(ids)] += torch.tensor(bias, dtype=logits.dtype)


def _apply_penalties(logits: torch.Tensor, rows: Sequence[SampleRow]) -> None:
    vocab = logits.shape[1]
    for i, row in enumerate(rows):
        p = row.params
        if not p.has_penalties:
            continue
        if p.repetition_penalty != 1.0:
            seen = torch.tensor(list(set(row.prompt_token_ids) | set(row.output_token_ids)), dtype=torch.long)
            if seen.numel():
                vals = logits[i, seen]
                logits[i, seen] = torch.where(vals > 0, vals / p.repetition_penalty, vals * p.repetition_penalty)
        if row.output_token_ids and (p.presence_penalty or p.frequency_penalty):
            counts = torch.bincount(torch.tensor(row.output_token_ids, dtype=torch.long), minlength=vocab).to(logits.dtype)
            logits[i] -= p.frequency_penalty * counts + p.presence_penalty * (counts > 0).to(logits.dtype)


def _filter(logits: torch.Tensor, rows: Sequence[SampleRow]) -> torch.Tensor:
    """Temperature, then top-k, top-p and min-p as masks (−inf outside the kept set)."""
    temps = torch.tensor([max(r.params.temperature, 1e-5) for r in rows], dtype=logits.dtype)
    logits = logits / temps[:, None]
    top_k = [min(r.params.top_k, logits.shape[1]) for r in rows]
    top_p = [r.params.top_p for r in rows]
    min_p = [r.params.min_p for r in rows]
    if any(k > 0 for k in top_k) or any(p < 1.0 for p in top_p):
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        vocab = logits.shape[1]
        k = torch.tensor([k if k > 0 else vocab for k in top_k])
        ranks = torch.arange(vocab).unsqueeze(0)
        drop = ranks >= k.unsqueeze(1)
        probs = sorted_logits.masked_fill(drop, float("-inf")).softmax(dim=-1)
        # Keep the smallest prefix whose mass reaches top_p (the first token always stays).
        before = probs.cumsum(dim=-1) - probs
        drop |= before >= torch.tensor(top_p, dtype=probs.dtype).unsqueeze(1)
        sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
        logits = torch.empty_like(logits).scatter_(1, order, sorted_logits)
    if any(p > 0.0 for p in min_p):
        probs = logits.softmax(dim=-1)
        floor = torch.tensor(min_p, dtype=probs.dtype).unsqueeze(1) * probs.max(dim=-1, keepdim=True).values
        logits = logits.masked_fill(probs < floor, float("-inf"))
    return logits


def sample(logits: torch.Tensor, rows: Sequence[SampleRow], eos_ids: Sequence[int],
           generator: torch.Generator | None = None, stream: int = Stream.TARGET,
           keep_probs: bool = False) -> SampleResult:
    """logits: [num_rows, vocab] float32 (modified in place). `stream`: which of a seeded row's
    streams draws (a draft model samples its proposals from `Stream.DRAFT`). `keep_probs`: return
    the distributions the non-greedy rows were drawn from (a draft's q)."""
    want_logprobs = any(r.params.logprobs is not None for r in rows)
    raw_logprobs = logits.log_softmax(dim=-1) if want_logprobs else None
    for i, row in enumerate(rows):
        if row.block_eos and row.token_bitmask is None:  # a grammar row ends when its grammar says so
            banned = [t for t in (*eos_ids, *row.params.stop_token_ids) if t < logits.shape[1]]
            logits[i, banned] = float("-inf")
    _apply_logit_bias(logits, rows)
    grammar_rows = [i for i, r in enumerate(rows) if r.token_bitmask is not None]
    if grammar_rows:
        apply_token_bitmask(logits, torch.stack([rows[i].token_bitmask for i in grammar_rows]), grammar_rows)
    _apply_penalties(logits, rows)

    greedy = torch.tensor([r.params.greedy for r in rows])
    tokens = logits.argmax(dim=-1)
    probs = None
    if not bool(greedy.all()):
        probs = _filter(logits, rows).softmax(dim=-1)
        # Exponential race: argmax(p / E) with E ~ Exp(1) draws from p; each seeded row uses its own
        # generator, so its draw never depends on the other rows.
        noise = torch.empty_like(probs)
        for i, row in enumerate(rows):
            if not row.params.greedy:
                noise[i].exponential_(generator=row.generator(stream) or generator)
        sampled = (probs / noise).argmax(dim=-1)
        tokens = torch.where(greedy, tokens, sampled)
        for i, row in enumerate(rows):  # a greedy row's argmax decides a greedy proposal as it is
            if row.draft_probs is not None and not row.params.greedy:
                tokens[i] = accept_or_resample(probs[i], row.draft_probs, row.draft_token,
                                               row.generator(Stream.ACCEPT) or generator)

    token_list = tokens.tolist()
    logprobs: list = [None] * len(rows)
    if raw_logprobs is not None:
        for i, row in enumerate(rows):
            n = row.params.logprobs
            if n is None:
                continue
            top = raw_logprobs[i].topk(n) if n > 0 else None
            alts = list(zip(top.indices.tolist(), top.values.tolist())) if top is not None else []
            logprobs[i] = (float(raw_logprobs[i, token_list[i]]), alts)
    return SampleResult(token_list, logprobs, probs if keep_probs else None)
