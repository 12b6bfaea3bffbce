"""The Helm chart: lint, template (RBAC from operator/rbac.py), and installed by the session
fixture — the operator the other tests watch runs as the chart's ServiceAccount with its RBAC."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from harness import CHART, OPERATOR_NS, RELEASE, get
from llmop.operator.rbac import CLUSTER_RULES, LEADER_ELECTION_RULES, RULES

pytestmark = pytest.mark.k8s


def helm(cluster, *args):
    return subprocess.run([str(cluster.helm_path), *args], capture_output=True, text=True, env=cluster.env(),
                          timeout=120)  # fmt: skip


def test_lint(k8s_cluster):
    out = helm(k8s_cluster, "lint", str(CHART), "--strict")
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize("namespace,kind,rules", [("", "ClusterRole", RULES + CLUSTER_RULES), ("ml", "Role", RULES)])
def test_template_rbac(k8s_cluster, namespace, kind, rules):
    out = helm(k8s_cluster, "template", "x", str(CHART), "--set", f"watchNamespace={namespace}")
    assert out.returncode == 0, out.stderr
    docs = [d for d in yaml.safe_load_all(out.stdout) if d]
    roles = {d["metadata"]["name"]: d for d in docs if d["kind"] in ("Role", "ClusterRole")}
    assert roles.pop("x-llmop-leader-election")["rules"] == LEADER_ELECTION_RULES
    ((_, role),) = roles.items()
    assert role["kind"] == kind and role["rules"] == rules
    (dep,) = [d for d in docs if d["kind"] == "Deployment"]
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    election = ["--leader-elect", "--lease-duration=15"]
    assert args == (["operator", f"--namespace={namespace}", *election] if namespace else ["operator", *election])


def test_values_schema_rejects_unknown_values(k8s_cluster):
    out = helm(k8s_cluster, "template", "x", str(CHART), "--set", "nonsense=1")
    assert out.returncode != 0


def test_installed(k8s_cluster, operator):
    assert get(k8s_cluster, "deployment", RELEASE, OPERATOR_NS)
    assert get(k8s_cluster, "clusterrole", RELEASE, "default")["rules"] == RULES + CLUSTER_RULES
    assert operator.proc.poll() is None, operator.tail()
