"""`spec.podTemplate`: what a platform team adds to every engine pod without forking the operator."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from llmop.operator.api.base import CRDModel


class PodTemplateOverrides(CRDModel):
    """Labels, annotations and scheduling of the engine pods."""

    labels: dict[str, str] = Field(default_factory=dict, description="Extra pod labels.")
    annotations: dict[str, str] = Field(default_factory=dict, description="Extra pod annotations.")
    affinity: dict[str, Any] | None = Field(None, description="Pod affinity (core/v1 Affinity).")
    priority_class_name: str | None = Field(None, max_length=253, description="PriorityClass of the pods.")
    service_account_name: str | None = Field(
        None, max_length=253, description="ServiceAccount the engine pods run as."
    )
