"""`spec.accelerator`: what one engine process runs on, and how much of it sizing may use.

Sizing happens before scheduling, so the accelerator is described, not discovered: memory per
GPU and GPUs per node bound the tensor-parallel size; the selector and tolerations place the pods.
`type: cpu` runs the engine on CPU nodes (small models, development clusters): no extended
resource is requested, no GPU toleration is added, and "memory per GPU" is the memory one
engine rank may use.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field, model_validator

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


GPU_TOLERATION = Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")


class AcceleratorType(StrEnum):
    """What an engine rank runs on; the pod's resources, tolerations and engine device follow."""

    GPU = "gpu"
    CPU = "cpu"


class AcceleratorSpec(CRDModel):
    """The GPUs (or CPUs) engine pods run on."""

    type: AcceleratorType = Field(
        "gpu",
        validate_default=True,
        description="gpu (default): one extended resource per rank; cpu: the engine runs on the CPU "
        "(no GPU requested, memoryPerGPU is the memory of one rank).",
    )

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
    tolerations: list[Toleration] | None = Field(
        None,
        description="Tolerations of the engine pods; unset: the nvidia.com/gpu NoSchedule taint for "
        "type gpu, none for type cpu.",
    )

    @model_validator(mode="after")
    def _cpu_has_no_gpu_fields(self) -> "AcceleratorSpec":
        if self.type is AcceleratorType.CPU and self.product:
            raise ValueError("accelerator.product selects a GPU model: it cannot be set with type cpu")
        return self

    def pod_tolerations(self) -> list[Toleration]:
        """The tolerations the engine pods get: the spec's, or the type's default."""
        if self.tolerations is not None:
            return list(self.tolerations)
        return [GPU_TOLERATION] if self.type is AcceleratorType.GPU else []

    def pod_resources(self, ranks: int) -> dict[str, str]:
        """The extended resource one pod of `ranks` tensor-parallel ranks requests (none on CPU)."""
        return {self.resource_name: str(ranks)} if self.type is AcceleratorType.GPU else {}
