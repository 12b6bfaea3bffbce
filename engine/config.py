"""The engine's configuration schema: flags, config files, and what the operator writes.

It lives in a torch-free module because both sides use it: `llmop serve --config FILE` reads it,
and the operator imports it to render the engine ConfigMap of every LLMDeployment it reconciles.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

_PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
_DNS_LABEL = re.compile(r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?")  # Kubernetes' IsDNS1123Label
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*")  # and <= 253


def adapter_name_error(name: str) -> str | None:
    """Why `name` cannot name an adapter (None: it can). Either a plain name (letters, digits, `.`,
    `_`, `:`, `-`; at most 128 characters) or a tenant's `<namespace>/<name>`: a Kubernetes
    namespace (DNS-1123 label) and an object name (DNS-1123 subdomain, at most 253 characters).
    No other slash: a name is also a URL path segment of the admin API and a metric label."""
    if "/" not in name:
        if _PLAIN_NAME.fullmatch(name):
            return None
        return ("an adapter name starts with a letter or digit and has at most 128 letters, digits, '.', '_', ':' "
                f"and '-', or is <namespace>/<name>; got {name!r}")
    namespace, _, obj = name.partition("/")
    if _DNS_LABEL.fullmatch(namespace) and _DNS_SUBDOMAIN.fullmatch(obj) and len(obj) <= 253:
        return None
    return (f"an adapter name with a slash must be <namespace>/<name>: a Kubernetes namespace (DNS-1123 label: "
            f"lowercase letters, digits and '-', at most 63), one '/', and an object name (DNS-1123 subdomain: "
            f"lowercase letters, digits, '-' and '.', at most 253); got {name!r}")


class AdapterSource(BaseModel):
    """A LoRA adapter to load: a name requests select it by, and a PEFT directory."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, description="Name requests select the adapter by (the OpenAI `model` field): "
                      "a plain name, or a tenant's <namespace>/<name>")
    source: str = Field(min_length=1, description="Path to a PEFT adapter directory")
    pinned: bool = False

    @field_validator("name")
    @classmethod
    def _check_name(cls, name: str) -> str:
        error = adapter_name_error(name)
        if error is not None:
            raise PydanticCustomError("adapter_name", "{error}", {"error": error})
        return name


class AdapterLoad(AdapterSource):
    """An adapter loaded at run time (the admin API's body, an adapter manifest's entry): the same
    fields, and optionally a directory the load is confined to and what the adapter must be."""

    root: str | None = Field(None, min_length=1, description="A directory inside adapter_roots the source must "
                             "lie in, symlinks followed (a tenant's directory on a shared volume); 403 otherwise")
    rank: int | None = Field(None, ge=1, description="The rank the adapter must have (its largest); 422 otherwise")
    alpha: float | None = Field(None, gt=0, description="The lora_alpha the adapter must have; 422 otherwise")


class SpeculativeConfig(BaseModel):
    """Speculative decoding: propose tokens cheaply, verify them in the target's forward pass; the
    output distribution is exactly the target's (docs/engine.md)."""

    model_config = ConfigDict(extra="forbid")
    method: Literal["ngram", "draft"] = Field(
        "ngram", description="ngram: prompt lookup in the request's own tokens; draft: a smaller model with the "
        "same tokenizer (draft_model) proposes")
    num_tokens: int = Field(4, ge=1, le=16, description="Tokens proposed per request and step")
    ngram_min: int = Field(2, ge=1, le=64, description="Shortest suffix looked up")
    ngram_max: int = Field(4, ge=1, le=64, description="Longest suffix looked up")
    max_batch_size: int = Field(8, ge=1, le=4096, description="Speculate only in steps with at most this many running requests")
    min_acceptance: float = Field(
        0.1, ge=0.0, le=1.0, description="A request whose acceptance rate falls below this (after 16 proposed "
        "tokens) stops speculating")
    draft_model: str | None = Field(
        None, min_length=1, description="method draft: HF checkpoint directory or GGUF file of the draft model "
        "(same vocabulary as the target)")
    draft_kv_cache_memory_bytes: int | None = Field(
        None, ge=1, description="method draft: the draft's own KV cache budget; default: as many blocks as the "
        "target's cache")

    @model_validator(mode="after")
    def _check(self) -> "SpeculativeConfig":
        if self.ngram_min > self.ngram_max:
            raise ValueError("ngram_min must not exceed ngram_max")
        if self.method == "draft" and self.draft_model is None:
            raise ValueError("method draft needs draft_model (the draft checkpoint's path)")
        if self.method != "draft" and (self.draft_model is not None or self.draft_kv_cache_memory_bytes is not None):
            raise ValueError("draft_model and draft_kv_cache_memory_bytes apply to method draft only")
        return self


