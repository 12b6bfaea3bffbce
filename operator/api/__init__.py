"""The LLMDeployment API: pydantic models that are the single source of the CRD schema.

`crds/` and the Helm chart's CRD are generated from these models by `llmop.operator.crdgen`;
never edit the YAML by hand. The names below are re-exported lazily, so a model module elsewhere
(the autoscaler's `spec.autoscaling`) can build on `api.base` without an import cycle.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "GROUP",
    "KIND",
    "PLURAL",
    "SHORT_NAMES",
    "SINGULAR",
    "VERSION",
    "LLMDeploymentSpec",
    "LLMDeploymentStatus",
]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from llmop.operator.api import llmdeployment

        return getattr(llmdeployment, name)
    raise AttributeError(name)
