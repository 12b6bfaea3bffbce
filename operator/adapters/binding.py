"""Binding: is an LLMAdapter allowed on its base, and where do the base's pods find its files?

Pure: (adapter, base spec or None, the adapter namespace's labels) in, a `Binding` out. A bound
adapter becomes a manifest entry (`ManifestEntry`): the model id clients send and the path inside
the engine pods. Every refusal has an enum reason and a message a tenant can act on.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pydantic import ValidationError

from llmop.operator.adapters.grants import granted
from llmop.operator.api.llmadapter import LLMAdapterSpec, model_id
from llmop.operator.api.llmdeployment import LLMDeploymentSpec
from llmop.operator.api.tenancy import ClaimLayout
from llmop.operator.build.sources import PVC_DIR


class BindReason(StrEnum):
    """Why an adapter is (not) bound to its base: the Bound condition's reason."""

    GRANTED = "Granted"
    INVALID_SPEC = "InvalidSpec"
    BASE_NOT_FOUND = "BaseNotFound"
    TENANCY_DISABLED = "TenancyDisabled"
    NOT_GRANTED = "NotGranted"
    UNSUPPORTED_SOURCE = "UnsupportedSource"
    PINNING_NOT_ALLOWED = "PinningNotAllowed"
    OUTSIDE_NAMESPACE_DIRECTORY = "OutsideNamespaceDirectory"
    BASE_NOT_WATCHED = "BaseNotWatched"  # the operator watches given namespaces; the base is in none
    SELECTOR_NOT_EVALUATED = "SelectorNotEvaluated"  # ... and may not read namespace labels
    QUOTA_EXCEEDED = "QuotaExceeded"  # the base has no place left for it (quota.py)


@dataclass(frozen=True)
class ManifestEntry:
    """One adapter as the engine pods load it (the engine's `AdapterSource`)."""

    name: str
    source: str
    pinned: bool = False
    root: str | None = None  # the directory the load is confined to (claimLayout PerNamespace)
    rank: int | None = None  # what the adapter must be (the engine checks)
    alpha: float | None = None

    def wire(self) -> dict[str, Any]:
        optional = {"root": self.root, "rank": self.rank, "alpha": self.alpha}
        return {"name": self.name, "source": self.source, "pinned": self.pinned,
                **{k: v for k, v in optional.items() if v is not None}}  # fmt: skip


@dataclass(frozen=True)
class Binding:
    """The decision for one LLMAdapter: `entry` is set exactly when it is bound."""

    namespace: str
    name: str
    base: tuple[str, str]
    reason: BindReason
    message: str
    entry: ManifestEntry | None = None

    @property
    def bound(self) -> bool:
        return self.entry is not None

    @property
    def model(self) -> str:
        return model_id(self.namespace, self.name)


def base_of(adapter: dict[str, Any]) -> tuple[str, str] | None:
    """(namespace, name) of the base an adapter body names; None when the spec has no baseRef."""
    ref = (adapter.get("spec") or {}).get("baseRef") or {}
    if not ref.get("name"):
        return None
    return ref.get("namespace") or adapter["metadata"]["namespace"], ref["name"]


def claim_path(spec: LLMDeploymentSpec, source: str) -> tuple[str, list[str]] | None:
    """(claim, path segments) of an adapter source the base's engine pods can read, None otherwise:
    only pvc://<claim>/<path> on one of the base's spec.tenancy.adapterClaims (mounted read-only
    at PVC_DIR/<claim>), with no empty, `.` or `..` segment in <path>."""
    scheme, _, rest = source.partition("://")
    claim, _, sub = rest.partition("/")
    parts = sub.strip("/").split("/")
    if scheme != "pvc" or spec.tenancy is None or claim not in spec.tenancy.adapter_claims:
        return None
    if any(p in ("", ".", "..") for p in parts):  # no way out of the claim, one spelling per path
        return None
    return claim, parts


def bind(adapter: dict[str, Any], base: LLMDeploymentSpec | None, labels: dict[str, str] | None,
         watched: tuple[str, ...] = ()) -> Binding:
    """Decide one adapter's binding; `base` is the parsed spec of the base it names (None: absent),
    `labels` those of the adapter's namespace for the base's namespace selector (None: the operator
    may not read them), `watched` the namespaces the operator is limited to (empty: all)."""
    m = adapter["metadata"]
    ns, name = m["namespace"], m["name"]
    ref = base_of(adapter) or (ns, "")

    def refuse(reason: BindReason, message: str) -> Binding:
        return Binding(ns, name, ref, reason, message)

    try:
        spec = LLMAdapterSpec.model_validate(adapter.get("spec") or {})
    except ValidationError as err:
        return refuse(BindReason.INVALID_SPEC, "; ".join(
            f"spec.{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in err.errors()))
    base_ns, base_name = ref
    where = f"LLMDeployment {base_ns}/{base_name}"
    if watched and base_ns not in watched:
        return refuse(BindReason.BASE_NOT_WATCHED, f"{where} is outside the namespaces this operator watches "
                      f"({', '.join(watched)}): a tenant's adapter can only name a base there")
    if base is None:
        return refuse(BindReason.BASE_NOT_FOUND, f"{where} does not exist")
    if base.tenancy is None:
        return refuse(BindReason.TENANCY_DISABLED, f"{where} takes no LLMAdapters (its spec.tenancy is not set)")
    if not granted(base_ns, base.tenancy, ns, labels):
        if labels is None and base.tenancy.namespace_selector is not None:
            return refuse(BindReason.SELECTOR_NOT_EVALUATED,
                          f"{where} grants namespaces by spec.tenancy.namespaceSelector, which this operator cannot "
                          f"evaluate (it watches given namespaces and may not read Namespace labels); "
                          f"list {ns} in spec.tenancy.namespaces instead")
        return refuse(BindReason.NOT_GRANTED, f"{where} does not grant namespace {ns} (spec.tenancy)")
    located = claim_path(base, spec.source)
    if located is None:
        claims = ", ".join(base.tenancy.adapter_claims) or "none"
        return refuse(BindReason.UNSUPPORTED_SOURCE,
                      f"the engine pods of {where} read adapters only from pvc://<claim>/<path> on its "
                      f"spec.tenancy.adapterClaims ({claims}), with no '.', '..' or empty segment in the path; "
                      f"{spec.source!r} is not one")
    claim, parts = located
    root = None
    if base.tenancy.adapter_claim_layout is ClaimLayout.PER_NAMESPACE:
        if parts[0] != ns or len(parts) == 1:  # under <claim>/<ns>/, not the directory itself
            return refuse(BindReason.OUTSIDE_NAMESPACE_DIRECTORY,
                          f"{where} keeps each tenant's adapters in its own directory "
                          f"(spec.tenancy.adapterClaimLayout PerNamespace): the source must be "
                          f"pvc://{claim}/{ns}/<path>; {spec.source!r} is not")
        root = "/".join([PVC_DIR, claim, ns])
    if spec.pinned and not base.tenancy.allow_pinned:
        return refuse(BindReason.PINNING_NOT_ALLOWED,
                      f"{where} does not let tenants pin adapters (spec.tenancy.allowPinned): a pinned adapter "
                      "holds a device slot every other tenant then waits for")
    return Binding(ns, name, ref, BindReason.GRANTED, f"bound to {where}",
                   ManifestEntry(model_id(ns, name), "/".join([PVC_DIR, claim, *parts]), spec.pinned, root,
                                 spec.rank, spec.alpha))
