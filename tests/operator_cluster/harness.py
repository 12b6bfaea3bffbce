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


OWNED = ("configmap", "deployment", "service", "pdb")  # what the operator applies for an LLMDeployment


def operator_writes(cluster, ns: str, name: str = "chat") -> dict[str, object]:
    """What the operator writes for LLMDeployment `name`: its resourceVersion (its status is the
    operator's), the ConfigMap's and Service's, and the generation, labels and annotations of the
    Deployment and PodDisruptionBudget, whose status their own controllers write (the disruption
    controller's first status of a new PDB can land seconds after the LLMDeployment is Ready).
    Exactly one of each owned kind."""
    out: dict[str, object] = {"llmd": get(cluster, "llmd", name, ns)["metadata"]["resourceVersion"]}
    for kind in OWNED:
        items = kubectl_json(cluster, kind, "-n", ns, "-l", f"app.kubernetes.io/instance={name}")["items"]
        assert len(items) == 1, f"{kind}: {[i['metadata']['name'] for i in items]}"
        meta = items[0]["metadata"]
        out[kind] = ((meta["generation"], meta.get("labels"), meta.get("annotations"))
                     if kind in ("deployment", "pdb") else meta["resourceVersion"])
    return out


def new_namespace(cluster) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    cluster.kubectl("create", "namespace", name)
    return name
