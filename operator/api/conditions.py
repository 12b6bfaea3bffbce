"""Setting Kubernetes-style conditions (metav1.Condition, in their wire form) without churn.

A condition's lastTransitionTime changes only when its status does, so re-deciding an unchanged
state writes nothing. The reconciler's conditions and the autoscaler's use these same functions, and
so does every reading of another object's conditions (a pod's Ready).
"""

from __future__ import annotations

from typing import Any


def set_condition(
    conditions: list[dict[str, Any]],
    type_: str,
    status: bool | str,
    reason: str,
    message: str,
    now: str,
    generation: int | None = None,
) -> list[dict[str, Any]]:
    """A new list with condition `type_` set (others kept, order stable). `generation` is the
    metadata.generation the condition is about (left out when None)."""
    value = status if isinstance(status, str) else ("True" if status else "False")
    old = get_condition(conditions, type_)
    since = old["lastTransitionTime"] if old and old.get("status") == value and old.get("lastTransitionTime") else now
    new = {"type": str(type_), "status": value, "reason": str(reason), "message": message, "lastTransitionTime": since}
    if generation is not None:
        new["observedGeneration"] = generation
    out = [new if c.get("type") == type_ else c for c in conditions]
    return out if old else [*out, new]


def get_condition(conditions: list[dict[str, Any]], type_: str) -> dict[str, Any] | None:
    """The condition of that type, or None."""
    return next((c for c in conditions if c.get("type") == type_), None)


def is_true(conditions: list[dict[str, Any]] | None, type_: str) -> bool:
    """Whether the condition of that type is there with status True (e.g. a pod's Ready)."""
    cond = get_condition(conditions or [], type_)
    return cond is not None and cond.get("status") == "True"


def changed_conditions(old: dict[str, Any], new: dict[str, Any]) -> list[tuple[dict[str, Any] | None, dict[str, Any]]]:
    """(before, after) for each condition of status `new` whose status or reason differs from
    status `old`'s (before is None for a new one): what a status change may announce as an Event."""
    out = []
    for cond in new.get("conditions", []):
        before = get_condition(old.get("conditions") or [], cond["type"])
        if before is None or (before.get("status"), before.get("reason")) != (cond["status"], cond["reason"]):
            out.append((before, cond))
    return out
