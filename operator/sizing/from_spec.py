"""From an LLMDeploymentSpec to a SizingRequest: which architecture, budget and limits apply.

Resolution order: `spec.model.architecture`, else the catalog by source or name, and no source at
all means the engine's embedded model. Budget: budgetTokens, else concurrency × contextLength, else
one sequence of maxModelLen tokens (the least that lets the engine accept its longest request).
A draft model (speculative method draft) resolves the same way from `draftArchitecture` and
`draftModel`, and is refused where the engine would refuse it at start: another vocabulary size, or
a context shorter than maxModelLen (when the architectures say).
"""

from __future__ import annotations

import dataclasses

from llmop.operator.api.accelerator import AcceleratorType
from llmop.operator.api.llmdeployment import LLMDeploymentSpec
from llmop.operator.api.model import ArchitectureSpec
from llmop.operator.api.quantity import parse_bytes
from llmop.operator.sizing.architecture import FLOAT_DTYPES, Accelerator, Architecture
from llmop.operator.sizing.catalog import EMBEDDED, lookup
from llmop.operator.sizing.draft import DraftRequest
from llmop.operator.sizing.plan import SizingError, SizingPlan, SizingReason, SizingRequest, size


def _declared_or_known(spec: LLMDeploymentSpec) -> Architecture:
    """The model's architecture as declared or known (before `_served`); SizingError
    (ArchitectureUnknown) when there is none."""
    model = spec.model
    found = _resolve(model.architecture, model.source, model.name)
    if found is None:
        raise SizingError(SizingReason.ARCHITECTURE_UNKNOWN, _unknown(model.source, "spec.model.architecture"))
    return found


def draft_for(spec: LLMDeploymentSpec, target: Architecture, max_model_len: int) -> DraftRequest | None:
    """The draft model of `speculative.method: draft` (None without one); SizingError
    (DraftArchitectureUnknown, DraftIncompatible) when it cannot be sized or would be refused."""
    speculative = spec.engine.speculative
    if speculative is None or speculative.method != "draft":
        return None
    found = _resolve(speculative.draft_architecture, speculative.draft_model, None)
    if found is None:
        raise SizingError(SizingReason.DRAFT_ARCHITECTURE_UNKNOWN,
                          _unknown(speculative.draft_model, "spec.engine.speculative.draftArchitecture"))
    if None not in (found.vocab_size, target.vocab_size) and found.vocab_size != target.vocab_size:
        raise SizingError(SizingReason.DRAFT_INCOMPATIBLE, f"the draft model's vocabulary has {found.vocab_size} "
                          f"tokens, the model's {target.vocab_size}; a draft must use the model's tokenizer")
    if found.max_context_length is not None and found.max_context_length < max_model_len:
        raise SizingError(SizingReason.DRAFT_INCOMPATIBLE, f"the draft model's context ({found.max_context_length}) "
                          f"is shorter than maxModelLen {max_model_len}; set spec.engine.maxModelLen to at most "
                          f"{found.max_context_length}")
    return DraftRequest(_served(found, spec, _float_dtype(spec)), speculative.draft_kv_cache_memory_bytes)


def _resolve(declared: ArchitectureSpec | None, source: str | None, name: str | None) -> Architecture | None:
    """A declared architecture, else the embedded model's for no source, else the catalog's."""
    if declared is not None:
        return Architecture(**declared.model_dump())
    if source is None:
        return lookup(EMBEDDED)
    return lookup(source) or lookup(name)


def _pinned_dtype(spec: LLMDeploymentSpec) -> str | None:
    """The float dtype `engine.overrides.dtype` pins the engine to (None: `auto`, the engine's choice)."""
    dtype = spec.engine.overrides.get("dtype")
    return dtype if dtype in FLOAT_DTYPES else None


def _float_dtype(spec: LLMDeploymentSpec) -> str | None:
    """The float dtype sizing counts the engine computing in: the one `engine.overrides` pins, else
    on CPU nodes fp32, the widest the engine may pick there (`dtype: auto` is bf16 or fp32 by the
    CPU, and `quantization: auto` may store fp16 weights over fp32 activations: all no larger). None: the architecture's (GPUs run it)."""
    pinned = _pinned_dtype(spec)
    return pinned or ("float32" if spec.accelerator.type is AcceleratorType.CPU else None)


def _served(arch: Architecture, spec: LLMDeploymentSpec, float_dtype: str | None) -> Architecture:
    """The weights as the engine holds them (the draft's too), computing in `float_dtype` (None: the
    architecture's if a float, else bf16, `dtype: auto` on CUDA: the engine serves an fp8/int8/int4
    checkpoint dequantized); one byte each with int8 quantization (over those activations: bf16
    when none is given); two with fp16, over fp32 activations."""
    if float_dtype is not None or arch.dtype not in FLOAT_DTYPES:
        arch = dataclasses.replace(arch, dtype=float_dtype or "bfloat16")
    if spec.model.quantization == "int8":
        return dataclasses.replace(arch, dtype="int8", activation_dtype=float_dtype or "bfloat16")
    if spec.model.quantization == "fp16":
        return dataclasses.replace(arch, dtype="float16", activation_dtype="float32")
    return arch


def _unknown(source: str | None, field: str) -> str:
    return (f"the operator does not know the architecture of {source!r}; "
            f"give {field} (parameters, layers, attentionHeads, kvHeads, headDim)")


def request_for(spec: LLMDeploymentSpec) -> SizingRequest:
    """The sizing inputs of a spec."""
    plain = _declared_or_known(spec)
    arch = _served(plain, spec, _float_dtype(spec))
    # The KV cache dtype is rendered, so the engine keeps it whatever it computes in: the one the
    # architecture's own dtype gives, not the widened CPU one (fp32 KV would halve the tokens held).
    nominal = _served(plain, spec, _pinned_dtype(spec))
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
    draft = draft_for(spec, arch, max_model_len)
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
        kv_dtype=nominal.kv_dtype(kv.dtype),
        tensor=None if tensor == "auto" else int(tensor),
        draft=draft,
    )


def plan_for(spec: LLMDeploymentSpec) -> SizingPlan:
    """The sizing plan of a spec; SizingError with a condition reason when it cannot work."""
    return size(request_for(spec))
