"""What the cluster tests share beyond `llmop.operator.local`: small kubectl helpers."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import yaml

from llmop.operator.local import (  # noqa: F401 - re-exported for the tests
    CHART,
    OPERATOR_NS,
    RELEASE,
    OperatorProcess,
    condition,
    eventually,
    install_chart,
    kubectl_json,
    service_account_kubeconfig,
)

ROOT = Path(__file__).resolve().parents[2]


def get(cluster, kind: str, name: str, namespace: str) -> dict[str, Any] | None:
    """The object as a dict, or None."""
    return kubectl_json(cluster, kind, name, "-n", namespace)


def apply(cluster, manifest: dict[str, Any] | str, namespace: str, *extra: str, check: bool = True):
    """kubectl apply of a manifest (dict or YAML text) in `namespace`."""
    text = manifest if isinstance(manifest, str) else yaml.safe_dump(manifest)
    return cluster.kubectl("apply", "-n", namespace, "-f", "-", *extra, input=text, check=check)


def new_namespace(cluster) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    cluster.kubectl("create", "namespace", name)
    return name
