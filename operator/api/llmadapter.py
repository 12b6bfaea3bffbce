"""The LLMAdapter custom resource (`llmadapters.llmop.dev/v1alpha1`): a tenant's LoRA adapter on a
shared base model.

It lives in the tenant's namespace and names its base `LLMDeployment` (often in the platform's
namespace). When the base grants the tenant's namespace (`spec.tenancy` of the base), the operator
loads the adapter into every ready engine pod of the base through the engine's admin API, without
restarting a pod, and clients select it with the model id `<namespace>/<name>`.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from llmop.operator.api.base import CRDModel, cel
from llmop.operator.api.llmdeployment import GROUP, VERSION
from llmop.operator.api.model import SOURCE_PATTERN
from llmop.operator.api.status import Condition
from llmop.operator.api.tenancy import DNSLabel

KIND = "LLMAdapter"
PLURAL = "llmadapters"
SINGULAR = "llmadapter"
SHORT_NAMES = ["llma"]
API_VERSION = f"{GROUP}/{VERSION}"


def model_id(namespace: str, name: str) -> str:
    """The OpenAI `model` clients send for an adapter: namespaced, so tenants never collide."""
    return f"{namespace}/{name}"


class Phase(StrEnum):
    """Where an adapter is: waiting to bind or for pods, being loaded, on every pod, or refused."""

    PENDING = "Pending"
    LOADING = "Loading"
    READY = "Ready"
    FAILED = "Failed"


class PodState(StrEnum):
    """One engine pod's view of the adapter."""

    LOADED = "Loaded"
    LOADING = "Loading"
    FAILED = "Failed"


class BaseRef(CRDModel):
    """The base LLMDeployment."""

    name: DNSLabel = Field(description="Name of the LLMDeployment.")
    namespace: DNSLabel | None = Field(None, description="Its namespace; default: the adapter's own.")


class LLMAdapterSpec(CRDModel):
    """A PEFT LoRA adapter to serve on a base model's engine pods."""

    # The engine checks rank and alpha when it loads an adapter; a loaded one is not re-read when
    # they change, so they are fixed at creation (a different adapter is a new LLMAdapter).
    model_config = CRDModel.model_config | {"json_schema_extra": cel(
        ("has(self.rank) == has(oldSelf.rank) && (!has(self.rank) || self.rank == oldSelf.rank)",
         "rank is immutable: create a new LLMAdapter for a different adapter", ".rank"),
        ("has(self.alpha) == has(oldSelf.alpha) && (!has(self.alpha) || self.alpha == oldSelf.alpha)",
         "alpha is immutable: create a new LLMAdapter for a different adapter", ".alpha"),
    )}

    base_ref: BaseRef = Field(description="The base LLMDeployment; it must grant this namespace (spec.tenancy).")
    source: str = Field(
        pattern=SOURCE_PATTERN,
        description=(
            "The PEFT adapter directory: pvc://claim/path on a claim the base lists in "
            "spec.tenancy.adapterClaims (hf://, s3:// and other claims are refused for now: "
            "status says so)."
        ),
    )
    pinned: bool = Field(False, description="Keep it resident in a device slot (never evicted by LRU); only "
                         "where the base allows it (spec.tenancy.allowPinned).")
    rank: int | None = Field(None, ge=1, le=4096, description=(
        "The rank the adapter must have (its largest module rank); another rank fails the load "
        "(Failed, with the engine's message). Immutable."))
    alpha: float | None = Field(None, gt=0, description=(
        "The lora_alpha the adapter must have (adapter_config.json); another fails the load. Immutable."))


class PodAdapterStatus(CRDModel):
    """The adapter on one engine pod."""

    pod: str = Field(description="Engine pod name.")
    state: PodState = Field(description="Loaded, Loading or Failed.")
    message: str = Field("", max_length=4096, description="The engine's error when Failed.")


class LLMAdapterStatus(CRDModel):
    """What the operator decided and what the engine pods report."""

    observed_generation: int | None = Field(None, description="metadata.generation last acted on.")
    phase: Phase | None = Field(None, description="Pending, Loading, Ready or Failed.")
    base: str | None = Field(None, description="namespace/name of the base LLMDeployment.")
    model: str | None = Field(None, description="Model id clients send in the OpenAI `model` field.")
    ready_pods: int | None = Field(None, description="Engine pods serving the adapter.")
    desired_pods: int | None = Field(None, description="Ready engine pods of the base that should serve it.")
    pods: list[PodAdapterStatus] = Field(default_factory=list, description="Per engine pod state.")
    conditions: list[Condition] = Field(
        default_factory=list,
        description="Bound (the base exists and grants this namespace) and Ready (every pod serves it).",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
