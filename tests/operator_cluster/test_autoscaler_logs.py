"""The autoscaler's log is news only: with nothing changing, ticks log nothing at INFO (the
operator's INFO log once carried one line per LLMDeployment per second)."""

from __future__ import annotations

import pytest

from harness import apply, condition, eventually, get

pytestmark = pytest.mark.k8s

TICKS = 3


def test_steady_ticks_log_nothing_at_info(k8s_cluster, ns, operator):
    spec = {"replicas": 1, "autoscaling": {"enabled": True, "minReplicas": 1, "maxReplicas": 2, "intervalSeconds": 1}}
    apply(k8s_cluster, {"apiVersion": "llmop.dev/v1alpha1", "kind": "LLMDeployment", "metadata": {"name": "quiet"},
                        "spec": spec}, ns)  # fmt: skip

    def decided():
        d = get(k8s_cluster, "llmd", "quiet", ns)
        ready = (condition(d, "Ready") or {}).get("status") == "True"
        return ready and ((d["status"].get("autoscaling") or {}).get("lastDecision") or {}).get("time")

    first = eventually(decided, what="Ready and a first decision")
    start = operator.log.stat().st_size
    seen = {first}
    # Several more decisions (each one tick of the autoscaler; the pods have no metrics, so it holds).
    eventually(lambda: seen.add(decided()) or len(seen - {None, False}) > TICKS, what=f"{TICKS} more decisions")
    with operator.log.open("rb") as f:
        f.seek(start)
        lines = f.read().decode(errors="replace").splitlines()
    mine = [line for line in lines if f"[{ns}/quiet]" in line and " INFO " in line]
    assert mine == [], mine
