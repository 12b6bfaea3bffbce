"""The LLMDeployment API: pydantic models that are the single source of the CRD schema.

`crds/` and the Helm chart's CRD are generated from these models by `llmop.operator.crdgen`;
never edit the YAML by hand.
"""

from llmop.operator.api.llmdeployment import (
    GROUP,
    KIND,
    PLURAL,
    SHORT_NAMES,
    SINGULAR,
    VERSION,
    LLMDeploymentSpec,
    LLMDeploymentStatus,
)

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
