"""One autoscaler tick and the HPA sync through a recording stand-in for `Kube` (no API server)."""

from llmop.operator.autoscaling.decision import PodSample
from llmop.operator.autoscaling.spec import AutoscalingSpec
from llmop.operator.autoscaling.timer import FIELD_MANAGER, Autoscaler, TimerState, sync_hpa, tick
from llmop.operator.kube.client import Kube
from llmop.operator.kube.identity import ObjectKey
from kopf_fakes import OneTick

SELECTOR = "app.kubernetes.io/instance=chat,app.kubernetes.io/name=llmop-engine"
BODY = {"metadata": {"name": "chat", "namespace": "ml", "uid": "u"}}


def pod(name, ip):
    return {"metadata": {"name": name},
            "status": {"phase": "Running", "podIP": ip, "conditions": [{"type": "Ready", "status": "True"}]}}


class RecordingKube:
    def __init__(self, replicas=2):
        self.replicas, self.calls = replicas, []

    def get_scale(self, namespace, name):
        self.calls.append(("get_scale", namespace, name))
        return {"spec": {"replicas": self.replicas}, "status": {"selector": SELECTOR}}

    def list_pods(self, namespace, selector):
        self.calls.append(("list_pods", namespace, selector))
        return [pod("chat-a", "10.0.0.1"), pod("chat-b", "10.0.0.2")]

    def patch_scale(self, namespace, name, replicas):
        self.calls.append(("patch_scale", namespace, name, replicas))

    def patch_status(self, namespace, name, status, as_field_manager=False):
        self.calls.append(("patch_status", namespace, name, sorted(status), as_field_manager))

    def apply(self, obj):
        self.calls.append(("apply", ObjectKey.of(obj)))

    def delete(self, key):
        self.calls.append(("delete", key))
        return False


class BusyPods:
    """Every target waited 1.5 s for its oldest request: far above a 0.2 s target."""

    def __init__(self):
        self.urls = []

    def collect(self, targets, window, timeout, now):
        self.urls = [t.url for t in targets]
        return tuple(PodSample(t.name, True, True, 60.0, 60.0, 60.0, oldest_waiting_age=1.5) for t in targets)


def test_tick_reads_scale_and_pods_then_writes_scale_and_status():
    kube, state = RecordingKube(), TimerState(collector=BusyPods())
    spec = AutoscalingSpec(enabled=True, max_replicas=8)
    result, prev, new = tick(kube, "chat", "ml", {}, spec, state, 1000.0)
    assert prev is None and result.changed and result.desired > 2
    assert state.collector.urls == ["http://10.0.0.1:8000/metrics", "http://10.0.0.2:8000/metrics"]
    assert kube.calls == [
        ("get_scale", "ml", "chat"),
        ("list_pods", "ml", SELECTOR),
        ("patch_scale", "ml", "chat", result.desired),
        ("patch_status", "ml", "chat", ["autoscaling"], True),
    ]
    assert new.desired_replicas == result.desired and state.last_status is new


def test_hpa_mode_applies_the_hpa_and_builtin_mode_deletes_it_once():
    kube, state = RecordingKube(), TimerState()
    sync_hpa(kube, BODY, AutoscalingSpec(enabled=True, mode="hpa"), state)
    key = ObjectKey("autoscaling/v2", "HorizontalPodAutoscaler", "ml", "chat")
    assert kube.calls == [("apply", key)] and state.hpa_applied is True
    sync_hpa(kube, BODY, AutoscalingSpec(enabled=True), state)
    sync_hpa(kube, BODY, AutoscalingSpec(enabled=True), state)
    assert kube.calls[1:] == [("delete", key)] and state.hpa_applied is False


def test_autoscaler_writes_as_its_own_manager_and_posts_events_as_the_operator():
    operator_kube = Kube(object(), "llmop")
    scaler = Autoscaler.beside(operator_kube)
    assert scaler.kube.field_manager == FIELD_MANAGER and scaler.kube.api is operator_kube.api
    assert scaler.events is operator_kube and scaler.kube.requests is not operator_kube.requests


class RecordingEvents:
    def __init__(self):
        self.events = []

    def event(self, body, type_, reason, message):
        self.events.append((type_, reason))


def test_daemon_takes_the_autoscaler_from_the_memo_and_posts_events_as_the_operator():
    import asyncio
    import logging

    import kopf

    from llmop.operator.autoscaling.timer import autoscaler

    kube, events = RecordingKube(), RecordingEvents()
    memo = kopf.Memo(operator=kopf.Memo(autoscaler=Autoscaler(kube, events)),
                     llmop_autoscaler=TimerState(collector=BusyPods()))
    spec = {"autoscaling": {"enabled": True, "maxReplicas": 8}}
    asyncio.run(autoscaler(body=BODY, spec=spec, status={}, name="chat", namespace="ml", memo=memo,
                           logger=logging.getLogger("t"), stopped=OneTick()))
    assert memo.llmop_autoscaler.last_error is None
    assert [c[0] for c in kube.calls] == ["delete", "get_scale", "list_pods", "patch_scale", "patch_status"]
    assert events.events == [("Normal", "ScaledUp")]