class EngineConfig(BaseModel):
    """Everything one engine process needs; every field has a default that runs on a laptop CPU."""

    model_config = ConfigDict(extra="forbid")

    model: str | None = Field(
        None, description="HF checkpoint directory or GGUF file; None means the embedded SmolLM2-135M"
    )
    served_model_name: str | None = Field(None, description="Name clients use in `model`")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="auto: bfloat16 on CUDA and on CPUs with AVX-512 BF16 or AMX, else float32"
    )
    quantization: Literal["auto", "none", "int8", "fp16"] = Field(
        "auto", description="int8: linear layers' weights stored as int8 with per-channel scales (weight-only); "
        "fp16: stored as fp16 for fp32 activations on the CPU (fbgemm); auto: fp16 where dtype is auto too, on "
        "an x86 CPU without AMX whose torch has fbgemm's fp16 GEMM, none otherwise (docs/engine.md)"
    )
    device: Literal["auto", "cpu", "cuda"] = "auto"
    tensor_parallel_size: int = Field(
        1, ge=1, description="Ranks the model is split over (one worker process and, on CUDA, one GPU each); it "
        "must divide the attention heads and the MLP width, and divide or be a multiple of the KV heads")
    worker_processes: bool = Field(
        False, description="Run the model in a worker process even at tensor_parallel_size 1 (always above 1)")
    worker_timeout_s: float = Field(
        120.0, gt=0, description="A rank that does not answer a step within this many seconds fails the engine")
    seed: int = 0

    # Limits.
    max_model_len: int | None = Field(None, ge=16, description="Defaults to the model's context")
    max_num_seqs: int = Field(32, ge=1, le=4096)
    max_num_batched_tokens: int = Field(1024, ge=16)

    # KV cache: a byte budget, or a fraction of free device memory (CPU: of available RAM).
    block_size: int = Field(16, ge=1, le=256)
    kv_cache_dtype: Literal["auto", "float32", "bfloat16", "float16", "fp8_e4m3"] = Field(
        "auto", description="KV cache dtype; auto: the model's dtype; fp8_e4m3 needs the Triton attention kernels"
    )
    kv_cache_memory_bytes: int | None = Field(None, ge=1)
    kv_cache_memory_fraction: float = Field(0.2, gt=0.0, le=0.95)
    enable_prefix_caching: bool = Field(
        True, description="Reuse the KV of prompt prefixes computed for earlier requests (same adapter and cache_salt)"
    )
    prefix_caching_hash: Literal["sha256", "xxh3_128"] = Field(
        "sha256", description="Hash naming cached blocks; xxh3_128 is faster, needs the xxhash package, and is not "
        "collision-resistant against crafted prompts"
    )

    speculative: SpeculativeConfig | None = Field(None, description="Speculative decoding; None: off")

    # Backends, chosen by name; "auto" picks Triton on CUDA and torch on the CPU.
    attention_backend: Literal["auto", "torch", "triton"] = "auto"
    lora_backend: Literal["auto", "torch", "triton"] = "auto"

    # Multi-LoRA.
    max_loras: int = Field(4, ge=0)
    max_cpu_loras: int = Field(64, ge=0)
    max_lora_rank: int = Field(64, ge=1)
    adapters: list[AdapterSource] = Field(default_factory=list)
    adapter_manifest: str | None = Field(
        None, description="JSON file of the adapters to restore at start-up, before /ready: {\"adapters\": [{name, "
        "source, pinned}]} (the operator's, from a ConfigMap); each entry is loaded like POST /v1/adapters (inside "
        "adapter_roots) and one that fails is listed under `failed` in GET /v1/adapters; an absent file: none")

    # Server and admission control.
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    max_waiting_requests: int = Field(256, ge=1, description="Beyond this, 429 with Retry-After")
    queue_timeout_s: float = Field(60.0, gt=0, description="A request waiting longer gets 503")
    max_prompt_tokens: int | None = Field(None, ge=1, description="Defaults to max_model_len")
    max_request_body_bytes: int = Field(4 * 1024 * 1024, ge=1024)
    drain_timeout_s: float = Field(30.0, ge=0)

    # Admin listener and trust (docs/security.md).
    admin_port: int | None = Field(
        None, ge=0, le=65535, description="Port of the admin API (adapter loading and unloading); None: no admin "
        "API. It needs admin_token_file")
    admin_host: str = Field("127.0.0.1", description="Address the admin API listens on")
    admin_token_file: str | None = Field(
        None, description="File holding the admin bearer credential; it also marks inference requests as trusted "
        "(their `priority` is honoured)")
    adapter_roots: list[str] = Field(
        default_factory=list, description="Directories the admin API may load adapters from (absolute); none: "
        "it loads nothing")

    @model_validator(mode="after")
    def _check(self) -> "EngineConfig":
        if self.max_loras > self.max_cpu_loras and self.max_cpu_loras > 0:
            raise ValueError("max_loras must not exceed max_cpu_loras")
        if self.admin_port is not None and not self.admin_token_file:
            raise ValueError("admin_port needs admin_token_file: the admin API never runs without a credential")
        if self.admin_port is not None and self.admin_port != 0 and self.admin_port == self.port:
            raise ValueError("admin_port must differ from port: the admin API has its own listener")
        relative = [r for r in self.adapter_roots if not r.startswith("/")]
        if relative:
            raise ValueError(f"adapter_roots must be absolute paths: {relative}")
        return self

    @classmethod
    def from_file(cls, path: str | Path) -> "EngineConfig":
        """Read a YAML or JSON config file (JSON is YAML)."""
        data = yaml.safe_load(Path(path).read_text()) or {}
        return cls.model_validate(data)

    def to_yaml(self) -> str:
        """The config file the operator writes into the engine ConfigMap."""
        return yaml.safe_dump(self.model_dump(mode="json", exclude_none=True), sort_keys=True)
