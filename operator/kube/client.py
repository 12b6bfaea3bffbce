"""The few API calls the operator makes, on a `kubernetes.client.ApiClient`, each counted.

Paths are built from the object's apiVersion and kind, so one `apply()` serves every kind the
operator owns; the counts feed the scale benchmark (API requests per LLMDeployment). The reconciler
and the autoscaler each hold a `Kube` over the one ApiClient: each writes as its own field manager
and counts its own requests.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from enum import StrEnum
from typing import Any

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from llmop.operator.api.llmdeployment import GROUP, KIND, PLURAL, VERSION
from llmop.operator.api.timestamps import rfc3339
from llmop.operator.kube.identity import ObjectKey

MERGE_PATCH = "application/merge-patch+json"
PLURALS = {
    "ConfigMap": "configmaps",
    "Secret": "secrets",
    "Namespace": "namespaces",
    "LLMAdapter": "llmadapters",
    "Service": "services",
    "Deployment": "deployments",
    "PodDisruptionBudget": "poddisruptionbudgets",
    "HorizontalPodAutoscaler": "horizontalpodautoscalers",
    "NetworkPolicy": "networkpolicies",
    "Event": "events",
    "Pod": "pods",
    "Lease": "leases",
    KIND: PLURAL,
}


class EventType(StrEnum):
    """core/v1 Event types: Warning for trouble a user should look at, Normal for news."""

    NORMAL = "Normal"
    WARNING = "Warning"


def make_api_client(kubeconfig: str | None = None) -> k8s.ApiClient:
    """In-cluster credentials when running in a pod, else the kubeconfig (KUBECONFIG or the path)."""
    cfg = k8s.Configuration()
    try:
        if kubeconfig:
            raise k8s_config.ConfigException("kubeconfig given")
        k8s_config.load_incluster_config(client_configuration=cfg)
    except k8s_config.ConfigException:
        k8s_config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
    return k8s.ApiClient(cfg)


def object_path(api_version: str, kind: str, namespace: str, name: str | None = None) -> str:
    """/api/v1/namespaces/ns/configmaps/name, /apis/apps/v1/namespaces/ns/deployments/name, …"""
    base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    path = f"{base}/namespaces/{namespace}/{PLURALS[kind]}"
    return f"{path}/{name}" if name else path


def _llmdeployment_path(namespace: str, name: str) -> str:
    return object_path(f"{GROUP}/{VERSION}", KIND, namespace, name)


class Kube:
    """One writer's view of the API server: writes carry `field_manager`, requests are counted."""

    def __init__(self, api: k8s.ApiClient, field_manager: str = "llmop"):
        self.api = api
        self.field_manager = field_manager
        self.requests: Counter[str] = Counter()
        self._lock = threading.Lock()

    def _call(self, verb: str, path: str, body: Any = None, query=(), content_type: str = "application/json"):
        with self._lock:
            self.requests[verb] += 1
        method, url, headers, payload, _ = self.api.param_serialize(
            verb,
            path,
            query_params=list(query),
            header_params={"Content-Type": content_type, "Accept": "application/json"},
            body=body,
            auth_settings=["BearerToken"],
        )
        response = self.api.call_api(method, url, header_params=headers, body=payload, _request_timeout=60)
        response.read()
        if not 200 <= response.status < 300:
            raise ApiException(http_resp=response)
        return json.loads(response.data or b"{}")

    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Server-side apply `obj` as the operator's field manager (force: the operator owns these
        fields); returns the object as stored, status included."""
        m = obj["metadata"]
        path = object_path(obj["apiVersion"], obj["kind"], m["namespace"], m["name"])
        query = [("fieldManager", self.field_manager), ("force", "true")]
        return self._call("PATCH", path, obj, query, "application/apply-patch+yaml")

    def get(self, key: ObjectKey) -> dict[str, Any] | None:
        """The object as stored, None when there is none."""
        try:
            return self._call("GET", object_path(key.api_version, key.kind, key.namespace, key.name))
        except ApiException as err:
            if err.status == 404:
                return None
            raise

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        """POST a new object (409 when one of that name exists)."""
        m = obj["metadata"]
        return self._call("POST", object_path(obj["apiVersion"], obj["kind"], m["namespace"]), obj)

    def replace(self, obj: dict[str, Any]) -> dict[str, Any]:
        """PUT the whole object; with metadata.resourceVersion set, a compare-and-swap (409 when
        the stored object changed since it was read)."""
        m = obj["metadata"]
        return self._call("PUT", object_path(obj["apiVersion"], obj["kind"], m["namespace"], m["name"]), obj)

    def delete(self, key: ObjectKey) -> bool:
        """Delete the object; False when it was already gone."""
        try:
            self._call("DELETE", object_path(key.api_version, key.kind, key.namespace, key.name))
        except ApiException as err:
            if err.status == 404:
                return False
            raise
        return True

    def get_llmdeployment(self, namespace: str, name: str) -> dict[str, Any]:
        """The LLMDeployment as stored (raises ApiException 404 when it is gone)."""
        return self._call("GET", _llmdeployment_path(namespace, name))

    def get_scale(self, namespace: str, name: str) -> dict[str, Any]:
        """The LLMDeployment's /scale subresource (spec.replicas, status.selector)."""
        return self._call("GET", _llmdeployment_path(namespace, name) + "/scale")

    def patch_scale(self, namespace: str, name: str, replicas: int) -> dict[str, Any]:
        """Set replicas through /scale, the only way the operator changes a replica count."""
        return self._call("PATCH", _llmdeployment_path(namespace, name) + "/scale", {"spec": {"replicas": replicas}},
                          [("fieldManager", self.field_manager)], MERGE_PATCH)

    def list_pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        """The pods matching a label selector (API dicts, camelCase)."""
        path = object_path("v1", "Pod", namespace)
        return self._call("GET", path, query=[("labelSelector", selector)]).get("items", [])

    def patch_status(self, namespace: str, name: str, status: dict[str, Any],
                     as_field_manager: bool = False) -> dict[str, Any]:
        """Merge-patch the LLMDeployment's status subresource (the operator never writes spec).
        `as_field_manager`: managedFields name this Kube's field manager (the autoscaler's
        status.autoscaling); otherwise the server names the client library (the reconciler's)."""
        return self.patch_status_of(ObjectKey(f"{GROUP}/{VERSION}", KIND, namespace, name), status, as_field_manager)

    def patch_status_of(self, key: ObjectKey, status: dict[str, Any], as_field_manager: bool = False) -> dict[str, Any]:
        """Merge-patch the status subresource of any of the operator's custom resources."""
        query = [("fieldManager", self.field_manager)] if as_field_manager else []
        path = object_path(key.api_version, key.kind, key.namespace, key.name) + "/status"
        return self._call("PATCH", path, {"status": status}, query, MERGE_PATCH)

    def list_all(self, api_version: str, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
        """Every object of a namespaced kind, in all namespaces (None) or one."""
        if namespace is not None:
            path = object_path(api_version, kind, namespace)
        else:
            path = ("/api/v1" if api_version == "v1" else f"/apis/{api_version}") + f"/{PLURALS[kind]}"
        return self._call("GET", path).get("items", [])

    def namespace_labels(self, name: str) -> dict[str, str] | None:
        """A namespace's labels (None when it does not exist)."""
        try:
            return (self._call("GET", f"/api/v1/namespaces/{name}").get("metadata") or {}).get("labels") or {}
        except ApiException as err:
            if err.status == 404:
                return None
            raise

    def event(self, body: dict[str, Any], type_: EventType, reason: str, message: str) -> None:
        """Post a core/v1 Event about `body`, an LLMDeployment unless it says its kind
        (`kubectl describe` shows it)."""
        m = body["metadata"]
        now = rfc3339()
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{m['name']}.", "namespace": m["namespace"]},
            "involvedObject": {
                "apiVersion": body.get("apiVersion") or f"{GROUP}/{VERSION}",
                "kind": body.get("kind") or KIND,
                "name": m["name"],
                "namespace": m["namespace"],
                "uid": m["uid"],
            },
            "type": type_,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": self.field_manager},
            "reportingComponent": f"{GROUP}/operator",
            "reportingInstance": self.field_manager,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        self._call("POST", object_path("v1", "Event", m["namespace"]), event)
