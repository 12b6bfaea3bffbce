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

ResourceMap = dict[str, str]


class ResourcesSpec(CRDModel):
    """CPU and memory of the engine container; the GPU count is set by sizing, not here."""

    requests: ResourceMap = Field(
        default_factory=dict, description="Resource requests, e.g. {cpu: '4', memory: 32Gi}."
    )
    limits: ResourceMap = Field(default_factory=dict, description="Resource limits, e.g. {memory: 64Gi}.")


DRAFT_UNSUPPORTED = ("method draft is not available in an LLMDeployment yet: the operator does not mount a "
                     "draft checkpoint in the pod; use method ngram")


class SpeculativeSpec(SpeculativeConfig, CRDModel):
    """Speculative decoding (the engine config's `speculative`, same fields and checks, camelCase):
    the engine proposes tokens and verifies them in one forward pass; the output is exactly what it
    would be without. Method draft is refused here until the operator provides the draft
    checkpoint to the pod (the engine would fail to start without it)."""

    model_config = CRDModel.model_config | {
        "json_schema_extra": cel(
            ("!has(self.method) || self.method != 'draft'", DRAFT_UNSUPPORTED, ".method"),
            ("!has(self.draftModel) && !has(self.draftKvCacheMemoryBytes)",
             "draftModel and draftKvCacheMemoryBytes apply to method draft only", ".draftModel"),
        )
    }

    @model_validator(mode="after")
    def _no_draft_yet(self) -> "SpeculativeSpec":
        if self.method == "draft":
            raise ValueError(DRAFT_UNSUPPORTED)
        return self


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
        "adminPort and lets callers presenting it set request priority. Absent: no admin API.")
    admin_port: int = Field(
        8001, ge=1, le=65535, description="Port of the adapter admin API (with adminCredentialSecret); not in the "
        "Service.")
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

