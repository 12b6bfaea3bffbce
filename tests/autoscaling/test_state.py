"""status.autoscaling round trip: the decision's memory survives in status; conditions and history."""

from __future__ import annotations

from llmop.operator.autoscaling.decision import History, PodSample, Policy, decide
from llmop.operator.autoscaling.spec import AutoscalingStatus
from llmop.operator.autoscaling.state import history_from_status, status_after

POLICY = Policy(min_replicas=1, max_replicas=8)


def busy(name):
    return PodSample(name, True, True, 60.0, 60.0, 60.0, oldest_waiting_age=1.5)


def test_memory_round_trips_through_status_json():
    result = decide(1000.0, 2, (busy("a"), busy("b")), POLICY, History())
    status = status_after(None, result, (busy("a"), busy("b")), 0.2, 1000.0)
    wire = status.model_dump(mode="json", by_alias=True)
    again = history_from_status(AutoscalingStatus.model_validate(wire))
    assert again == result.history
    assert wire["desiredReplicas"] == 6 and wire["lastDecision"]["reason"] == "ScaleUp"
    assert [p["signalSeconds"] for p in wire["pods"]] == [1.5, 1.5]
    assert len(wire["history"]) == 1


def test_missing_metrics_condition_and_transition_time():
    pods = (PodSample("a", True, False),)
    first = status_after(None, decide(0.0, 2, pods, POLICY, History()), pods, 0.2, 0.0)
    cond = {c.type: c for c in first.conditions}["MetricsAvailable"]
    assert (cond.status, cond.reason) == ("False", "MetricsMissing")
    later = status_after(first, decide(60.0, 2, pods, POLICY, History()), pods, 0.2, 60.0)
    assert {c.type: c for c in later.conditions}["MetricsAvailable"].last_transition_time == \
        cond.last_transition_time


def test_history_only_records_changes_and_is_bounded():
    status = None
    for i in range(30):
        result = decide(i * 100.0, 1 + i % 2, (busy("a"),), Policy(1, 100), History())
        status = status_after(status, result, (busy("a"),), 0.2, i * 100.0)
    assert len(status.history) == 10
    assert all(d.desired_replicas != d.current_replicas for d in status.history)
