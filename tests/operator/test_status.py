"""Status and conditions as pure functions: no churn, the right reasons, Events on transitions."""

from llmop.operator.api.conditions import get_condition
from llmop.operator.build.desired import desired_state
from llmop.operator.build.errors import SpecCondition, SpecError, SpecReason
from llmop.operator.build.settings import Settings
from llmop.operator.reconcile.reconciler import transitions
from llmop.operator.reconcile.status import changed, failed_status, healthy_status
from llmop.operator.sizing.plan import SizingReason

BODY = {"metadata": {"name": "chat", "namespace": "ml", "uid": "u", "generation": 2}, "spec": {"replicas": 2}}
DESIRED = desired_state(BODY, Settings())


def dep(ready, updated=2, replicas=2, generation=1, observed=1):
    return {
        "metadata": {"generation": generation},
        "status": {"observedGeneration": observed, "readyReplicas": ready, "updatedReplicas": updated,
                   "replicas": replicas},
    }  # fmt: skip


def cond(status, type_):
    return get_condition(status["conditions"], type_)


def test_ready_when_all_replicas_ready():
    st = healthy_status({}, DESIRED, dep(ready=2), "t1")
    assert cond(st, "Ready")["status"] == "True" and cond(st, "Progressing")["status"] == "False"
    assert cond(st, "SizingValid")["reason"] == "Sized" and cond(st, "Degraded")["status"] == "False"
    assert st["sizing"]["tensorParallelSize"] == 1 and st["endpoint"] == "http://chat.ml.svc:8000/v1"
    assert st["selector"] == "app.kubernetes.io/instance=chat,app.kubernetes.io/name=llmop-engine"


def test_progressing_while_rolling_out():
    st = healthy_status({}, DESIRED, dep(ready=1, updated=1), "t1")
    assert cond(st, "Ready")["status"] == "False" and cond(st, "Progressing")["status"] == "True"


def test_unchanged_status_is_not_rewritten():
    first = healthy_status({}, DESIRED, dep(ready=2), "t1")
    again = healthy_status(first, DESIRED, dep(ready=2), "t2")
    assert not changed(first, again)
    assert cond(again, "Ready")["lastTransitionTime"] == "t1"
    assert transitions(first, again) == []


def test_transition_to_ready_is_an_event():
    waiting = healthy_status({}, DESIRED, dep(ready=0, updated=0, replicas=0), "t1")
    ready = healthy_status(waiting, DESIRED, dep(ready=2), "t2")
    assert ("Normal", "AllReplicasReady", "2/2 replicas ready") in transitions(waiting, ready)
    assert cond(ready, "Ready")["lastTransitionTime"] == "t2"


def test_sizing_failure():
    err = SpecError(SpecCondition.SIZING_VALID, SizingReason.EXCEEDS_NODE, "needs 10 GPUs of 80 GiB per node; nodes have 8")
    st = failed_status({}, err, 2, "t1")
    sizing = cond(st, "SizingValid")
    assert sizing["reason"] == "ExceedsNode" and "nodes have 8" in sizing["message"]
    assert sizing["lastTransitionTime"] == "t1" and st["observedGeneration"] == 2
    assert cond(st, "SizingValid")["status"] == "False" and cond(st, "Ready")["status"] == "False"
    assert cond(st, "Degraded")["status"] == "True"
    kinds = {(t, r) for t, r, _ in transitions({}, st)}
    assert ("Warning", "ExceedsNode") in kinds


def test_failure_keeps_serving_pods_ready():
    ok = healthy_status({}, DESIRED, dep(ready=2), "t1")
    st = failed_status(ok, SpecError(SpecCondition.DEGRADED, SpecReason.INVALID_ENGINE_CONFIG, "bad"), 3, "t2")
    assert cond(st, "Ready")["status"] == "True" and cond(st, "Degraded")["status"] == "True"
    assert st["sizing"] == ok["sizing"]


def test_is_true_reads_one_condition():
    from llmop.operator.api.conditions import is_true

    conds = [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "False"}]
    assert is_true(conds, "PodScheduled") and not is_true(conds, "Ready")
    assert not is_true(None, "Ready") and not is_true([], "Ready")
