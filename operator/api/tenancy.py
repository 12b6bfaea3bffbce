"""`spec.tenancy` of an LLMDeployment: which namespaces may bring their own LoRA adapters to it.

Platform teams run one base model for many tenants. A tenant's `LLMAdapter` (in its own namespace)
binds to a base only when the base grants that namespace (its own namespace always, others by name
or by a namespace label selector) and has a place for it (its adapter quotas). Absent `tenancy`,
the base takes no LLMAdapters at all (its pods then have no admin listener for the operator to load
them through).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import Field, StringConstraints

from llmop.operator.api.base import CRDModel, cel

DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNSLabel = Annotated[str, StringConstraints(pattern=DNS_LABEL, max_length=63)]


class LabelSelectorRequirement(CRDModel):
    """metav1.LabelSelectorRequirement."""

    key: str = Field(min_length=1, max_length=317, description="The label key.")
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"] = Field(description="In, NotIn, Exists or DoesNotExist.")
    values: list[str] = Field(default_factory=list, description="Values for In and NotIn; empty otherwise.")


class LabelSelector(CRDModel):
    """metav1.LabelSelector: every term must match (an empty selector matches everything)."""

    match_labels: dict[str, str] = Field(default_factory=dict, description="Labels that must all be present.")
    match_expressions: list[LabelSelectorRequirement] = Field(
        default_factory=list, description="Requirements that must all hold.")


class ClaimLayout(StrEnum):
    """How tenants share the adapterClaims."""

    SHARED = "Shared"  # any granted tenant may name any path on the claims
    PER_NAMESPACE = "PerNamespace"  # a tenant's sources live under <claim>/<its namespace>/


class TenancySpec(CRDModel):
    """Who may attach LoRA adapters (`LLMAdapter`) to this base, and where their files are."""

    model_config = CRDModel.model_config | {"json_schema_extra": cel(
        ("self.adapterClaims.all(c, self.adapterClaims.exists_one(d, d == c))",
         "adapterClaims must not repeat a claim", ".adapterClaims"),
    )}

    namespaces: list[DNSLabel] = Field(
        default_factory=list, max_length=1000,
        description="Namespaces granted besides the base's own (which is always granted).",
    )
    namespace_selector: LabelSelector | None = Field(
        None, description="Namespaces whose labels match are granted too (in addition to `namespaces`).")
    allow_pinned: bool = Field(
        False, description="Let tenants pin adapters (LLMAdapter spec.pinned): each pinned one holds a device "
        "slot (engine max_loras) for good. Off: a pinned LLMAdapter is refused (Bound=False, PinningNotAllowed).")
    adapter_claims: list[DNSLabel] = Field(
        default_factory=list, max_length=16,
        description=(
            "PersistentVolumeClaims in the base's namespace holding tenants' adapters, mounted read-only in "
            "every engine pod; an LLMAdapter's source is pvc://<one of these>/<path>. Changing this list "
            "rolls the engine pods; adding, changing or removing an LLMAdapter does not."
        ),
    )
    adapter_claim_layout: ClaimLayout = Field(
        "Shared", validate_default=True,
        description=(
            "Shared: a granted tenant may load any path on the adapterClaims. PerNamespace: a tenant's source must be "
            "pvc://<claim>/<its namespace>/<path> (else Bound=False, OutsideNamespaceDirectory), and the engine "
            "refuses a source that leads out of that directory through a symlink."
        ),
    )
    max_adapters: int | None = Field(
        None, ge=0,
        description=(
            "At most this many LLMAdapters bound to this base (absent: as many as the adapter manifest ConfigMap "
            "holds, about 1 MiB of entries, a few thousand). Places go first come first served (oldest "
            "metadata.creationTimestamp, then namespace/name), and a bound adapter keeps its place while it exists; "
            "the others get Bound=False, QuotaExceeded until a place frees up. 0: none."
        ),
    )
    max_adapters_per_namespace: int | None = Field(
        None, ge=1,
        description=(
            "At most this many LLMAdapters from any one namespace bound to this base (absent: no per-namespace "
            "limit), so one tenant cannot take every place; the others get Bound=False, QuotaExceeded."
        ),
    )
