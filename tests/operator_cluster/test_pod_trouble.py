"""A pod no node can take: the real kube-scheduler marks it Unschedulable (the spec asks for a GPU
resource no kwok node has), and the LLMDeployment's conditions carry the scheduler's message
with reason PodsUnschedulable, posted as one Warning Event however often it is reconciled."""

from __future__ import annotations

import json

import pytest

from harness import apply, condition, eventually, get

pytestmark = pytest.mark.k8s

# A GPU resource (whole-GPU MIG profile) that sizing accepts and no kwok node advertises.
GPU = "nvidia.com/mig-7g.80gb"
SPEC = {"replicas": 1, "accelerator": {"resourceName": GPU}}


def warnings(cluster, ns: str, name: str) -> list[dict]:
    out = cluster.kubectl("get", "events", "-n", ns, "--field-selector", f"involvedObject.name={name}",
                          "-o", "json").stdout  # fmt: skip
    return [e for e in json.loads(out)["items"] if e["type"] == "Warning"]


def reconciles(operator, ns: str, name: str) -> int:
    """Reconciles the operator finished for that object on an owned object's change (its log)."""
    return sum(f"[{ns}/{name}]" in line and "_owned_changed' succeeded" in line
               for line in operator.log.read_text(errors="replace").splitlines())


def test_unschedulable_pod_reaches_status_and_one_event(k8s_cluster, ns, operator):
    apply(k8s_cluster, {"apiVersion": "llmop.dev/v1alpha1", "kind": "LLMDeployment", "metadata": {"name": "big"},
                        "spec": SPEC}, ns)  # fmt: skip
    obj = eventually(lambda: (d := get(k8s_cluster, "llmd", "big", ns))
                     and (condition(d, "Ready") or {}).get("reason") == "PodsUnschedulable" and d,
                     what="Ready reason PodsUnschedulable")  # fmt: skip
    ready, degraded = condition(obj, "Ready"), condition(obj, "Degraded")
    assert ready["status"] == "False" and f"Insufficient {GPU}" in ready["message"], ready
    assert degraded["status"] == "True" and degraded["reason"] == "PodsUnschedulable", degraded
    assert condition(obj, "SizingValid")["status"] == "True"

    # More reconciles (each change of the owned Deployment triggers one) post nothing new.
    for i in range(3):
        before = reconciles(operator, ns, "big")
        k8s_cluster.kubectl("annotate", "deployment", "big", "-n", ns, f"test/poke={i}", "--overwrite")
        eventually(lambda: reconciles(operator, ns, "big") > before, what="a reconcile")  # noqa: B023
    posted = [(e["reason"], e.get("count", 1)) for e in warnings(k8s_cluster, ns, "big")]
    assert posted == [("PodsUnschedulable", 1)], posted
    assert f"Insufficient {GPU}" in warnings(k8s_cluster, ns, "big")[0]["message"]
