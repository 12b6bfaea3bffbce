"""The least the operator needs from the API server, as RBAC rules, rendered into the chart.

`RULES` are on namespaced resources: a ClusterRole grants them everywhere (the default), a Role
in the watched namespace grants them there (`watchNamespace`). `CLUSTER_RULES` are on cluster-scoped
resources, which no Role can grant: they are only in the cluster-wide ClusterRole, and the
namespaced mode needs none (kopf's cluster scanning is off there, see `handlers.configure`).
`LEADER_ELECTION_RULES` are for the operator's Lease (`kube.lease`), granted by a Role in the
operator's own namespace only.
`llmop.operator.crdgen` writes both into the Helm chart, so code and chart cannot disagree, and
tests/operator/test_rbac.py derives what the code uses and fails on any verb missing or to spare.
"""

from __future__ import annotations

from typing import Any

from llmop.operator.api import llmadapter
from llmop.operator.api.llmdeployment import GROUP, PLURAL

_WATCH = ["list", "watch"]  # kopf's watches (a list, then a watch from its resourceVersion)
_APPLY = ["create", "patch"]  # server-side apply: a PATCH, which creates the object when it is absent

RULES: list[dict[str, Any]] = [
    # The custom resource: read it (a reconcile reads it as stored), kopf watches it and patches its
    # bookkeeping annotations and finalizer (the autoscaler daemon's); status and /scale are written.
    {"apiGroups": [GROUP], "resources": [PLURAL], "verbs": ["get", *_WATCH, "patch"]},
    {"apiGroups": [GROUP], "resources": [f"{PLURAL}/status"], "verbs": ["patch"]},
    {"apiGroups": [GROUP], "resources": [f"{PLURAL}/scale"], "verbs": ["get", "patch"]},
    # Owned objects carry blockOwnerDeletion: where the OwnerReferencesPermissionEnforcement
    # admission plugin runs (OpenShift), setting it needs update on the owner's finalizers.
    {"apiGroups": [GROUP], "resources": [f"{PLURAL}/finalizers"], "verbs": ["update"]},
    # Tenants' adapters: watched (kopf), listed by adapter placement, which writes their status.
    {"apiGroups": [GROUP], "resources": [llmadapter.PLURAL], "verbs": _WATCH},
    {"apiGroups": [GROUP], "resources": [f"{llmadapter.PLURAL}/status"], "verbs": ["patch"]},
    # The engine admin credential of a base with spec.tenancy: created once (random), read back to
    # call the engines' admin API. (Secrets named by spec.engine.adminCredentialSecret are read too.)
    {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "create"]},
    # What each LLMDeployment is reconciled into: applied, and watched for drift.
    {"apiGroups": [""], "resources": ["configmaps", "services"], "verbs": [*_APPLY, *_WATCH]},
    {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": [*_APPLY, *_WATCH]},
    {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": [*_APPLY, *_WATCH]},
    # The engine pods' NetworkPolicy: applied, watched for drift, deleted when spec.networkPolicy turns it off.
    {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"], "verbs": [*_APPLY, *_WATCH, "delete"]},
    # The autoscaler's HPA (mode: hpa): applied, deleted when the mode goes back to builtin.
    {"apiGroups": ["autoscaling"], "resources": ["horizontalpodautoscalers"], "verbs": [*_APPLY, "delete"]},
    # Engine pods: listed for the autoscaler's targets and a reconcile's diagnosis, watched while not ready.
    {"apiGroups": [""], "resources": ["pods"], "verbs": _WATCH},
    # Events for decisions and failures (core/v1, each one new; kopf posts none).
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
]

CLUSTER_RULES: list[dict[str, Any]] = [
    # kopf watches the CRDs it serves (to notice them being installed or removed); cluster-wide only.
    {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "verbs": _WATCH},
    # A base's spec.tenancy.namespaceSelector: adapter placement reads the tenant namespace's labels.
    {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get"]},
]

LEADER_ELECTION_RULES: list[dict[str, Any]] = [
    # The Lease replicas elect a leader on: read, created once, renewed and taken over by PUT.
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "update"]},
]
