"""`spec.accelerator`: what one engine process runs on, and how much of it sizing may use.

Sizing happens before scheduling, so the accelerator is described, not discovered: memory per
GPU and GPUs per node bound the tensor-parallel size; the selector and tolerations place the pods.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from llmop.operator.api.base import CRDModel
from llmop.operator.api.quantity import QUANTITY_PATTERN


class Toleration(CRDModel):
    """A pod toleration (core/v1 Toleration)."""

    key: str | None = Field(None, description="Taint key to tolerate; empty with Exists matches all.")
    operator: Literal["Exists", "Equal"] = Field("Equal", description="Exists or Equal.")
    value: str | None = Field(None, description="Taint value (Equal).")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        None, description="Taint effect to tolerate; empty matches all effects."
    )
    toleration_seconds: int | None = Field(
        None, ge=0, description="How long a NoExecute taint is tolerated before eviction."
    )


def _default_tolerations() -> list[Toleration]:
    return [Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")]


class AcceleratorSpec(CRDModel):
    """The GPUs engine pods run on."""

    resource_name: str = Field(
        "nvidia.com/gpu",
        min_length=1,
        max_length=253,
        description="Extended resource requested per tensor-parallel rank, e.g. nvidia.com/gpu.",
    )
    memory_per_gpu: str = Field(
        "80Gi",
        alias="memoryPerGPU",
        pattern=QUANTITY_PATTERN,
        description="Memory of one GPU as a quantity, e.g. 80Gi (H100/A100-80GB), 24Gi (L4).",
    )
    gpus_per_node: int = Field(
        8, alias="gpusPerNode", ge=1, le=64, description="GPUs on one node: the largest tensor-parallel size."
    )
    memory_utilization: float = Field(
        0.9, gt=0, le=1, description="Share of each GPU's memory sizing may plan for (the rest is headroom)."
    )
    reserved_memory: str = Field(
        "2Gi",
        pattern=QUANTITY_PATTERN,
        description="Per-GPU memory reserved for activations, CUDA context and the sampler.",
    )
    product: str | None = Field(
        None,
        max_length=253,
        description="Only nodes whose nvidia.com/gpu.product label equals this (GPU feature discovery).",
    )
    node_selector: dict[str, str] = Field(
        default_factory=dict, description="Extra node labels the engine pods require."
    )
    tolerations: list[Toleration] = Field(
        default_factory=_default_tolerations,
        description="Tolerations of the engine pods; by default the nvidia.com/gpu NoSchedule taint.",
    )
