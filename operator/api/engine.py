"""`spec.engine` and `spec.rollout`: the engine container and how its pods are replaced.

Only the engine knobs users commonly set are typed here; anything else in the engine's own config
schema (`llmop.engine.config.EngineConfig`) goes in `overrides`, validated by that schema when the
operator renders the ConfigMap, so the two never drift apart.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from llmop.engine.config import SpeculativeConfig
from llmop.operator.api.base import CRDModel, cel
from llmop.operator.api.model import SOURCE_PATTERN, ArchitectureSpec

ResourceMap = dict[str, str]


class ResourcesSpec(CRDModel):
    """CPU and memory of the engine container; the GPU count is set by sizing, not here."""

    requests: ResourceMap = Field(
        default_factory=dict, description="Resource requests, e.g. {cpu: '4', memory: 32Gi}."
    )
    limits: ResourceMap = Field(default_factory=dict, description="Resource limits, e.g. {memory: 64Gi}.")


DRAFT_FIELDS_MESSAGE = "draftModel, draftArchitecture and draftKvCacheMemoryBytes apply to method draft only"


class SpeculativeSpec(SpeculativeConfig, CRDModel):
    """Speculative decoding (the engine config's `speculative`, same fields and checks, camelCase):
    the engine proposes tokens and verifies them in one forward pass; the output is exactly what it
    would be without. With method draft, `draftModel` is a source like `spec.model.source`: the
    operator fetches or mounts it and renders its path in the pod (`build/sources.py`), and sizing
    counts its weights and KV cache on the GPU that holds it (`sizing/draft.py`)."""

    model_config = CRDModel.model_config | {
        "json_schema_extra": cel(
            ("!has(self.method) || self.method != 'draft' || has(self.draftModel)",
             "method draft needs draftModel (where the draft checkpoint is)", ".draftModel"),
            ("(has(self.method) && self.method == 'draft') || (!has(self.draftModel) && "
             "!has(self.draftArchitecture) && !has(self.draftKvCacheMemoryBytes))", DRAFT_FIELDS_MESSAGE, ".method"),
        )
    }

    draft_model: str | None = Field(
        None, pattern=SOURCE_PATTERN,
        description="method draft (required there): where the draft checkpoint is, in the forms of spec.model.source "
        "(hf://, pvc://, s3://, a path in the engine image), fetched with spec.model.credentialsSecret. A smaller "
        "model with the target's tokenizer; the engine refuses one whose vocabulary or tokenizer differs.")
    draft_architecture: ArchitectureSpec | None = Field(
        None, description="method draft: the draft's architecture for sizing; required when the built-in catalog "
        "does not know draftModel by its name (the operator never reads the checkpoint).")
    draft_kv_cache_memory_bytes: int | None = Field(
        None, ge=1, description="method draft: bytes of the draft's own KV cache (on the first GPU of a replica); "
        "default: as many blocks as the target's cache, sizing splitting the memory left between the two.")

    @model_validator(mode="after")
    def _draft_fields(self) -> "SpeculativeSpec":
        if self.method != "draft" and self.draft_architecture is not None:
            raise ValueError(DRAFT_FIELDS_MESSAGE)
        return self

    def for_engine(self, draft_path: str | None) -> dict[str, Any]:
        """The engine config's `speculative` (validated with the rest of it): these fields, with the
        draft's path in the pod (from `build.sources`) for its source; the architecture is the
        operator's only."""
        fields = self.model_dump(exclude={"draft_architecture", "draft_model"})
        return {**fields, "draft_model": draft_path if self.method == "draft" else None}


class EngineSpec(CRDModel):
    """The engine container (`llmop serve --config /etc/llmop/engine.yaml`)."""

    image: str | None = Field(
        None, max_length=512, description="Engine image; defaults to the operator's configured engine image."
    )
    max_model_len: int | None = Field(
        None, ge=16, le=16777216, description="Longest sequence (prompt + output) in tokens; default: the model's."
    )
    max_num_seqs: int | None = Field(
        None, ge=1, le=4096, description="Most sequences scheduled at once per replica."
    )
    max_num_batched_tokens: int | None = Field(
        None, ge=16, le=1048576, description="Token budget of one engine step (prefill chunks + decodes)."
    )
    enable_prefix_caching: bool | None = Field(
        None, description="Reuse the KV of prompt prefixes across requests (engine default: on)."
    )
    speculative: SpeculativeSpec | None = Field(
        None, description="Speculative decoding (off when absent); pays on outputs that repeat their input."
    )
    port: int = Field(8000, ge=1, le=65535, description="Port of the OpenAI-compatible HTTP API.")
    admin_credential_secret: str | None = Field(
        None, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$",
        description="Secret (key `token`) holding the engine's admin credential; turns on the adapter admin API on "
        "adminPort and lets callers presenting it set request priority. Absent: no admin API, unless spec.tenancy "
        "is set (then the operator creates the Secret <name>-admin).")
    admin_port: int = Field(
        8001, ge=1, le=65535, description="Port of the adapter admin API (with adminCredentialSecret or spec.tenancy); "
        "not in the Service.")
    drain_timeout_seconds: int = Field(
        30, ge=0, le=3600, description="On shutdown, in-flight requests may finish for this long."
    )
    extra_args: list[str] = Field(default_factory=list, description="Extra arguments to `llmop serve`.")
    overrides: dict[str, Any] = Field(
        default_factory=dict,
        description=(
            "Any other engine config fields (snake_case, as in the engine's config file), e.g. "
            "{max_waiting_requests: 512}; checked against the engine's schema."
        ),
    )
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec, description="CPU and memory.")


class RolloutSpec(CRDModel):
    """Rolling update of engine pods. The default replaces one pod at a time and needs no spare GPUs."""

    max_surge: int = Field(0, ge=0, le=1000, description="Extra pods during a rollout (each needs its GPUs).")
    max_unavailable: int = Field(1, ge=0, le=1000, description="Pods that may be down during a rollout.")

