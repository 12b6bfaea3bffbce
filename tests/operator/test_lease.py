"""Leader election (`kube.lease`): the pure decision, and two candidates over one Lease store that
behaves as the API server does for it (404, 409 on a name taken or a stale resourceVersion), on a
fake clock. The real API server is in tests/operator_cluster/test_leader_election.py."""

import copy
import itertools
import threading
import time

import pytest
import urllib3
from kubernetes.client.exceptions import ApiException

from llmop.operator.kube.client import Kube
from llmop.operator.kube.lease import LeaderElector, LeaseRecord, LeaseTiming, Outcome, Step, next_step

from kube_fakes import RecordingApi

NS, NAME = "llmop-system", "llmop-operator"
PATH = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases"


def record(holder="a", duration=15, version="1"):
    return LeaseRecord(holder, duration, 0, None, version)


@pytest.mark.parametrize("rec,seen_for,step", [
    (None, 0, Step.CREATE),
    (record("me"), 100, Step.RENEW),
    (record("other"), 14.9, Step.WAIT),
    (record("other"), 15, Step.TAKE_OVER),
    (record(""), 0, Step.TAKE_OVER),  # released by a leader that shut down
    (record("other", duration=4), 4.5, Step.TAKE_OVER),  # the holder's duration counts, not ours
])  # fmt: skip
def test_next_step(rec, seen_for, step):
    assert next_step(rec, "me", unchanged_since=1000.0, now=1000.0 + seen_for) is step


class LeaseStore:
    """One Lease with the API server's optimistic concurrency; `down`: every call a 503, or with
    "unreachable" the client's own connection error (urllib3's, not an ApiException)."""

    def __init__(self):
        self.lease, self.versions, self.down = None, itertools.count(1), False

    def answer(self, verb, path, query, body):
        if self.down == "unreachable":
            raise urllib3.exceptions.MaxRetryError(None, path, "connection refused")
        if self.down:
            return 503, {"reason": "ServiceUnavailable"}
        if verb == "GET":
            return (200, copy.deepcopy(self.lease)) if self.lease else (404, {"reason": "NotFound"})
        if verb == "POST":
            if self.lease:
                return 409, {"reason": "AlreadyExists"}
        elif verb == "PUT":
            if not self.lease or body["metadata"]["resourceVersion"] != self.lease["metadata"]["resourceVersion"]:
                return 409, {"reason": "Conflict"}
        else:
            return 405, {}
        self.lease = copy.deepcopy(body)
        self.lease["metadata"]["resourceVersion"] = str(next(self.versions))
        return 200, copy.deepcopy(self.lease)


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def candidate(store, identity, clock, duration=15.0):
    kube = Kube(LockedApi(answer=store.answer), "llmop-leader-election")
    return LeaderElector(kube, NS, NAME, identity, LeaseTiming(duration), clock=clock, wall=lambda: 1.7e9 + clock())


class LockedApi(RecordingApi):
    """RecordingApi answers from the last call recorded: one call at a time (the renewal thread)."""

    def __init__(self, answer):
        super().__init__(answer=answer)
        self.lock = threading.Lock()

    def param_serialize(self, *args, **kwargs):
        self.lock.acquire()
        return super().param_serialize(*args, **kwargs)

    def call_api(self, *args, **kwargs):
        try:
            return super().call_api(*args, **kwargs)
        finally:
            self.lock.release()


