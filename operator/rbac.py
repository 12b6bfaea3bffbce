"""The least the operator needs from the API server, as RBAC rules, rendered into the chart.

`RULES` are on namespaced resources: a ClusterRole grants them everywhere (the default), a Role
in the watched namespace grants them there (`watchNamespace`). `CLUSTER_RULES` are on cluster-scoped
resources, which no Role can grant: they are only in the cluster-wide ClusterRole, and the
namespaced mode needs none (kopf's cluster scanning is off there, see `handlers.configure`).
`llmop.operator.crdgen` writes both into the Helm chart, so code and chart cannot disagree.
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
    # Events for decisions and failures.
    {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
]

CLUSTER_RULES: list[dict[str, Any]] = [
    # kopf watches the CRDs it serves (to notice them being installed or removed); cluster-wide only.
    {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "verbs": _READ},
]
