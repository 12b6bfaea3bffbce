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
        self.body, self.applied, self.statuses, self.events = body, [], [], []

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
    assert outcome.applied == 5 and outcome.status_written
    ready = next(c for c in kube.statuses[-1]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True", ready  # read from chat, not from chat-router (0 ready)
    assert kube.statuses[-1]["readyReplicas"] == 2


def test_object_key_is_the_identity_not_the_kind():
    engine = desired_state(BODY, Settings())
    keys = [ObjectKey.of(o) for o in engine.objects]
    assert len(set(keys)) == len(keys)
    assert engine.engine == ObjectKey("apps/v1", "Deployment", "ml", "chat")
    assert str(engine.engine) == "apps/v1/Deployment ml/chat"
