"""`status` of an LLMDeployment: what the operator decided, why, and what is running.

Written only by the operator through the status subresource; `status.autoscaling` belongs to the
autoscaler (`llmop.operator.autoscaling`), everything else to the reconciler.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from llmop.operator.api.base import CRDModel

class Condition(CRDModel):
    """A Kubernetes-style condition (metav1.Condition)."""

    type: str = Field(description="Condition type, e.g. Ready (the list's description names them).")
    status: Literal["True", "False", "Unknown"] = Field(description="True, False or Unknown.")
    reason: str = Field("", max_length=1024, description="CamelCase reason, e.g. MinimumReplicasAvailable.")
    message: str = Field("", max_length=32768, description="Human-readable explanation.")
    last_transition_time: str | None = Field(None, description="RFC 3339 time the status last changed.")
    observed_generation: int | None = Field(None, description="metadata.generation the condition is about.")


class SizingStatus(CRDModel):
    """The sizing plan: every term of the per-GPU memory equation, and the limits it implies."""

    tensor_parallel_size: int = Field(description="GPUs per replica (tensor-parallel ranks).")
    kv_bytes_per_token: int = Field(description="KV cache bytes per token for the whole model.")
    budget_tokens: int = Field(description="KV budget asked for, in tokens per replica.")
    weights_bytes_per_gpu: int = Field(description="Weight bytes on each GPU (weights / TP).")
    kv_budget_bytes_per_gpu: int = Field(description="The budget's KV bytes on each GPU.")
    reserved_bytes_per_gpu: int = Field(description="Activation and runtime reserve per GPU.")
    usable_bytes_per_gpu: int = Field(description="memoryUtilization × GPU memory.")
    kv_cache_bytes_per_gpu: int = Field(description="KV cache the engine gets per GPU (all that is left).")
    kv_blocks: int = Field(description="Paged KV blocks per replica.")
    max_model_len: int = Field(description="Longest sequence the engine accepts.")
    max_concurrent_sequences: int = Field(description="Sequences of maxModelLen tokens the cache holds at once.")
    summary: str = Field("", description="The plan in one line.")
    draft_weights_bytes: int | None = Field(
        None, description="Speculative method draft: the draft model's weight bytes, whole on the first GPU.")
    draft_kv_budget_bytes: int | None = Field(
        None, description="Speculative method draft: the draft's KV bytes for the budget, on the first GPU.")
    draft_kv_blocks: int | None = Field(None, description="Speculative method draft: the draft's paged KV blocks.")


class LLMDeploymentStatusBase(CRDModel):
    """Status fields owned by the reconciler."""

    observed_generation: int | None = Field(None, description="metadata.generation last reconciled.")
    model: str | None = Field(None, description="Model name clients use in the OpenAI `model` field.")
    conditions: list[Condition] = Field(
        default_factory=list,
        description="Ready, Progressing, Degraded and SizingValid.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    sizing: SizingStatus | None = Field(None, description="The tensor-parallel sizing plan.")
    replicas: int | None = Field(None, description="Engine pods that exist (scale subresource).")
    ready_replicas: int | None = Field(None, description="Engine pods that are Ready.")
    updated_replicas: int | None = Field(None, description="Engine pods on the current template.")
    selector: str | None = Field(None, description="Label selector of the engine pods (scale subresource).")
    endpoint: str | None = Field(None, description="In-cluster base URL of the OpenAI-compatible API.")
    adapters: int | None = Field(None, description="LoRA adapters configured for start-up.")
