"""`Kube` against a recording stand-in for the kubernetes ApiClient: paths, queries, bodies, counts."""

import pytest
from kubernetes.client.exceptions import ApiException

from llmop.operator.kube.client import Kube
from llmop.operator.kube.identity import ObjectKey

from kube_fakes import RecordingApi  # tests/operator/conftest.py puts it on the path

BASE = "/apis/llmop.dev/v1alpha1/namespaces/ml/llmdeployments/chat"
MERGE = "application/merge-patch+json"


def test_scale_subresource_as_the_field_manager():
    api = RecordingApi()
    kube = Kube(api, "llmop-autoscaler")
    assert kube.get_scale("ml", "chat") == {"spec": {"replicas": 3}}
    kube.patch_scale("ml", "chat", 5)
    assert api.calls == [
        ("GET", f"{BASE}/scale", [], "application/json", None),
        ("PATCH", f"{BASE}/scale", [("fieldManager", "llmop-autoscaler")], MERGE, {"spec": {"replicas": 5}}),
    ]
    assert kube.requests == {"GET": 1, "PATCH": 1}


def test_status_patch_names_the_field_manager_only_when_asked():
    api = RecordingApi()
    kube = Kube(api, "llmop-autoscaler")
    kube.patch_status("ml", "chat", {"a": 1})
    kube.patch_status("ml", "chat", {"autoscaling": {}}, as_field_manager=True)
    assert api.calls == [
        ("PATCH", f"{BASE}/status", [], MERGE, {"status": {"a": 1}}),
        ("PATCH", f"{BASE}/status", [("fieldManager", "llmop-autoscaler")], MERGE, {"status": {"autoscaling": {}}}),
    ]


def test_delete_by_identity_and_gone_is_not_an_error():
    key = ObjectKey("autoscaling/v2", "HorizontalPodAutoscaler", "ml", "chat")
    assert Kube(RecordingApi(200)).delete(key) is True
    api = RecordingApi(404)
    assert Kube(api).delete(key) is False
    assert api.calls[0][:2] == ("DELETE", "/apis/autoscaling/v2/namespaces/ml/horizontalpodautoscalers/chat")
    with pytest.raises(ApiException):
        Kube(RecordingApi(403)).delete(key)


def test_apply_is_forced_server_side_apply_as_the_field_manager():
    api = RecordingApi()
    obj = {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "chat", "namespace": "ml"}}
    Kube(api, "llmop-autoscaler").apply(obj)
    assert api.calls == [("PATCH", "/apis/autoscaling/v2/namespaces/ml/horizontalpodautoscalers/chat",
                          [("fieldManager", "llmop-autoscaler"), ("force", "true")], "application/apply-patch+yaml", obj)]
