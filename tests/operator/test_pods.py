"""Why engine pods are not running, as a pure function of their statuses, and how it reaches the
LLMDeployment's conditions and Events."""

from llmop.operator.api.conditions import get_condition
from llmop.operator.build.desired import desired_state
from llmop.operator.build.settings import Settings
from llmop.operator.reconcile.pods import PodReason, diagnose
from llmop.operator.reconcile.reconciler import transitions
from llmop.operator.reconcile.status import changed, healthy_status

SCHEDULER = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."


def pod(name, conditions=(), containers=(), init=(), deleting=False):
    meta = {"name": name, **({"deletionTimestamp": "t"} if deleting else {})}
    return {"metadata": meta, "status": {"phase": "Pending", "conditions": list(conditions),
                                         "containerStatuses": list(containers), "initContainerStatuses": list(init)}}


def unschedulable(message=SCHEDULER):
    return {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}


def waiting(reason, message="", last=None):
    c = {"name": "engine", "state": {"waiting": {"reason": reason, "message": message}}}
    if last:
        c["lastState"] = {"terminated": last}
    return c


def test_healthy_or_merely_starting_pods_have_no_trouble():
    assert diagnose([]) is None
    assert diagnose([pod("a", containers=[waiting("ContainerCreating")])]) is None
    assert diagnose([pod("a", conditions=[{"type": "PodScheduled", "status": "True"}])]) is None


def test_unschedulable_carries_the_schedulers_message():
    t = diagnose([pod("b"), pod("a", conditions=[unschedulable()])])
    assert t.reason is PodReason.PODS_UNSCHEDULABLE and t.pod == "a"
    assert SCHEDULER in t.message


def test_kubelet_waiting_reasons():
    t = diagnose([pod("a", containers=[waiting("ImagePullBackOff", 'Back-off pulling image "x"')])])
    assert t.reason is PodReason.IMAGE_PULL_BACK_OFF and 'pulling image "x"' in t.message
    t = diagnose([pod("a", init=[waiting("ErrImagePull")])])
    assert t.reason is PodReason.ERR_IMAGE_PULL
    t = diagnose([pod("a", containers=[waiting("CrashLoopBackOff", "back-off 40s",
                                               {"reason": "OOMKilled", "exitCode": 137})])])
    assert t.reason is PodReason.CRASH_LOOP_BACK_OFF and "OOMKilled (exit code 137)" in t.message


def test_terminating_pods_and_order():
    assert diagnose([pod("a", conditions=[unschedulable()], deleting=True)]) is None
    t = diagnose([pod("b", containers=[waiting("CrashLoopBackOff")]), pod("a", conditions=[unschedulable()])])
    assert t.pod == "a"  # the first by name, so repeated reconciles report the same pod


BODY = {"metadata": {"name": "chat", "namespace": "ml", "uid": "u", "generation": 1}, "spec": {"replicas": 1}}
DESIRED = desired_state(BODY, Settings())
PENDING = {"metadata": {"generation": 1},
           "status": {"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1, "readyReplicas": 0}}


def test_trouble_in_conditions_and_one_event_per_change():
    waiting_st = healthy_status({}, DESIRED, PENDING, "t1")
    trouble = diagnose([pod("chat-1", conditions=[unschedulable()])])
    st = healthy_status(waiting_st, DESIRED, PENDING, "t2", trouble)
    ready, degraded = get_condition(st["conditions"], "Ready"), get_condition(st["conditions"], "Degraded")
    assert ready["status"] == "False" and ready["reason"] == "PodsUnschedulable" and SCHEDULER in ready["message"]
    assert degraded["status"] == "True" and degraded["reason"] == "PodsUnschedulable"
    assert [(t, r) for t, r, _ in transitions(waiting_st, st)] == [("Warning", "PodsUnschedulable")]
    again = healthy_status(st, DESIRED, PENDING, "t3", trouble)
    assert not changed(st, again) and transitions(st, again) == []
    # Fixed (the pod is gone, its replacement is starting): back to waiting, Degraded cleared.
    fixed = healthy_status(again, DESIRED, PENDING, "t4", None)
    assert get_condition(fixed["conditions"], "Degraded")["status"] == "False"
    assert get_condition(fixed["conditions"], "Ready")["reason"] == "WaitingForReplicas"
