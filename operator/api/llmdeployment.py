"""The LLMDeployment custom resource (`llmdeployments.llmop.dev/v1alpha1`): spec, status, names.

One object describes one served model: what to serve, on which GPUs, with how much KV cache; the
operator sizes tensor parallelism and reconciles it into a ConfigMap, Deployment, Service, PDB and
NetworkPolicy.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from llmop.operator.api.accelerator import AcceleratorSpec, AcceleratorType
from llmop.operator.api.base import CRDModel, cel
from llmop.operator.api.engine import EngineSpec, RolloutSpec
from llmop.operator.api.kvcache import KVCacheSpec
from llmop.operator.api.model import AdapterSpec, ModelSpec
from llmop.operator.api.network import NetworkPolicySpec
from llmop.operator.api.parallelism import ParallelismSpec
from llmop.operator.api.pod import PodTemplateOverrides
from llmop.operator.api.status import LLMDeploymentStatusBase
from llmop.operator.api.tenancy import TenancySpec
from llmop.operator.autoscaling.spec import AutoscalingSpec, AutoscalingStatus

GROUP = "llmop.dev"
VERSION = "v1alpha1"
KIND = "LLMDeployment"
PLURAL = "llmdeployments"
SINGULAR = "llmdeployment"
SHORT_NAMES = ["llmd"]
API_VERSION = f"{GROUP}/{VERSION}"
FP16_ON_CPU_ONLY = ("model.quantization fp16 (fp16 weights, fp32 activations) runs on the CPU only: set "
                    "accelerator.type cpu, or use int8 or a 16-bit dtype on GPUs")


class LLMDeploymentSpec(CRDModel):
    """A served LLM: model, accelerator, KV budget, parallelism, engine, replicas, adapters."""

    model_config = CRDModel.model_config | {
        "json_schema_extra": cel(
            (
                "!has(self.kvCache) || !has(self.kvCache.contextLength) || !has(self.engine)"
                " || !has(self.engine.maxModelLen) || self.kvCache.contextLength <= self.engine.maxModelLen",
                "kvCache.contextLength must not exceed engine.maxModelLen",
                ".kvCache.contextLength",
            ),
            (
                "!has(self.rollout) || self.rollout.maxSurge > 0 || self.rollout.maxUnavailable > 0",
                "rollout.maxSurge and rollout.maxUnavailable cannot both be 0",
                ".rollout",
            ),
            (
                "!has(self.model) || !has(self.model.quantization) || self.model.quantization != 'fp16'"
                " || (has(self.accelerator) && has(self.accelerator.type) && self.accelerator.type == 'cpu')",
                FP16_ON_CPU_ONLY,
                ".model.quantization",
            ),
        )
    }

    model: ModelSpec = Field(default_factory=ModelSpec, description="The model to serve.")
    accelerator: AcceleratorSpec = Field(default_factory=AcceleratorSpec, description="GPUs of the engine pods.")
    kv_cache: KVCacheSpec = Field(default_factory=KVCacheSpec, description="KV cache budget per replica.")
    parallelism: ParallelismSpec = Field(default_factory=ParallelismSpec, description="Tensor parallelism.")
    engine: EngineSpec = Field(default_factory=EngineSpec, description="The engine container.")
    replicas: int = Field(
        1,
        ge=0,
        le=1000,
        description=(
            "Engine replicas; written through /scale by the autoscaler when it is enabled (which "
            "keeps it within minReplicas..maxReplicas); leave it out of GitOps manifests then."
        ),
    )
    autoscaling: AutoscalingSpec = Field(
        default_factory=AutoscalingSpec, description="Scale replicas on queue wait time."
    )
    adapters: list[AdapterSpec] = Field(
        default_factory=list,
        max_length=256,
        description="LoRA adapters loaded at start-up.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    tenancy: TenancySpec | None = Field(
        None,
        description=(
            "Let LLMAdapters (tenants' LoRA adapters, in this or granted namespaces) attach to this base; "
            "the engine pods then get an admin listener the operator loads them through. Absent: none attach."
        ),
    )
    rollout: RolloutSpec = Field(default_factory=RolloutSpec, description="Rolling update of engine pods.")
    pod_template: PodTemplateOverrides = Field(
        default_factory=PodTemplateOverrides, description="Labels, annotations and scheduling of engine pods."
    )
    network_policy: NetworkPolicySpec = Field(
        default_factory=NetworkPolicySpec,
        description=(
            "The NetworkPolicy of the engine pods: ingress on engine.port from anywhere (clients, the "
            "router, Prometheus scraping /metrics), on engine.adminPort only from the operator's pods, "
            "nothing else. Enforced only where the cluster's network plugin implements NetworkPolicy "
            "(Calico, Cilium, ...); policies add up, so another NetworkPolicy may admit more."
        ),
    )


    @model_validator(mode="after")
    def _fp16_on_cpu(self) -> "LLMDeploymentSpec":  # the CEL rule's mirror
        if self.model.quantization == "fp16" and self.accelerator.type is not AcceleratorType.CPU:
            raise ValueError(FP16_ON_CPU_ONLY)
        return self


class LLMDeploymentStatus(LLMDeploymentStatusBase):
    """What the operator decided and observed."""

    autoscaling: AutoscalingStatus | None = Field(None, description="Written by the autoscaler.")
    tenant_adapters: int | None = Field(None, description="LLMAdapters bound to this base (written by adapter placement).")
    bound_adapters: list[str] = Field(
        default_factory=list, max_length=10000,
        description="Model ids (namespace/name) of the LLMAdapters bound to this base.")
