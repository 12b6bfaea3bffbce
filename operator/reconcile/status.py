"""The LLMDeployment's status from what was decided (the desired state) and what runs (the
Deployment as the API server returned it): a pure function, so every condition is unit-tested.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from llmop.operator.build.desired import DesiredState, SpecError
from llmop.operator.build.errors import SpecCondition
from llmop.operator.build.engine_config import served_name
from llmop.operator.reconcile.pods import PodTrouble
from llmop.operator.api.conditions import set_condition
from llmop.operator.sizing.report import to_status

class ConditionType(StrEnum):
    """The reconciler's conditions."""

    READY = "Ready"
    PROGRESSING = "Progressing"
    DEGRADED = "Degraded"
    SIZING_VALID = "SizingValid"


class Reason(StrEnum):
    """The reasons the reconciler gives when a spec could be built (SpecError has the others)."""

    SIZED = "Sized"
    SCALED_TO_ZERO = "ScaledToZero"
    ALL_REPLICAS_READY = "AllReplicasReady"
    WAITING_FOR_REPLICAS = "WaitingForReplicas"
    COMPLETE = "Complete"
    ROLLING_OUT = "RollingOut"
    AS_EXPECTED = "AsExpected"
    REPLICA_FAILURE = "ReplicaFailure"
    PROGRESS_DEADLINE_EXCEEDED = "ProgressDeadlineExceeded"


RECONCILER_KEYS = (
    "observedGeneration", "model", "conditions", "sizing", "replicas", "readyReplicas",
    "updatedReplicas", "selector", "endpoint", "adapters",
)  # fmt: skip


def _rollout(desired: DesiredState, deployment: dict[str, Any]) -> tuple[str, Reason, str, bool, Reason]:
    """(ready?, reason, message, progressing?, progress reason) of the engine Deployment."""
    want = desired.spec.replicas
    st = deployment.get("status") or {}
    ready, updated = st.get("readyReplicas", 0), st.get("updatedReplicas", 0)
    current = st.get("observedGeneration", 0) >= deployment["metadata"].get("generation", 0)
    done = current and updated >= want and st.get("replicas", 0) == want and ready >= want
    if want == 0:
        return "False", Reason.SCALED_TO_ZERO, "spec.replicas is 0", False, Reason.SCALED_TO_ZERO
    if done:
        return "True", Reason.ALL_REPLICAS_READY, f"{ready}/{want} replicas ready", False, Reason.COMPLETE
    message = f"{ready}/{want} replicas ready, {updated} on the current template"
    status = "True" if ready >= want else "False"
    return status, Reason.WAITING_FOR_REPLICAS, message, True, Reason.ROLLING_OUT


def _deployment_failure(deployment: dict[str, Any]) -> tuple[bool, str, str]:
    """From the Deployment's own conditions (their reasons are the deployment controller's)."""
    for cond in (deployment.get("status") or {}).get("conditions", []):
        if cond.get("type") == "ReplicaFailure" and cond.get("status") == "True":
            return True, cond.get("reason", Reason.REPLICA_FAILURE), cond.get("message", "")
        if cond.get("type") == "Progressing" and cond.get("reason") == Reason.PROGRESS_DEADLINE_EXCEEDED:
            return True, Reason.PROGRESS_DEADLINE_EXCEEDED, cond.get("message", "")
    return False, Reason.AS_EXPECTED, ""


def healthy_status(
    old: dict[str, Any], desired: DesiredState, deployment: dict[str, Any], now: str,
    trouble: PodTrouble | None = None,
) -> dict[str, Any]:
    """Status after a successful apply. `trouble`: why engine pods cannot run (`pods.diagnose`);
    while not all replicas are ready it is the reason Ready is False and Degraded True."""
    gen, plan = desired.owner.generation, desired.plan
    conds = list(old.get("conditions") or [])
    conds = set_condition(conds, ConditionType.SIZING_VALID, True, Reason.SIZED, plan.summary(), now, gen)
    ready, reason, message, progressing, preason = _rollout(desired, deployment)
    failed, freason, fmessage = _deployment_failure(deployment)
    if trouble is not None and ready == "False" and reason is Reason.WAITING_FOR_REPLICAS:
        message = f"{message}: {trouble.message}"
        # The same reason and words on Ready and Degraded: one Event (see `transitions`).
        reason, failed, freason, fmessage = trouble.reason, True, trouble.reason, message
    conds = set_condition(conds, ConditionType.READY, ready, reason, message, now, gen)
    conds = set_condition(conds, ConditionType.PROGRESSING, progressing, preason, message, now, gen)
    conds = set_condition(conds, ConditionType.DEGRADED, failed, freason, fmessage, now, gen)
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
    if err.condition is SpecCondition.SIZING_VALID:
        conds = set_condition(conds, ConditionType.SIZING_VALID, False, err.reason, str(err), now, generation)
    conds = set_condition(conds, ConditionType.DEGRADED, True, err.reason, str(err), now, generation)
    conds = set_condition(conds, ConditionType.PROGRESSING, False, err.reason, "the spec cannot be reconciled",
                          now, generation)
    if not old.get("readyReplicas"):
        conds = set_condition(conds, ConditionType.READY, False, err.reason, str(err), now, generation)
    return {k: v for k, v in old.items() if k in RECONCILER_KEYS} | {
        "observedGeneration": generation,
        "conditions": conds,
    }


def changed(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """Whether writing `new` would change any reconciler-owned status field."""
    return any(old.get(k) != new.get(k) for k in new)
