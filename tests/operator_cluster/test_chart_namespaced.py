"""The chart's namespaced mode (`watchNamespace`), installed for real: its Role grants only
namespaced resources (a Role cannot grant cluster-scoped ones such as CRDs), and the operator,
running with that ServiceAccount's token, reconciles an LLMDeployment in its namespace without
one refused request, while the API server refuses it everything outside that namespace."""

from __future__ import annotations

import json
import subprocess
import uuid

import pytest

from harness import CHART, apply, condition, eventually, get, new_namespace
from llmop.operator.local import install_chart

pytestmark = pytest.mark.k8s

RELEASE = "llmop-ns"  # its full name, so the ServiceAccount's and the Role's name too
MANAGER = "llmop-ns"  # the field manager this operator applies with (the session's uses "llmop")
CLUSTER_SCOPED = {"customresourcedefinitions", "namespaces", "nodes", "clusterroles", "clusterrolebindings"}


@pytest.fixture
def namespaced(k8s_cluster, operator_slot):
    """(watched namespace, another namespace, the operator process, its kubeconfig)."""
    home, watched, other = f"llmop-ns-{uuid.uuid4().hex[:6]}", new_namespace(k8s_cluster), new_namespace(k8s_cluster)
    # replicas=0: the host process below is this release's operator.
    install_chart(k8s_cluster, f"watchNamespace={watched}", "replicas=0", release=RELEASE, namespace=home)
    proc = operator_slot.run(env={"LLMOP_FIELD_MANAGER": MANAGER}, args=("--namespace", watched),
                             account=RELEASE, namespace=home)  # fmt: skip
    yield watched, other, proc, proc.kubeconfig
    operator_slot.stop()
    subprocess.run([str(k8s_cluster.helm_path), "uninstall", RELEASE, "-n", home], env=k8s_cluster.env(),
                   capture_output=True, timeout=120)  # fmt: skip
    for ns in (home, watched, other):
        k8s_cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def llmd(name: str) -> dict:
    return {"apiVersion": "llmop.dev/v1alpha1", "kind": "LLMDeployment", "metadata": {"name": name},
            "spec": {"replicas": 1}}  # fmt: skip


def managers(obj: dict) -> set[str]:
    return {m["manager"] for m in obj["metadata"].get("managedFields", [])}


def test_namespaced_mode_reconciles_its_namespace_only(k8s_cluster, namespaced):
    watched, other, proc, kubeconfig = namespaced
    assert get(k8s_cluster, "clusterrole", RELEASE, "default") is None
    role = get(k8s_cluster, "role", RELEASE, watched)
    granted = {r for rule in role["rules"] for r in rule["resources"]}
    assert not granted & CLUSTER_SCOPED, granted

    apply(k8s_cluster, llmd("chat"), watched)
    eventually(lambda: (d := get(k8s_cluster, "llmd", "chat", watched))
               and (condition(d, "Ready") or {}).get("status") == "True", what="Ready in the watched namespace")
    shown = k8s_cluster.kubectl("get", "deployment", "chat", "-n", watched, "-o", "json", "--show-managed-fields")
    assert MANAGER in managers(json.loads(shown.stdout)), "this operator did not apply the Deployment"

    # Outside its namespace the API server refuses the ServiceAccount, and the operator does not try.
    apply(k8s_cluster, llmd("chat"), other)
    as_operator = ["--kubeconfig", str(kubeconfig)]
    for args in (["get", "llmd", "-n", other], ["get", "deployments", "-n", other], ["get", "crd"]):
        out = k8s_cluster.kubectl(*as_operator, *args, check=False)
        assert out.returncode != 0 and "Forbidden" in out.stderr, (args, out.stdout, out.stderr)
    log = proc.log.read_text(errors="replace")
    assert "Forbidden" not in log and "forbidden" not in log, proc.tail()
    assert proc.proc.poll() is None, proc.tail()
