"""An LLMAdapter's status, and its base's adapter count, from the binding and the pods' states:
pure functions, so every phase and condition is unit-tested.

Conditions: Bound (the base exists, takes adapters and grants the namespace; the source is one its
pods can read) and Ready (every ready engine pod of the base serves it). Events are posted for
changes a person should see: binding refused or granted, a load failing, all pods serving.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from llmop.operator.adapters.binding import BindReason, Binding
from llmop.operator.adapters.pod_sync import AdapterOnPod
from llmop.operator.api.conditions import changed_conditions, set_condition
from llmop.operator.api.llmadapter import Phase, PodState
from llmop.operator.kube.client import EventType


class ConditionType(StrEnum):
    BOUND = "Bound"
    READY = "Ready"


class ReadyReason(StrEnum):
    ALL_PODS_LOADED = "AllPodsLoaded"
    LOADING = "Loading"
    LOAD_FAILED = "LoadFailed"
    NO_READY_PODS = "NoReadyPods"
    NOT_BOUND = "NotBound"


# A tenant can fix these in its own spec; the others wait on the platform (its base or its grant).
_TENANT_ERRORS = {BindReason.INVALID_SPEC, BindReason.UNSUPPORTED_SOURCE, BindReason.OUTSIDE_NAMESPACE_DIRECTORY,
                  BindReason.BASE_NOT_WATCHED}  # the tenant's spec must change: Failed, not Pending
_QUIET = {ReadyReason.LOADING, ReadyReason.NO_READY_PODS, ReadyReason.NOT_BOUND}
MESSAGE_CHARS = 1000  # an engine's message can quote a tenant's file: bounded well below the CRD's limits


def _short(text: str) -> str:
    return text if len(text) <= MESSAGE_CHARS else text[: MESSAGE_CHARS - 1] + "…"


def adapter_status(old: dict[str, Any], binding: Binding, pods: Mapping[str, AdapterOnPod], generation: int,
                   now: str) -> dict[str, Any]:
    """The status of one adapter; `pods` maps each ready engine pod of the base to its state there."""
    conds = set_condition(list(old.get("conditions") or []), ConditionType.BOUND, binding.bound, binding.reason,
                          binding.message, now, generation)
    loaded = sum(p.state is PodState.LOADED for p in pods.values())
    failed = {name: p for name, p in pods.items() if p.state is PodState.FAILED}
    if not binding.bound:
        phase = Phase.FAILED if binding.reason in _TENANT_ERRORS else Phase.PENDING
        ready, reason, message = False, ReadyReason.NOT_BOUND, binding.message
    elif failed:
        pod, err = next(iter(sorted(failed.items())))
        phase, ready, reason = Phase.FAILED, False, ReadyReason.LOAD_FAILED
        message = _short(f"{len(failed)}/{len(pods)} pods could not load it; {pod}: {err.message}")
    elif not pods:
        phase, ready, reason, message = Phase.PENDING, False, ReadyReason.NO_READY_PODS, "the base has no ready pods"
    elif loaded == len(pods):
        phase, ready, reason, message = Phase.READY, True, ReadyReason.ALL_PODS_LOADED, f"served by {loaded} pods"
    else:
        phase, ready, reason = Phase.LOADING, False, ReadyReason.LOADING
        message = f"loaded on {loaded}/{len(pods)} pods"
    conds = set_condition(conds, ConditionType.READY, ready, reason, message, now, generation)
    return {
        "observedGeneration": generation,
        "phase": phase.value,
        "base": "/".join(binding.base),
        "model": binding.model,
        "readyPods": loaded if binding.bound else 0,
        "desiredPods": len(pods) if binding.bound else 0,
        "pods": [{"pod": name, "state": p.state.value, "message": _short(p.message)} for name, p in sorted(pods.items())]
        if binding.bound else [],
        "conditions": conds,
    }


def changed(old: dict[str, Any], new: dict[str, Any]) -> bool:
    return any(old.get(k) != v for k, v in new.items())


def transitions(old: dict[str, Any], new: dict[str, Any]) -> list[tuple[EventType, str, str]]:
    """Events for conditions whose (status, reason) changed, progress left out."""
    return [(EventType.NORMAL if cond["status"] == "True" else EventType.WARNING, cond["reason"],
             cond["message"] or cond["type"])
            for _, cond in changed_conditions(old, new) if cond["reason"] not in _QUIET]


def base_adapters(bindings: list[Binding]) -> dict[str, Any]:
    """The base LLMDeployment's status fields about its tenants (the Adapters column counts them)."""
    bound = sorted(b.model for b in bindings if b.bound)
    return {"tenantAdapters": len(bound), "boundAdapters": bound}
