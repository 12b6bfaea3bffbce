"""The kopf handlers find the operator object in kopf's memo (no module globals)."""

import logging

import kopf

from llmop.operator import handlers
from llmop.operator.autoscaling.timer import Autoscaler
from llmop.operator.controllers import Operator
from llmop.operator.kube.client import Kube


class RecordingReconciler:
    def __init__(self):
        self.calls = []

    def reconcile(self, body):
        self.calls.append(("reconcile", body["metadata"]["name"]))

    def reconcile_named(self, namespace, name):
        self.calls.append(("reconcile_named", namespace, name))


class RecordingPlacer:
    def __init__(self):
        self.calls = []
        self.kube = Kube(object(), "llmop-adapters")

    def place(self, namespace, name):
        self.calls.append((namespace, name))


def operator(namespaced=False):
    kube = Kube(object())
    namespaces = ("ml",) if namespaced else ()
    return Operator(kube, RecordingReconciler(), Autoscaler.beside(kube), RecordingPlacer(), namespaces)


def test_handlers_reconcile_through_the_memo():
    op = operator()
    memo = handlers.kopf_memo(op)
    handlers.reconcile_llmdeployment(body={"metadata": {"name": "chat", "namespace": "ml"}}, memo=memo)
    owned = {"metadata": {"namespace": "ml", "ownerReferences": [
        {"apiVersion": "llmop.dev/v1alpha1", "kind": "LLMDeployment", "name": "chat"}]}}
    handlers._owned_changed(body=owned, memo=memo, type="MODIFIED")
    pod = {"metadata": {"namespace": "ml", "labels": {"app.kubernetes.io/instance": "chat"}}}
    handlers._engine_pod_changed(body=pod, memo=memo)
    assert op.reconciler.calls == [("reconcile", "chat"), ("reconcile_named", "ml", "chat"),
                                   ("reconcile_named", "ml", "chat")]
    # Adapter placement: after the base's reconcile, and for an adapter's base (not on status-only changes).
    adapter = {"metadata": {"namespace": "team-a", "name": "sum", "generation": 2},
               "spec": {"baseRef": {"name": "chat", "namespace": "ml"}}, "status": {"observedGeneration": 1}}
    settled = adapter | {"status": {"observedGeneration": 2}}
    assert handlers._adapter_news(body=adapter, type="MODIFIED")
    assert not handlers._adapter_news(body=settled, type="MODIFIED")  # the placer's own status write
    assert handlers._adapter_news(body=settled, type="DELETED") and handlers._adapter_news(body=settled, type=None)
    assert handlers._deleted(type="DELETED") and not handlers._deleted(type="MODIFIED")
    handlers._adapter_changed(body=adapter, memo=memo, type="MODIFIED")
    handlers._adapter_changed(body={"metadata": {"namespace": "team-b", "name": "x"}, "spec": {
        "baseRef": {"name": "other"}}}, memo=memo, type=None)
    handlers._base_deleted(body={"metadata": {"namespace": "ml", "name": "chat"}}, memo=memo, type="DELETED")
    assert op.placer.calls == [("ml", "chat"), ("ml", "chat"), ("team-b", "other"), ("ml", "chat")]


def test_startup_turns_scanning_off_only_when_namespaced():
    for namespaced in (False, True):
        settings = kopf.OperatorSettings()
        handlers.configure(settings=settings, memo=handlers.kopf_memo(operator(namespaced)))
        assert settings.scanning.disabled is namespaced


def test_shutdown_logs_the_operator_kube_request_counts(caplog):
    op = operator()
    op.kube.requests["PATCH"] += 3
    op.autoscaler.kube.requests["GET"] += 7  # the autoscaler's own, not in the benchmark's count
    op.placer.kube.requests["GET"] += 2
    with caplog.at_level(logging.INFO):
        handlers.report_requests(logger=logging.getLogger("t"), memo=handlers.kopf_memo(op))
    assert 'llmop api requests: {"PATCH": 3}' in caplog.text
    assert 'llmop adapter placement api requests: {"GET": 2}' in caplog.text


def test_llmop_operator_hands_kopf_one_operator_object(monkeypatch):
    import argparse

    from llmop.operator import cli, controllers

    api = object()
    monkeypatch.setattr(controllers, "make_api_client", lambda kubeconfig: api)
    monkeypatch.setattr(kopf, "configure", lambda **_: None)
    runs = []
    monkeypatch.setattr(kopf, "run", lambda **kwargs: runs.append(kwargs))
    parser = argparse.ArgumentParser()
    cli.configure(parser)
    assert cli.run(parser.parse_args(["--namespace", "ml", "--liveness", ""])) == 0
    op = runs[0]["memo"].operator
    assert op.namespaced and runs[0]["namespaces"] == ["ml"] and not runs[0]["clusterwide"]
    assert op.reconciler.kube is op.kube and op.autoscaler.events is op.kube
    assert op.kube.api is api and op.autoscaler.kube.api is api and op.placer.kube.api is api
    assert op.placer.namespaces == ("ml",)
