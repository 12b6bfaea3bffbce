"""The engine's config file for one LLMDeployment: the spec's engine knobs, the sizing plan's
limits and KV budget, the source paths (and their volumes as the admin API's adapter roots), the
admin listener when there is a credential (tenancy.py) and the tenants' adapter manifest, checked
against the engine's own schema.

`spec.engine.overrides` reaches any other EngineConfig field, but not the ones the operator
decides (the Service, sizing and sources depend on those): setting one is a spec error.
"""

from __future__ import annotations

from pydantic import ValidationError

from llmop.engine.config import AdapterSource, EngineConfig
from llmop.operator.api.accelerator import AcceleratorType
from llmop.operator.api.llmdeployment import LLMDeploymentSpec
from llmop.operator.build.errors import SpecCondition, SpecError, SpecReason
from llmop.operator.build.sources import Sources
from llmop.operator.build.tenancy import ADAPTERS_DIR, ADMIN_TOKEN_KEY, MANIFEST_FILE, admin_secret
from llmop.operator.sizing.plan import SizingPlan

CONFIG_DIR = "/etc/llmop"
CONFIG_FILE = "engine.yaml"
ADMIN_DIR = "/var/run/llmop/admin"  # the admin credential Secret, mounted read-only

# EngineConfig fields the operator sets, and the spec field a user sets instead.
OPERATOR_FIELDS = {
    "model": "spec.model.source", "served_model_name": "spec.model.name",
    "tensor_parallel_size": "spec.parallelism.tensor", "max_model_len": "spec.engine.maxModelLen",
    "max_num_seqs": "spec.engine.maxNumSeqs", "max_num_batched_tokens": "spec.engine.maxNumBatchedTokens",
    "enable_prefix_caching": "spec.engine.enablePrefixCaching", "speculative": "spec.engine.speculative",
    "block_size": "spec.kvCache.blockSize", "kv_cache_dtype": "spec.kvCache.dtype",
    "quantization": "spec.model.quantization",
    "kv_cache_memory_bytes": "spec.kvCache (sizing)", "kv_cache_memory_fraction": "spec.kvCache (sizing)",
    "host": "(always 0.0.0.0)", "port": "spec.engine.port",
    "drain_timeout_s": "spec.engine.drainTimeoutSeconds", "adapters": "spec.adapters",
    "device": "spec.accelerator.type",
    "admin_port": "spec.engine.adminPort", "admin_host": "(always 0.0.0.0)",
    "admin_token_file": "spec.engine.adminCredentialSecret", "adapter_roots": "(the mounted source volumes)",
    "adapter_manifest": "spec.tenancy (LLMAdapters)",
}  # fmt: skip


def served_name(spec: LLMDeploymentSpec, name: str) -> str:
    """The name clients send as `model`: spec.model.name, else the LLMDeployment's name."""
    return spec.model.name or name


def engine_config(spec: LLMDeploymentSpec, name: str, plan: SizingPlan, sources: Sources) -> EngineConfig:
    """The EngineConfig the pods run; SpecError(Degraded, InvalidEngineConfig) when it is invalid."""
    taken = sorted(set(spec.engine.overrides) & set(OPERATOR_FIELDS))
    if taken:
        raise SpecError(SpecCondition.DEGRADED, SpecReason.INVALID_ENGINE_CONFIG, "; ".join(
            f"engine.overrides.{k} is decided by the operator: set {OPERATOR_FIELDS[k]}" for k in taken))
    dtype = spec.engine.overrides.get("dtype", "auto")
    if spec.model.quantization == "fp16" and dtype not in ("auto", "float32"):
        raise SpecError(SpecCondition.DEGRADED, SpecReason.INVALID_ENGINE_CONFIG,
                        f"engine.overrides.dtype {dtype} with model.quantization fp16: fp16 weights run with "
                        "float32 activations (leave dtype unset or float32)")
    engine = spec.engine
    fields = {
        "model": sources.model,
        "served_model_name": served_name(spec, name),
        "tensor_parallel_size": plan.tensor_parallel_size,
        "max_model_len": plan.request.max_model_len,
        "block_size": spec.kv_cache.block_size,
        # Resolved here, so the engine stores the bytes per token that sizing counted.
        "kv_cache_dtype": plan.request.resolved_kv_dtype,
        "quantization": spec.model.quantization,
        "kv_cache_memory_bytes": plan.kv_cache_bytes_per_gpu,
        "host": "0.0.0.0",
        "port": engine.port,
        "drain_timeout_s": float(engine.drain_timeout_seconds),
        "adapters": [
            AdapterSource(name=a.name, source=path, pinned=a.pinned)
            for a, path in zip(spec.adapters, sources.adapters)
        ],
        "adapter_roots": sources.roots(),
    }
    # A GPU pod says "auto": CUDA where the node has it, so one image serves both.
    fields["device"] = "cpu" if spec.accelerator.type is AcceleratorType.CPU else "auto"
    if admin_secret(spec, name):  # docs/security.md
        fields.update(admin_host="0.0.0.0", admin_port=engine.admin_port,
                      admin_token_file=f"{ADMIN_DIR}/{ADMIN_TOKEN_KEY}")
    if spec.tenancy is not None:  # docs/adapters.md
        fields["adapter_manifest"] = f"{ADAPTERS_DIR}/{MANIFEST_FILE}"
    if engine.max_num_seqs is not None:
        fields["max_num_seqs"] = engine.max_num_seqs
    if engine.max_num_batched_tokens is not None:
        fields["max_num_batched_tokens"] = engine.max_num_batched_tokens
    if engine.enable_prefix_caching is not None:
        fields["enable_prefix_caching"] = engine.enable_prefix_caching
    if engine.speculative is not None:
        fields["speculative"] = engine.speculative.for_engine(sources.draft)
    try:
        return EngineConfig.model_validate({**engine.overrides, **fields})
    except ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'engine'}: {e['msg']}" for e in err.errors()
        )
        raise SpecError(SpecCondition.DEGRADED, SpecReason.INVALID_ENGINE_CONFIG,
                        f"the engine rejects its config: {problems}") from err
