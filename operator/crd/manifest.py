"""The CustomResourceDefinition of LLMDeployment, as a dict built from the API models.

Names, subresources and printer columns live here; the schema itself comes from
`llmop.operator.crd.openapi.structural_schema` of the spec and status models.
"""

from __future__ import annotations

from typing import Any

from llmop.operator.api import llmdeployment as api
from llmop.operator.crd.openapi import structural_schema

PRINTER_COLUMNS: list[dict[str, Any]] = [
    {"name": "Model", "type": "string", "jsonPath": ".status.model", "description": "Served model name."},
    {"name": "TP", "type": "integer", "jsonPath": ".status.sizing.tensorParallelSize",
     "description": "Tensor-parallel size (GPUs per replica)."},
    {"name": "Available", "type": "integer", "jsonPath": ".status.readyReplicas",
     "description": "Ready engine replicas."},
    {"name": "Desired", "type": "integer", "jsonPath": ".spec.replicas", "description": "Desired replicas."},
    {"name": "Queue-Wait", "type": "number", "jsonPath": ".status.autoscaling.signalSeconds",
     "description": "Queue wait signal (seconds) the autoscaler last saw."},
    {"name": "Adapters", "type": "integer", "jsonPath": ".status.adapters",
     "description": "LoRA adapters loaded at start-up."},
    {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status',
     "description": "The Ready condition."},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]  # fmt: skip


def build_crd() -> dict[str, Any]:
    """The `apiextensions.k8s.io/v1` CustomResourceDefinition of LLMDeployment."""
    spec = structural_schema(api.LLMDeploymentSpec)
    status = structural_schema(api.LLMDeploymentStatus)
    spec["default"] = {}
    schema = {
        "type": "object",
        "description": "An LLM served by llmop engine pods, sized and scaled by the operator.",
        "properties": {
            "apiVersion": {"type": "string", "description": "API version of this object."},
            "kind": {"type": "string", "description": "Kind of this object."},
            "metadata": {"type": "object"},  # the API server allows nothing more here
            "spec": spec,
            "status": status,
        },
    }
    version = {
        "name": api.VERSION,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": schema},
        "subresources": {
            "status": {},
            "scale": {
                "specReplicasPath": ".spec.replicas",
                "statusReplicasPath": ".status.replicas",
                "labelSelectorPath": ".status.selector",
            },
        },
        "additionalPrinterColumns": PRINTER_COLUMNS,
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{api.PLURAL}.{api.GROUP}",
            "labels": {"app.kubernetes.io/part-of": "llmop"},
        },
        "spec": {
            "group": api.GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": api.KIND,
                "listKind": f"{api.KIND}List",
                "plural": api.PLURAL,
                "singular": api.SINGULAR,
                "shortNames": api.SHORT_NAMES,
                "categories": ["llmop", "all"],
            },
            "versions": [version],
        },
    }
