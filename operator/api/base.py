"""The base of every CRD model: camelCase on the wire, snake_case in Python, unknown fields rejected.

Kubernetes resources use camelCase; Python code reads better in snake_case. Aliases give both, and
`extra="forbid"` makes the operator's own parse as strict as the API server's structural schema.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class CRDModel(BaseModel):
    """A part of a custom resource; `cel(...)` rules on subclasses land in `x-kubernetes-validations`."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    def wire(self) -> dict[str, Any]:
        """The camelCase JSON form, without unset optional fields."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


def cel(*rules: tuple[str, str] | tuple[str, str, str]) -> dict[str, Any]:
    """`json_schema_extra` for CEL rules: (rule, message) or (rule, message, fieldPath)."""
    out = []
    for rule in rules:
        entry = {"rule": rule[0], "message": rule[1]}
        if len(rule) == 3:
            entry["fieldPath"] = rule[2]
        out.append(entry)
    return {"x-kubernetes-validations": out}
