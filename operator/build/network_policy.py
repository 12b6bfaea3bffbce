"""The NetworkPolicy of one LLMDeployment (spec.networkPolicy, docs/security.md): which traffic
may reach its engine pods.

Ingress only, on two ports: the inference port from anywhere (clients, the router, Prometheus
scraping /metrics there too), and the admin port, present with spec.engine.adminCredentialSecret or spec.tenancy,
only from the operator's pods (the chart's selector label, in the namespace the operator runs in).
Anything else arriving at an engine pod is dropped (the kubelet's probes come from the node, which
the usual plugins admit); egress is left open (hf:// and s3:// downloads). Enforcement is the
network plugin's: one without NetworkPolicy support stores the object and lets everything through.
"""

from __future__ import annotations

from typing import Any

from llmop.operator.api.llmdeployment import LLMDeploymentSpec
from llmop.operator.build.meta import Owner
from llmop.operator.build.tenancy import admin_secret
from llmop.operator.kube.identity import ObjectKey

API_VERSION, KIND = "networking.k8s.io/v1", "NetworkPolicy"
OPERATOR_POD_LABELS = {"app.kubernetes.io/name": "llmop-operator"}  # on the chart's operator pods
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"  # set by the API server on every namespace


def network_policy_key(owner: Owner) -> ObjectKey:
    """Which object the NetworkPolicy of one LLMDeployment is (named after it)."""
    return ObjectKey(API_VERSION, KIND, owner.namespace, owner.name)


def _port(number: int) -> list[dict[str, Any]]:
    return [{"port": number, "protocol": "TCP"}]


def network_policy(owner: Owner, spec: LLMDeploymentSpec, operator_namespace: str) -> dict[str, Any]:
    """Inference traffic from anywhere; the admin port, when there is one, from the operator only."""
    ingress: list[dict[str, Any]] = [{"ports": _port(spec.engine.port)}]  # no `from`: every source
    if admin_secret(spec, owner.name):
        operator = {"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: operator_namespace}},
                    "podSelector": {"matchLabels": dict(OPERATOR_POD_LABELS)}}  # fmt: skip
        ingress.append({"from": [operator], "ports": _port(spec.engine.admin_port)})
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": owner.metadata(),
        "spec": {"podSelector": {"matchLabels": owner.selector_labels()}, "policyTypes": ["Ingress"],
                 "ingress": ingress},
    }  # fmt: skip
