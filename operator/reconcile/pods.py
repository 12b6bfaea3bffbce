"""Why engine pods are not running, from their statuses alone: a pure function, unit-tested on
pod dicts, so the LLMDeployment's status can say more than "0/1 replicas ready".

The scheduler's verdict (PodScheduled=False, reason Unschedulable, with its message naming what
no node has) and the kubelet's (a container waiting in ImagePullBackOff, ErrImagePull,
CrashLoopBackOff, …) become one `PodTrouble` with a reason from `PodReason`; the reconciler puts
it in the Ready and Degraded conditions, and their transition posts one Event.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from llmop.operator.api.conditions import get_condition


class PodReason(StrEnum):
    """Condition reasons for engine pods that cannot run."""

    PODS_UNSCHEDULABLE = "PodsUnschedulable"
    IMAGE_PULL_BACK_OFF = "ImagePullBackOff"
    ERR_IMAGE_PULL = "ErrImagePull"
    INVALID_IMAGE_NAME = "InvalidImageName"
    CRASH_LOOP_BACK_OFF = "CrashLoopBackOff"
    CREATE_CONTAINER_CONFIG_ERROR = "CreateContainerConfigError"


# The kubelet's waiting reasons that mean "will not start without a change", in report order.
WAITING_REASONS = {r.value: r for r in PodReason if r is not PodReason.PODS_UNSCHEDULABLE}


@dataclass(frozen=True)
class PodTrouble:
    """The first reason found (pods by name), the pod it is about, and a message for status."""

    reason: PodReason
    pod: str
    message: str


def _unschedulable(pod: dict[str, Any]) -> str | None:
    cond = get_condition((pod.get("status") or {}).get("conditions") or [], "PodScheduled")
    if cond and cond.get("status") == "False" and cond.get("reason") == "Unschedulable":
        return cond.get("message") or "no node fits"
    return None


def _last_termination(container: dict[str, Any]) -> str:
    term = (container.get("lastState") or {}).get("terminated") or {}
    if not term:
        return ""
    return f"; last terminated: {term.get('reason') or 'Error'} (exit code {term.get('exitCode')})"


def _waiting(pod: dict[str, Any]) -> tuple[PodReason, str] | None:
    status = pod.get("status") or {}
    for container in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
        waiting = (container.get("state") or {}).get("waiting") or {}
        reason = WAITING_REASONS.get(waiting.get("reason", ""))
        if reason is not None:
            detail = waiting.get("message") or reason.value
            return reason, f"container {container.get('name')}: {detail}{_last_termination(container)}"
    return None


def pod_trouble(pod: dict[str, Any]) -> PodTrouble | None:
    """What keeps this pod from running, if the scheduler or kubelet said so (terminating pods: None)."""
    name = (pod.get("metadata") or {}).get("name", "")
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return None
    if (message := _unschedulable(pod)) is not None:
        return PodTrouble(PodReason.PODS_UNSCHEDULABLE, name, f"pod {name} cannot be scheduled: {message}")
    if (found := _waiting(pod)) is not None:
        return PodTrouble(found[0], name, f"pod {name}: {found[1]}")
    return None


def diagnose(pods: list[dict[str, Any]]) -> PodTrouble | None:
    """The trouble to report for an LLMDeployment's pods: the first pod (by name) that has one."""
    for pod in sorted(pods, key=lambda p: (p.get("metadata") or {}).get("name", "")):
        if (trouble := pod_trouble(pod)) is not None:
            return trouble
    return None
