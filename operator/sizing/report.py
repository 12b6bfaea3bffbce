"""The sizing plan as text (for `llmop size`) and as `status.sizing` (for the LLMDeployment)."""

from __future__ import annotations

from llmop.operator.api.quantity import format_bytes
from llmop.operator.api.status import SizingStatus
from llmop.operator.sizing.plan import Candidate, SizingError, SizingPlan, SizingRequest, draft_terms


def _inputs(req: SizingRequest) -> list[str]:
    a, acc = req.architecture, req.accelerator
    kv = req.kv_bytes_per_token
    return [
        f"model        {a.parameters / 1e9:.2f}B parameters, {a.layers} layers, {a.attention_heads} heads, "
        f"{a.kv_heads} KV heads × {a.head_dim}, {a.dtype}",
        f"weights      {format_bytes(a.weight_bytes)}",
        f"KV per token 2 × {a.layers} layers × {a.kv_heads} KV heads × {a.head_dim} × "
        f"{kv // (2 * a.layers * a.kv_heads * a.head_dim)} B = {format_bytes(kv)}",
        f"KV budget    {req.budget_tokens} tokens × {format_bytes(kv)} = {format_bytes(kv * req.budget_tokens)}",
        f"GPU          {format_bytes(acc.memory_bytes)} × {acc.utilization:g} = "
        f"{format_bytes(acc.usable_bytes)} usable, reserve {format_bytes(acc.reserved_bytes)}, "
        f"{acc.gpus_per_node} per node",
    ] + _draft_inputs(req)


def _draft_inputs(req: SizingRequest) -> list[str]:
    if req.draft is None:
        return []
    d, kv_dtype = req.draft, req.resolved_kv_dtype
    cache = (f"{format_bytes(d.kv_cache_bytes)} (draftKvCacheMemoryBytes)" if d.kv_cache_bytes is not None
             else f"as many blocks as the model's: {req.budget_tokens} tokens × "
             f"{format_bytes(d.kv_bytes_per_token(kv_dtype))}/token = "
             f"{format_bytes(d.kv_budget_bytes(kv_dtype, req.budget_tokens))}")
    return [
        f"draft        {d.architecture.parameters / 1e9:.2f}B parameters, {d.architecture.layers} layers, "
        f"weights {format_bytes(d.weight_bytes)}, on the first GPU",
        f"draft KV     {cache}",
    ]


def _row(c: Candidate) -> str:
    verdict = c.rejected or "fits"
    return (
        f"  TP={c.t:<3} weights {format_bytes(c.weights_bytes):>11} + KV {format_bytes(c.kv_budget_bytes):>11}"
        f" (÷{c.kv_ranks}){draft_terms(c)} + reserve {format_bytes(c.reserved_bytes)} = {format_bytes(c.need_bytes):>11}"
        f"  {verdict}"
    )


def render(req: SizingRequest, plan: SizingPlan | None = None, error: SizingError | None = None) -> str:
    """Every term, every candidate, and the verdict."""
    lines = _inputs(req) + ["per GPU:"]
    candidates = plan.candidates if plan else (error.candidates if error else [])
    lines += [_row(c) for c in candidates]
    if plan is not None:
        lines += [
            f"chosen       tensor parallel size {plan.tensor_parallel_size}",
            f"KV cache     {format_bytes(plan.kv_cache_bytes_per_gpu)} per GPU = {plan.kv_blocks} blocks of "
            f"{req.block_size} tokens ({plan.kv_capacity_tokens} tokens)",
            f"limits       maxModelLen {req.max_model_len}, {plan.max_concurrent_sequences} concurrent "
            f"sequences at maxModelLen",
        ]
        if req.draft is not None:
            lines.append(f"draft KV     {plan.draft_kv_blocks} blocks on the first GPU")
    if error is not None:
        lines.append(f"does not fit ({error.reason}): {error}")
    return "\n".join(lines)


def to_status(plan: SizingPlan) -> SizingStatus:
    """`status.sizing` of an LLMDeployment."""
    c, req = plan.chosen, plan.request
    return SizingStatus(
        tensor_parallel_size=c.t,
        kv_bytes_per_token=req.kv_bytes_per_token,
        budget_tokens=req.budget_tokens,
        weights_bytes_per_gpu=c.weights_bytes,
        kv_budget_bytes_per_gpu=c.kv_budget_bytes,
        reserved_bytes_per_gpu=c.reserved_bytes,
        usable_bytes_per_gpu=c.usable_bytes,
        kv_cache_bytes_per_gpu=plan.kv_cache_bytes_per_gpu,
        kv_blocks=plan.kv_blocks,
        max_model_len=req.max_model_len,
        max_concurrent_sequences=plan.max_concurrent_sequences,
        summary=plan.summary(),
        **_draft_status(plan),
    )


def _draft_status(plan: SizingPlan) -> dict[str, int]:
    if plan.request.draft is None:
        return {}
    c = plan.chosen
    return dict(draft_weights_bytes=c.draft_weights_bytes, draft_kv_budget_bytes=c.draft_kv_budget_bytes,
                draft_kv_blocks=plan.draft_kv_blocks)
