"""Who owns the built objects: names, labels and the controller ownerReference of one LLMDeployment.

Every object the operator creates carries the same labels (so kopf's watches and `kubectl -l` find
them) and a controller ownerReference (so the garbage collector deletes them with their owner).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llmop.operator.api.llmdeployment import API_VERSION, KIND

MANAGED_BY = {"app.kubernetes.io/managed-by": "llmop"}
ENGINE_NAME = {"app.kubernetes.io/name": "llmop-engine"}
INSTANCE_LABEL = "app.kubernetes.io/instance"  # on engine pods: the LLMDeployment's name


@dataclass(frozen=True)
class Owner:
    """The LLMDeployment the objects belong to."""

    name: str
    namespace: str
    uid: str
    generation: int = 1

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> "Owner":
        m = body["metadata"]
        return cls(m["name"], m["namespace"], m.get("uid", ""), int(m.get("generation") or 1))

    def selector_labels(self) -> dict[str, str]:
        """The labels that select this LLMDeployment's engine pods (immutable in a Deployment)."""
        return {INSTANCE_LABEL: self.name, **ENGINE_NAME}

    def selector(self) -> str:
        """The selector as a string, for status.selector and the /scale subresource."""
        return ",".join(f"{k}={v}" for k, v in sorted(self.selector_labels().items()))

    def labels(self) -> dict[str, str]:
        return {**self.selector_labels(), **MANAGED_BY}

    def owner_reference(self) -> dict[str, Any]:
        return {"apiVersion": API_VERSION, "kind": KIND, "name": self.name, "uid": self.uid,
                "controller": True, "blockOwnerDeletion": True}  # fmt: skip

    def metadata(self, name: str | None = None) -> dict[str, Any]:
        """metadata of an owned object (named after the owner unless `name` is given)."""
        return {
            "name": name or self.name,
            "namespace": self.namespace,
            "labels": self.labels(),
            "ownerReferences": [self.owner_reference()],
        }
