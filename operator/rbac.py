"""The least the operator needs from the API server, as RBAC rules: one list, rendered into the chart.

`llmop.operator.crdgen` writes these rules into the Helm chart (cluster-wide ClusterRole, or a
namespaced Role when the operator watches one namespace), so code and chart cannot disagree.
"""

from __future__ import annotations

from typing import Any

from llmop.operator.api.llmdeployment import GROUP, PLURAL

_READ = ["get", "list", "watch"]
_OWN = [*_READ, "create", "patch", "update"]  # server-side apply of objects the operator owns

RULES: list[dict[str, Any]] = [
    # The custom resource: read it, keep kopf's bookkeeping annotations, write status and /scale.
    {"apiGroups": [GROUP], "resources": [PLURAL], "verbs": [*_READ, "patch"]},
    {"apiGroups": [GROUP], "resources": [f"{PLURAL}/status"], "verbs": ["get", "patch", "update"]},
    {"apiGroups": [GROUP], "resources": [f"{PLURAL}/scale"], "verbs": ["get", "patch", "update"]},
    # What each LLMDeployment is reconciled into.
    {"apiGroups": [""], "resources": ["configmaps", "services"], "verbs": _OWN},
    {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": _OWN},
    {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": _OWN},
    {"apiGroups": ["autoscaling"], "resources": ["horizontalpodautoscalers"], "verbs": [*_OWN, "delete"]},
    # Engine pods: readiness and metrics targets for the autoscaler.
    {"apiGroups": [""], "resources": ["pods"], "verbs": _READ},
    # kopf watches the CRDs it serves (to notice them being installed or removed).
    {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "verbs": _READ},
    # Events for decisions and failures.
    {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
]