def test_one_leader_and_a_takeover_only_after_the_lease_expires():
    store, clock = LeaseStore(), Clock()
    a, b = candidate(store, "a", clock), candidate(store, "b", clock)
    assert a.try_once() is Outcome.LEADING
    assert b.try_once() is Outcome.FOLLOWING
    for _ in range(10):  # a renews every 2 s: b never sees the same record for 15 s
        clock.now += 2
        assert a.try_once() is Outcome.LEADING
        assert b.try_once() is Outcome.FOLLOWING
    spec = store.lease["spec"]
    assert spec["holderIdentity"] == "a" and spec["leaseTransitions"] == 0 and spec["leaseDurationSeconds"] == 15
    # a dies: b takes over once the record it saw has been unchanged for the lease's duration.
    clock.now += 14
    assert b.try_once() is Outcome.FOLLOWING
    clock.now += 1
    assert b.try_once() is Outcome.LEADING
    assert store.lease["spec"]["holderIdentity"] == "b" and store.lease["spec"]["leaseTransitions"] == 1
    # a comes back (a stalled process, say): it sees b's fresh record and follows.
    assert a.try_once() is Outcome.FOLLOWING


def test_two_candidates_racing_for_an_expired_lease_cannot_both_win():
    store, clock = LeaseStore(), Clock()
    old = candidate(store, "old", clock)
    assert old.try_once() is Outcome.LEADING
    a, b = candidate(store, "a", clock), candidate(store, "b", clock)
    assert a.try_once() is Outcome.FOLLOWING and b.try_once() is Outcome.FOLLOWING
    clock.now += 15
    expired = copy.deepcopy(store.lease)  # what both read
    assert a.try_once() is Outcome.LEADING  # a's write lands first
    with pytest.raises(ApiException) as err:  # b's carries the version both read
        b._write(Step.TAKE_OVER, expired, LeaseRecord.of(expired))
    assert err.value.status == 409
    assert store.lease["spec"]["holderIdentity"] == "a" and store.lease["spec"]["leaseTransitions"] == 1
    assert b.try_once() is Outcome.FOLLOWING  # on its next round b sees a's new record


def test_release_hands_over_at_once():
    store, clock = LeaseStore(), Clock()
    a, b = candidate(store, "a", clock), candidate(store, "b", clock)
    assert a.try_once() is Outcome.LEADING and b.try_once() is Outcome.FOLLOWING
    a.release()
    assert store.lease["spec"]["holderIdentity"] == ""
    assert b.try_once() is Outcome.LEADING  # no wait for the duration
    a.release()  # not the holder any more: leaves b's lease alone
    assert store.lease["spec"]["holderIdentity"] == "b"


@pytest.mark.parametrize("down", [True, "unreachable"], ids=["503", "connection-refused"])
def test_an_unreachable_api_server_fails_the_round_and_loses_leadership_after_the_deadline(down):
    store = LeaseStore()
    # Real time, short periods: renewals every 0.04 s, given up after 0.2 s.
    a = candidate(store, "a", time.monotonic, duration=0.3)
    assert a.try_once() is Outcome.LEADING
    store.down = down
    assert a.try_once() is Outcome.FAILED
    lost = []
    a.keep(on_lost=lost.append)
    a._keeper.join(timeout=10)
    assert lost and "not renewed" in lost[0]


def test_the_chart_elects_a_leader_and_refuses_two_replicas_without_one():
    import subprocess

    import chart  # tests/operator/conftest.py puts it on the path

    docs = chart.template("replicas=2")
    if docs is None:
        pytest.skip("helm is not built")
    (dep,) = [d for d in docs if d["kind"] == "Deployment"]
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    assert "--leader-elect" in container["args"] and "--lease-duration=15" in container["args"]
    env = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") for e in container["env"]}
    assert env["POD_NAMESPACE"] == "metadata.namespace" and env["POD_NAME"] == "metadata.name"
    assert dep["spec"]["replicas"] == 2 and dep["spec"]["strategy"]["type"] == "RollingUpdate"

    (single,) = [d for d in chart.template("leaderElection.enabled=false") if d["kind"] == "Deployment"]
    assert single["spec"]["strategy"]["type"] == "Recreate"
    assert "--leader-elect" not in single["spec"]["template"]["spec"]["containers"][0]["args"]
    with pytest.raises(subprocess.CalledProcessError) as err:
        chart.template("replicas=2", "leaderElection.enabled=false")
    assert "needs leaderElection.enabled" in err.value.stderr
