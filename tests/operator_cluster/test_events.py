"""Events about an LLMDeployment are news, posted once per change: creating one posts a single
`Sized` Event however many triggers (create, the owned Deployment appearing, its status) race."""

from __future__ import annotations

import json

import pytest

from harness import apply, condition, eventually, get

pytestmark = pytest.mark.k8s


def events(cluster, ns: str, name: str) -> list[dict]:
    out = cluster.kubectl("get", "events", "-n", ns, "--field-selector", f"involvedObject.name={name}",
                          "-o", "json").stdout  # fmt: skip
    return json.loads(out)["items"]


def reasons(posted: list[dict]) -> dict[str, int]:
    """Event reason -> how many times it was posted."""
    out: dict[str, int] = {}
    for e in posted:
        out[e["reason"]] = out.get(e["reason"], 0) + e.get("count", 1)
    return out


def test_sized_is_posted_once_on_create(k8s_cluster, ns):
    apply(k8s_cluster, {"apiVersion": "llmop.dev/v1alpha1", "kind": "LLMDeployment", "metadata": {"name": "chat"},
                        "spec": {"replicas": 1}}, ns)  # fmt: skip
    eventually(lambda: (d := get(k8s_cluster, "llmd", "chat", ns)) and (condition(d, "Ready") or {}).get("status")
               == "True", what="Ready")  # fmt: skip
    counts = eventually(lambda: (c := reasons(events(k8s_cluster, ns, "chat"))).get("Sized") and c,
                        what="Sized Event")  # fmt: skip
    assert counts["Sized"] == 1, counts
    # Reaching Ready is news too (its condition existed, False, before): one Event.
    counts = eventually(lambda: (c := reasons(events(k8s_cluster, ns, "chat"))).get("AllReplicasReady") and c,
                        what="AllReplicasReady Event")  # fmt: skip
    assert counts["AllReplicasReady"] == 1 and counts["Sized"] == 1, counts
