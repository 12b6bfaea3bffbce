"""The life of one LLMDeployment on the real control plane: rollout on a config change, drift
reverted, GitOps re-applies change nothing, restart mid-reconcile converges, delete cleans up."""

from __future__ import annotations

import json

import pytest
import yaml

from harness import apply, condition, eventually, get

pytestmark = pytest.mark.k8s


def manifest(max_model_len: int = 2048) -> str:
    return yaml.safe_dump({
        "apiVersion": "llmop.dev/v1alpha1", "kind": "LLMDeployment", "metadata": {"name": "chat"},
        "spec": {"engine": {"maxModelLen": max_model_len}, "replicas": 2},
    })  # fmt: skip


def ready(cluster, ns):
    d = get(cluster, "llmd", "chat", ns)
    gen = d and d["metadata"]["generation"]
    return d if d and (condition(d, "Ready") or {}).get("status") == "True" and d["status"].get(
        "observedGeneration") == gen else None  # fmt: skip


def pod_hashes(cluster, ns) -> set[str]:
    out = cluster.kubectl("get", "pods", "-n", ns, "-l", "app.kubernetes.io/instance=chat", "-o", "json").stdout
    return {p["metadata"]["annotations"].get("llmop.dev/config-hash") for p in json.loads(out)["items"]
            if not p["metadata"].get("deletionTimestamp")}  # fmt: skip


def test_lifecycle(k8s_cluster, ns, operator):
    kc = k8s_cluster
    apply(kc, manifest(2048), ns, "--server-side", "--field-manager=gitops")
    eventually(lambda: ready(kc, ns), what="Ready")
    first = pod_hashes(kc, ns)
    assert len(first) == 1

    # GitOps applies the same YAML again: no change anywhere, no conflict.
    before = {k: get(kc, k, n, ns)["metadata"]["resourceVersion"]
              for k, n in [("llmd", "chat"), ("deployment", "chat"), ("configmap", "chat-engine")]}  # fmt: skip
    for _ in range(2):
        out = apply(kc, manifest(2048), ns, "--server-side", "--field-manager=gitops")
        assert "unchanged" in out.stdout or "serverside-applied" in out.stdout
    after = {k: get(kc, k, n, ns)["metadata"]["resourceVersion"]
             for k, n in [("llmd", "chat"), ("deployment", "chat"), ("configmap", "chat-engine")]}  # fmt: skip
    assert after == before

    # Editing maxModelLen rolls the pods onto the new config.
    apply(kc, manifest(4096), ns, "--server-side", "--field-manager=gitops")
    eventually(lambda: ready(kc, ns) and pod_hashes(kc, ns) not in (set(), first) and len(pod_hashes(kc, ns)) == 1,
               what="rolled")  # fmt: skip
    cm = get(kc, "configmap", "chat-engine", ns)
    assert yaml.safe_load(cm["data"]["engine.yaml"])["max_model_len"] == 4096

    # A manual edit of the owned Deployment is reverted.
    kc.kubectl("patch", "deployment", "chat", "-n", ns, "--type=merge", "-p",
               json.dumps({"spec": {"replicas": 5, "template": {"spec": {"terminationGracePeriodSeconds": 1}}}}))
    eventually(lambda: (d := get(kc, "deployment", "chat", ns))["spec"]["replicas"] == 2
               and d["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 45, what="drift reverted")
    # A deleted owned object comes back.
    kc.kubectl("delete", "service", "chat", "-n", ns)
    eventually(lambda: get(kc, "service", "chat", ns), what="service recreated")

    # Kill the operator mid-reconcile (right after a spec change), restart it: same state.
    apply(kc, manifest(3072), ns, "--server-side", "--field-manager=gitops")
    operator.kill()
    operator.start()
    eventually(lambda: ready(kc, ns) and yaml.safe_load(get(kc, "configmap", "chat-engine", ns)["data"][
        "engine.yaml"])["max_model_len"] == 3072, what="converged after restart")  # fmt: skip

    # The operator never took ownership of spec fields.
    shown = kc.kubectl("get", "llmd", "chat", "-n", ns, "-o", "json", "--show-managed-fields").stdout
    managers = {m["manager"]: m for m in json.loads(shown)["metadata"]["managedFields"]}
    assert "gitops" in managers
    for name, entry in managers.items():
        if name != "gitops":
            assert "f:spec" not in entry.get("fieldsV1", {}), name

    # Deleting the LLMDeployment removes everything it owned (garbage collector, ownerReferences).
    kc.kubectl("delete", "llmd", "chat", "-n", ns)
    eventually(lambda: kc.kubectl("get", "deployments,services,configmaps,pdb,networkpolicies,pods", "-n", ns,
                                  "-l", "app.kubernetes.io/instance=chat", "-o", "name").stdout.strip() == "",
               what="owned objects deleted")  # fmt: skip
