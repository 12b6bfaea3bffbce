"""Choose the tensor-parallel size: the smallest t that splits the heads and fits in memory on one node.

Per GPU at TP = t:  weights/t + kv_bytes_per_token × budget_tokens / t' + reserve ≤ utilization × memory,
where t' = min(t, kv_heads): past the KV head count, KV heads are replicated, so adding GPUs no longer
shrinks each GPU's share of the cache. A draft model for speculative decoding adds its weights and
KV cache, whole, on the first GPU (`draft.py`). Every candidate t is kept with why it was rejected,
so the caller can print all the terms and, when nothing fits, a precise reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum

from llmop.operator.api.quantity import format_bytes
from llmop.operator.sizing.architecture import Accelerator, Architecture
from llmop.operator.sizing.draft import DraftRequest

SEARCH_LIMIT = 1024  # how far past one node we look, to say how many GPUs it *would* take


class Rejection(StrEnum):
    """The rule a tensor-parallel size breaks, checked in this order."""

    HEADS = "Heads"  # does not divide the attention heads
    KV_HEADS = "KVHeads"  # neither divides nor is a multiple of the KV heads
    MLP = "MLP"  # does not divide the MLP width (when the architecture gives it)
    MEMORY = "Memory"  # needs more than the usable memory per GPU
    NODE = "Node"  # more GPUs than one node has


class SizingReason(StrEnum):
    """Why no plan exists: the CamelCase reason of the SizingValid=False condition."""

    INVALID_BUDGET = "InvalidBudget"
    TENSOR_PARALLEL_INVALID = "TensorParallelInvalid"
    EXCEEDS_NODE = "ExceedsNode"
    DOES_NOT_FIT = "DoesNotFit"
    ARCHITECTURE_UNKNOWN = "ArchitectureUnknown"
    MAX_MODEL_LEN_UNKNOWN = "MaxModelLenUnknown"
    CONTEXT_TOO_LONG = "ContextTooLong"
    DRAFT_ARCHITECTURE_UNKNOWN = "DraftArchitectureUnknown"  # method draft: no draftArchitecture, not in the catalog
    DRAFT_INCOMPATIBLE = "DraftIncompatible"  # its vocabulary or context: the engine would refuse it at start


@dataclass(frozen=True)
class SizingRequest:
    """Everything sizing depends on, as plain numbers."""

    architecture: Architecture
    accelerator: Accelerator
    budget_tokens: int
    max_model_len: int
    block_size: int = 16
    kv_dtype: str = "auto"
    tensor: int | None = None  # a fixed size to check instead of searching
    draft: DraftRequest | None = None  # speculative decoding with a draft model

    @property
    def kv_bytes_per_token(self) -> int:
        return self.architecture.kv_bytes_per_token(self.kv_dtype)

    @property
    def resolved_kv_dtype(self) -> str:
        """The KV cache dtype the engine is given (for the target's cache and the draft's)."""
        return self.architecture.kv_dtype(self.kv_dtype)


@dataclass(frozen=True)
class Candidate:
    """One tensor-parallel size and its per-GPU terms; `rejection` is the rule it breaks and
    `rejected` says so in words (None for both when it works)."""

    t: int
    kv_ranks: int
    weights_bytes: int
    kv_budget_bytes: int
    reserved_bytes: int
    usable_bytes: int
    draft_weights_bytes: int = 0  # on the first GPU; 0 without a draft model
    draft_kv_budget_bytes: int = 0
    rejection: Rejection | None = None
    rejected: str | None = None

    @property
    def need_bytes(self) -> int:
        return (self.weights_bytes + self.kv_budget_bytes + self.draft_weights_bytes + self.draft_kv_budget_bytes
                + self.reserved_bytes)


@dataclass(frozen=True)
class SizingPlan:
    """The chosen size, its terms, and the engine limits that follow from it."""

    request: SizingRequest
    chosen: Candidate
    candidates: list[Candidate] = field(default_factory=list)

    @property
    def tensor_parallel_size(self) -> int:
        return self.chosen.t

    @property
    def kv_cache_bytes_per_gpu(self) -> int:
        """What is left for KV once weights and the reserve are placed (at least the budget's share);
        with a draft model, less the draft's weights and its KV cache."""
        c, req = self.chosen, self.request
        left = c.usable_bytes - c.weights_bytes - c.draft_weights_bytes - c.reserved_bytes
        if req.draft is None:
            return left
        target_block = req.block_size * self.kv_bytes_per_token_per_gpu
        return req.draft.target_kv_cache_bytes(left, target_block, req.resolved_kv_dtype, req.block_size)

    @property
    def kv_bytes_per_token_per_gpu(self) -> int:
        return self.request.kv_bytes_per_token // self.chosen.kv_ranks

    @property
    def kv_blocks(self) -> int:
        per_block = self.request.block_size * self.kv_bytes_per_token_per_gpu
        return self.kv_cache_bytes_per_gpu // per_block

    @property
    def draft_kv_blocks(self) -> int:
        """The draft model's KV blocks (0 without one)."""
        draft = self.request.draft
        if draft is None:
            return 0
        return draft.kv_blocks(self.request.resolved_kv_dtype, self.request.block_size, self.kv_blocks)

    @property
    def kv_capacity_tokens(self) -> int:
        return self.kv_blocks * self.request.block_size

    @property
    def max_concurrent_sequences(self) -> int:
        """Sequences of max_model_len tokens the cache holds at once."""
        return self.kv_blocks // math.ceil(self.request.max_model_len / self.request.block_size)

    def summary(self) -> str:
        c = self.chosen
        return (
            f"TP={c.t}: weights {format_bytes(c.weights_bytes)} + KV {format_bytes(c.kv_budget_bytes)}{draft_terms(c)} "
            f"+ reserve {format_bytes(c.reserved_bytes)} = {format_bytes(c.need_bytes)} of "
            f"{format_bytes(c.usable_bytes)} per GPU; {self.kv_blocks} KV blocks, "
            f"{self.max_concurrent_sequences} sequences of {self.request.max_model_len} tokens"
        )


class SizingError(ValueError):
    """No tensor-parallel size works; `reason` is a CamelCase condition reason, str() the message."""

    def __init__(self, reason: SizingReason, message: str, candidates: list[Candidate] | None = None):
        super().__init__(message)
        self.reason = reason
        self.candidates = candidates or []


def draft_terms(c: Candidate) -> str:
    """' + draft weights W + draft KV K' when the candidate has a draft model, else ''."""
    if not (c.draft_weights_bytes or c.draft_kv_budget_bytes):
        return ""
    return f" + draft weights {format_bytes(c.draft_weights_bytes)} + draft KV {format_bytes(c.draft_kv_budget_bytes)}"


def evaluate(req: SizingRequest, t: int) -> Candidate:
    """The per-GPU terms at tensor-parallel size t (the first GPU's, which holds a draft model),
    and the first rule t breaks (if any)."""
    arch, acc, draft = req.architecture, req.accelerator, req.draft
    kv_ranks = min(t, arch.kv_heads)
    cand = dict(
        t=t,
        kv_ranks=kv_ranks,
        weights_bytes=arch.weight_bytes_per_gpu(t),
        kv_budget_bytes=math.ceil(req.kv_bytes_per_token * req.budget_tokens / kv_ranks),
        reserved_bytes=acc.reserved_bytes,
        usable_bytes=acc.usable_bytes,
    )
    if draft is not None:
        cand.update(draft_weights_bytes=draft.weight_bytes,
                    draft_kv_budget_bytes=draft.kv_budget_bytes(req.resolved_kv_dtype, req.budget_tokens))
    if arch.attention_heads % t:
        return Candidate(**cand, rejection=Rejection.HEADS,
                         rejected=f"does not divide the {arch.attention_heads} attention heads")
    if arch.kv_heads % t and t % arch.kv_heads:
        return Candidate(**cand, rejection=Rejection.KV_HEADS,
                         rejected=f"neither divides nor is a multiple of the {arch.kv_heads} KV heads")
    if arch.intermediate_size is not None and arch.intermediate_size % t:
        return Candidate(**cand, rejection=Rejection.MLP,
                         rejected=f"does not divide the MLP width {arch.intermediate_size}")
    c = Candidate(**cand)
    if c.need_bytes > c.usable_bytes:
        return Candidate(
            **cand,
            rejection=Rejection.MEMORY,
            rejected=f"needs {format_bytes(c.need_bytes)} per GPU, {format_bytes(c.usable_bytes)} usable",
        )
    if t > acc.gpus_per_node:
        return Candidate(**cand, rejection=Rejection.NODE,
                         rejected=f"more than the {acc.gpus_per_node} GPUs of one node")
    return c


def size(req: SizingRequest) -> SizingPlan:
    """The plan with the smallest working t (or the fixed `req.tensor`); SizingError if none works."""
    if req.budget_tokens < 1 or req.max_model_len < 1:
        raise SizingError(SizingReason.INVALID_BUDGET, "the KV budget and maxModelLen must be positive")
    if req.draft is not None and req.draft.kv_cache_bytes is not None:
        block = req.draft.block_bytes(req.resolved_kv_dtype, req.block_size)
        if req.draft.kv_cache_bytes < block:
            raise SizingError(SizingReason.INVALID_BUDGET, f"speculative.draftKvCacheMemoryBytes "
                              f"{req.draft.kv_cache_bytes} is below one block of the draft's KV cache ({block} bytes)")
    if req.tensor is not None:
        cand = evaluate(req, req.tensor)
        if cand.rejection:
            raise SizingError(SizingReason.TENSOR_PARALLEL_INVALID, f"tensor parallel size {req.tensor} {cand.rejected}", [cand])
        return SizingPlan(req, cand, [cand])
    tried: list[Candidate] = []
    for t in range(1, max(req.accelerator.gpus_per_node, SEARCH_LIMIT) + 1):
        cand = evaluate(req, t)
        tried.append(cand)
        if cand.rejection is None:
            return SizingPlan(req, cand, [c for c in tried if c.t <= req.accelerator.gpus_per_node])
        if cand.rejection is Rejection.NODE:
            raise SizingError(SizingReason.EXCEEDS_NODE, _exceeds_node(req, t), _on_node(req, tried))
    raise SizingError(SizingReason.DOES_NOT_FIT, _never_fits(req, tried), _on_node(req, tried))


def _on_node(req: SizingRequest, tried: list[Candidate]) -> list[Candidate]:
    return [c for c in tried if c.t <= req.accelerator.gpus_per_node]


def _exceeds_node(req: SizingRequest, t: int) -> str:
    acc = req.accelerator
    return (
        f"needs {t} GPUs of {format_bytes(acc.memory_bytes)} per node; nodes have {acc.gpus_per_node} "
        f"(KV budget {req.budget_tokens} tokens × {format_bytes(req.kv_bytes_per_token)}/token = "
        f"{format_bytes(req.kv_bytes_per_token * req.budget_tokens)}, weights "
        f"{format_bytes(req.architecture.weight_bytes)})"
    )


def _never_fits(req: SizingRequest, tried: list[Candidate]) -> str:
    valid = [c for c in tried if c.rejection is Rejection.MEMORY]
    if not valid:
        return "no tensor-parallel size splits the attention and KV heads"
    best = min(valid, key=lambda c: c.need_bytes)
    return (
        f"does not fit at any tensor-parallel size: at best (TP={best.t}) it needs "
        f"{format_bytes(best.need_bytes)} per GPU (weights {format_bytes(best.weights_bytes)} + KV "
        f"{format_bytes(best.kv_budget_bytes)}{draft_terms(best)} + reserve {format_bytes(best.reserved_bytes)}) but "
        f"{format_bytes(best.usable_bytes)} is usable; the KV share stops shrinking past "
        f"{req.architecture.kv_heads} GPUs (KV heads are replicated)"
        + ("; the draft model's weights and KV cache are whole on the first GPU at any size" if req.draft else "")
    )
