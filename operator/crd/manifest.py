"""The CustomResourceDefinitions of LLMDeployment and LLMAdapter, as dicts built from the API models.

Names, subresources and printer columns live here; the schemas themselves come from
`llmop.operator.crd.openapi.structural_schema` of the spec and status models.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from llmop.operator.api import llmadapter
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
    {"name": "Tenant-Adapters", "type": "integer", "jsonPath": ".status.tenantAdapters",
     "description": "LLMAdapters bound to this base."},
    {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status',
     "description": "The Ready condition."},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]  # fmt: skip

ADAPTER_PRINTER_COLUMNS: list[dict[str, Any]] = [
    {"name": "Base", "type": "string", "jsonPath": ".status.base", "description": "namespace/name of the base."},
    {"name": "Model", "type": "string", "jsonPath": ".status.model", "description": "Model id clients send."},
    {"name": "Ready-Pods", "type": "integer", "jsonPath": ".status.readyPods", "description": "Pods serving it."},
    {"name": "Desired", "type": "integer", "jsonPath": ".status.desiredPods",
     "description": "Ready pods of the base that should serve it."},
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase", "description": "Pending, Loading, Ready or Failed."},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]  # fmt: skip


def _crd(kind: str, plural: str, singular: str, short_names: list[str], description: str,
         spec_model: type[BaseModel], status_model: type[BaseModel], columns: list[dict[str, Any]],
         subresources: dict[str, Any]) -> dict[str, Any]:
    spec = structural_schema(spec_model)
    status = structural_schema(status_model)
    schema = {
        "type": "object",
        "description": description,
        "properties": {
            "apiVersion": {"type": "string", "description": "API version of this object."},
            "kind": {"type": "string", "description": "Kind of this object."},
            "metadata": {"type": "object"},  # the API server allows nothing more here
            "spec": spec,
            "status": status,
        },
    }
    version = {"name": api.VERSION, "served": True, "storage": True, "schema": {"openAPIV3Schema": schema},
               "subresources": subresources, "additionalPrinterColumns": columns}  # fmt: skip
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{api.GROUP}", "labels": {"app.kubernetes.io/part-of": "llmop"}},
        "spec": {
            "group": api.GROUP,
            "scope": "Namespaced",
            "names": {"kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": singular,
                      "shortNames": short_names, "categories": ["llmop", "all"]},  # fmt: skip
            "versions": [version],
        },
    }


def build_crd() -> dict[str, Any]:
    """The `apiextensions.k8s.io/v1` CustomResourceDefinition of LLMDeployment."""
    crd = _crd(api.KIND, api.PLURAL, api.SINGULAR, api.SHORT_NAMES,
               "An LLM served by llmop engine pods, sized and scaled by the operator.",
               api.LLMDeploymentSpec, api.LLMDeploymentStatus, PRINTER_COLUMNS,
               {"status": {}, "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas",
                                        "labelSelectorPath": ".status.selector"}})  # fmt: skip
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["default"] = {}
    return crd


def build_adapter_crd() -> dict[str, Any]:
    """The CustomResourceDefinition of LLMAdapter."""
    crd = _crd(llmadapter.KIND, llmadapter.PLURAL, llmadapter.SINGULAR, llmadapter.SHORT_NAMES,
               "A tenant's LoRA adapter, served by the engine pods of a base LLMDeployment that grants its namespace.",
               llmadapter.LLMAdapterSpec, llmadapter.LLMAdapterStatus, ADAPTER_PRINTER_COLUMNS, {"status": {}})
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["required"] = ["spec"]  # baseRef and source
    return crd
