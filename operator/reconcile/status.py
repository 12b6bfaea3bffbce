"""The LLMDeployment's status from what was decided (the desired state) and what runs (the
Deployment as the API server returned it): a pure function, so every condition is unit-tested.
"""

from __future__ import annotations

from typing import Any

from llmop.operator.build.desired import DesiredState, SpecError
from llmop.operator.build.engine_config import served_name
from llmop.operator.reconcile.conditions import set_condition
from llmop.operator.sizing.report import to_status

RECONCILER_KEYS = (
    "observedGeneration", "model", "conditions", "sizing", "replicas", "readyReplicas",
    "updatedReplicas", "selector", "endpoint", "adapters",
)  # fmt: skip


def _rollout(desired: DesiredState, deployment: dict[str, Any]) -> tuple[str, str, str, bool, str]:
    """(ready?, reason, message, progressing?, progress reason) of the engine Deployment."""
    want = desired.spec.replicas
    st = deployment.get("status") or {}
    ready, updated = st.get("readyReplicas", 0), st.get("updatedReplicas", 0)
    current = st.get("observedGeneration", 0) >= deployment["metadata"].get("generation", 0)
    done = current and updated >= want and st.get("replicas", 0) == want and ready >= want
    if want == 0:
        return "False", "ScaledToZero", "spec.replicas is 0", False, "ScaledToZero"
    if done:
        return "True", "AllReplicasReady", f"{ready}/{want} replicas ready", False, "Complete"
    message = f"{ready}/{want} replicas ready, {updated} on the current template"
    status = "True" if ready >= want else "False"
    return status, "WaitingForReplicas", message, True, "RollingOut"


def _deployment_failure(deployment: dict[str, Any]) -> tuple[bool, str, str]:
    for cond in (deployment.get("status") or {}).get("conditions", []):
        if cond.get("type") == "ReplicaFailure" and cond.get("status") == "True":
            return True, cond.get("reason", "ReplicaFailure"), cond.get("message", "")
        if cond.get("type") == "Progressing" and cond.get("reason") == "ProgressDeadlineExceeded":
            return True, "ProgressDeadlineExceeded", cond.get("message", "")
    return False, "AsExpected", ""


def healthy_status(
    old: dict[str, Any], desired: DesiredState, deployment: dict[str, Any], now: str
) -> dict[str, Any]:
    """Status after a successful apply."""
    gen, plan = desired.owner.generation, desired.plan
    conds = list(old.get("conditions") or [])
    conds = set_condition(conds, "SizingValid", True, "Sized", plan.summary(), gen, now)
    ready, reason, message, progressing, preason = _rollout(desired, deployment)
    conds = set_condition(conds, "Ready", ready, reason, message, gen, now)
    conds = set_condition(conds, "Progressing", progressing, preason, message, gen, now)
    failed, freason, fmessage = _deployment_failure(deployment)
    conds = set_condition(conds, "Degraded", failed, freason, fmessage, gen, now)
    st = deployment.get("status") or {}
    return {
        "observedGeneration": gen,
        "model": served_name(desired.spec, desired.owner.name),
        "conditions": conds,
        "sizing": to_status(plan).wire(),
        "replicas": st.get("replicas", 0),
        "readyReplicas": st.get("readyReplicas", 0),
        "updatedReplicas": st.get("updatedReplicas", 0),
        "selector": desired.owner.selector(),
        "endpoint": desired.endpoint,
        "adapters": len(desired.spec.adapters),
    }


def failed_status(old: dict[str, Any], err: SpecError, generation: int, now: str) -> dict[str, Any]:
    """Status of a spec that cannot work: the failing condition False with the reason, Ready False
    unless pods from an earlier, valid spec are still serving (those are left running)."""
    conds = list(old.get("conditions") or [])
    if err.condition == "SizingValid":
        conds = set_condition(conds, "SizingValid", False, err.reason, str(err), generation, now)
    conds = set_condition(conds, "Degraded", True, err.reason, str(err), generation, now)
    conds = set_condition(conds, "Progressing", False, err.reason, "the spec cannot be reconciled", generation, now)
    if not old.get("readyReplicas"):
        conds = set_condition(conds, "Ready", False, err.reason, str(err), generation, now)
    return {k: v for k, v in old.items() if k in RECONCILER_KEYS} | {
        "observedGeneration": generation,
        "conditions": conds,
    }


def changed(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """Whether writing `new` would change any reconciler-owned status field."""
    return any(old.get(k) != new.get(k) for k in new)
