"""Which object an applied body is: apiVersion, kind, namespace and name, never the kind alone.

The reconciler keeps what the API server returned for each object it applied; keyed by kind, a
second object of one kind (the router's Deployment beside the engine's) would replace the first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ObjectKey:
    """The identity of one namespaced object."""

    api_version: str
    kind: str
    namespace: str
    name: str

    @classmethod
    def of(cls, obj: dict[str, Any]) -> "ObjectKey":
        """The key of an object body (as built, or as returned by the API server)."""
        m = obj["metadata"]
        return cls(obj["apiVersion"], obj["kind"], m["namespace"], m["name"])

    def __str__(self) -> str:
        return f"{self.api_version}/{self.kind} {self.namespace}/{self.name}"
