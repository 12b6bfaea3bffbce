"""From an LLMDeploymentSpec to a SizingRequest: which architecture, budget and limits apply.

Resolution order: `spec.model.architecture`, else the catalog by source or name, and no source at
all means the engine's embedded model. Budget: budgetTokens, else concurrency × contextLength, else
one sequence of maxModelLen tokens (the least that lets the engine accept its longest request).
"""

from __future__ import annotations

import dataclasses

from llmop.operator.api.llmdeployment import LLMDeploymentSpec
from llmop.operator.api.quantity import parse_bytes
from llmop.operator.sizing.architecture import Accelerator, Architecture
from llmop.operator.sizing.catalog import EMBEDDED, lookup
from llmop.operator.sizing.plan import SizingError, SizingPlan, SizingReason, SizingRequest, size


def architecture_for(spec: LLMDeploymentSpec) -> Architecture:
    """The architecture sizing uses (weights at one byte with int8 quantization); SizingError
    (ArchitectureUnknown) when there is none."""
    arch = _architecture(spec)
    return dataclasses.replace(arch, dtype="int8") if spec.model.quantization == "int8" else arch


def _architecture(spec: LLMDeploymentSpec) -> Architecture:
    model = spec.model
    if model.architecture is not None:
        return Architecture(**model.architecture.model_dump())
    if model.source is None:
        return lookup(EMBEDDED)
    found = lookup(model.source) or lookup(model.name)
    if found is None:
        raise SizingError(
            SizingReason.ARCHITECTURE_UNKNOWN,
            f"the operator does not know the architecture of {model.source!r}; "
            "give spec.model.architecture (parameters, layers, attentionHeads, kvHeads, headDim)",
        )
    return found


def request_for(spec: LLMDeploymentSpec) -> SizingRequest:
    """The sizing inputs of a spec."""
    arch = architecture_for(spec)
    max_model_len = spec.engine.max_model_len or arch.max_context_length
    if max_model_len is None:
        raise SizingError(
            SizingReason.MAX_MODEL_LEN_UNKNOWN,
            "set spec.engine.maxModelLen or spec.model.architecture.maxContextLength",
        )
    kv = spec.kv_cache
    if kv.budget_tokens is not None:
        budget = kv.budget_tokens
    elif kv.concurrency is not None and kv.context_length is not None:
        if kv.context_length > max_model_len:
            raise SizingError(
                SizingReason.CONTEXT_TOO_LONG,
                f"kvCache.contextLength {kv.context_length} exceeds maxModelLen {max_model_len}",
            )
        budget = kv.concurrency * kv.context_length
    else:
        budget = max_model_len
    acc = spec.accelerator
    tensor = spec.parallelism.tensor
    return SizingRequest(
        architecture=arch,
        accelerator=Accelerator(
            memory_bytes=parse_bytes(acc.memory_per_gpu),
            gpus_per_node=acc.gpus_per_node,
            utilization=acc.memory_utilization,
            reserved_bytes=parse_bytes(acc.reserved_memory),
        ),
        budget_tokens=budget,
        max_model_len=max_model_len,
        block_size=kv.block_size,
        kv_dtype=kv.dtype,
        tensor=None if tensor == "auto" else int(tensor),
    )


def plan_for(spec: LLMDeploymentSpec) -> SizingPlan:
    """The sizing plan of a spec; SizingError with a condition reason when it cannot work."""
    return size(request_for(spec))
