"""Setting Kubernetes-style conditions without churn: a condition's lastTransitionTime changes only
when its status does, so re-reconciling an unchanged object writes nothing."""

from __future__ import annotations

from typing import Any


def set_condition(
    conditions: list[dict[str, Any]],
    type_: str,
    status: bool | str,
    reason: str,
    message: str,
    generation: int,
    now: str,
) -> list[dict[str, Any]]:
    """A new list with condition `type_` set (others kept, order stable)."""
    value = status if isinstance(status, str) else ("True" if status else "False")
    old = next((c for c in conditions if c.get("type") == type_), None)
    since = old["lastTransitionTime"] if old and old.get("status") == value and old.get("lastTransitionTime") else now
    new = {
        "type": type_,
        "status": value,
        "reason": reason,
        "message": message,
        "lastTransitionTime": since,
        "observedGeneration": generation,
    }
    out = [new if c.get("type") == type_ else c for c in conditions]
    return out if old else [*out, new]


def get_condition(conditions: list[dict[str, Any]], type_: str) -> dict[str, Any] | None:
    """The condition of that type, or None."""
    return next((c for c in conditions if c.get("type") == type_), None)
