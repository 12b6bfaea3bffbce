"""The four objects one LLMDeployment always becomes: engine ConfigMap, Deployment, Service, PDB
(and, unless turned off, its NetworkPolicy: network_policy.py).

Each is a complete server-side-apply body: everything the operator owns is stated, so an apply
reverts drift in those fields and an unchanged apply is a no-op.
"""

from __future__ import annotations

from typing import Any

from llmop.operator.api.llmdeployment import LLMDeploymentSpec
from llmop.operator.build.engine_config import CONFIG_FILE
from llmop.operator.build.meta import Owner

PROGRESS_DEADLINE_SECONDS = 1800  # downloads and weight loading count against it


def config_map_name(owner: Owner) -> str:
    return f"{owner.name}-engine"


def config_map(owner: Owner, engine_yaml: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": owner.metadata(config_map_name(owner)),
            "data": {CONFIG_FILE: engine_yaml}}  # fmt: skip


def deployment(owner: Owner, spec: LLMDeploymentSpec, template: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": owner.metadata(),
        "spec": {
            "replicas": spec.replicas,
            "selector": {"matchLabels": owner.selector_labels()},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {
                "maxSurge": spec.rollout.max_surge, "maxUnavailable": spec.rollout.max_unavailable}},
            "progressDeadlineSeconds": PROGRESS_DEADLINE_SECONDS,
            "template": template,
        },
    }  # fmt: skip


def service(owner: Owner, port: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": owner.metadata(),
        "spec": {"type": "ClusterIP", "selector": owner.selector_labels(),
                 "ports": [{"name": "http", "port": port, "targetPort": "http", "protocol": "TCP"}]},
    }  # fmt: skip


def pod_disruption_budget(owner: Owner, spec: LLMDeploymentSpec) -> dict[str, Any]:
    """Voluntary evictions (node drains) take engine pods down no faster than a rollout does."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": owner.metadata(),
        "spec": {"maxUnavailable": max(1, spec.rollout.max_unavailable),
                 "selector": {"matchLabels": owner.selector_labels()}},
    }  # fmt: skip
