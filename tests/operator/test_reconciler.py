"""The reconciler's I/O loop against a recording stand-in for `Kube` (no API server)."""

import copy
import dataclasses

from llmop.operator.build.desired import desired_state
from llmop.operator.build.settings import Settings
from llmop.operator.kube.identity import ObjectKey
from llmop.operator.reconcile import reconciler as reconciler_module
from llmop.operator.reconcile.reconciler import Reconciler

BODY = {"metadata": {"name": "chat", "namespace": "ml", "uid": "u", "generation": 1}, "spec": {"replicas": 2}}


class RecordingKube:
    """Returns applied objects with a status: engine Deployments all ready, any other none ready."""

    def __init__(self, body):
        self.body, self.applied, self.statuses, self.events, self.deleted = body, [], [], [], []

    def get_llmdeployment(self, namespace, name):
        return copy.deepcopy(self.body)

    def apply(self, obj):
        self.applied.append(obj)
        stored = copy.deepcopy(obj) | {"status": {}}
        stored["metadata"]["generation"] = 1
        if obj["kind"] == "Deployment":
            n = obj["spec"]["replicas"] if obj["metadata"]["name"] == "chat" else 0
            stored["status"] = {"observedGeneration": 1, "replicas": n, "readyReplicas": n, "updatedReplicas": n}
        return stored

    def delete(self, key):
        self.deleted.append(key)
        return True

    def list_pods(self, namespace, selector):
        return []

    def patch_status(self, namespace, name, status):
        self.statuses.append(status)

    def event(self, body, type_, reason, message):
        self.events.append((type_, reason, message))


def test_a_second_deployment_does_not_replace_the_engine_deployment(monkeypatch):
    engine = desired_state(BODY, Settings())
    router = copy.deepcopy(next(o for o in engine.objects if o["kind"] == "Deployment"))
    router["metadata"]["name"] = "chat-router"
    monkeypatch.setattr(reconciler_module, "desired_state",
                        lambda body, settings: dataclasses.replace(engine, objects=(*engine.objects, router)))
    kube = RecordingKube(BODY)
    outcome = Reconciler(kube, Settings()).reconcile(BODY)
    assert outcome.applied == len(engine.objects) + 1 and outcome.status_written
    ready = next(c for c in kube.statuses[-1]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True", ready  # read from chat, not from chat-router (0 ready)
    assert kube.statuses[-1]["readyReplicas"] == 2


def test_object_key_is_the_identity_not_the_kind():
    engine = desired_state(BODY, Settings())
    keys = [ObjectKey.of(o) for o in engine.objects]
    assert len(set(keys)) == len(keys)
    assert engine.engine == ObjectKey("apps/v1", "Deployment", "ml", "chat")
    assert str(engine.engine) == "apps/v1/Deployment ml/chat"


def test_the_network_policy_is_applied_and_deleted_once_when_turned_off():
    kube = RecordingKube(copy.deepcopy(BODY))
    reconciler = Reconciler(kube, Settings())
    policy = ObjectKey("networking.k8s.io/v1", "NetworkPolicy", "ml", "chat")

    def reconcile(enabled):
        kube.body["spec"]["networkPolicy"] = {"enabled": enabled}
        kube.applied.clear()
        reconciler.reconcile(kube.body)
        return [ObjectKey.of(o) for o in kube.applied]

    assert policy in reconcile(True) and kube.deleted == []
    assert policy not in reconcile(False) and kube.deleted == [policy]
    reconcile(False)  # already deleted by this process: no second DELETE per reconcile
    assert kube.deleted == [policy]
    assert policy in reconcile(True)
    reconcile(False)  # applied again since: deleted again
    assert kube.deleted == [policy, policy]
    Reconciler(kube, Settings()).reconcile(kube.body)  # a new process cannot know: it deletes once
    assert kube.deleted == [policy, policy, policy]
