"""Two operator replicas with leader election on the real control plane: one reconciles; when it is
SIGKILLed right after a new LLMDeployment is applied, the standby takes the Lease over once it
expires and finishes the work: one of each object, status complete, nothing churning afterwards;
a leader that shuts down cleanly hands over at once. Both run as the chart's ServiceAccount, so
the chart's leader-election Role is what they are allowed."""

from __future__ import annotations

import time
import uuid

import pytest
import yaml

from harness import (
    OPERATOR_NS,
    OWNED,
    OperatorProcess,
    apply,
    condition,
    eventually,
    get,
    install_chart,
    kubectl_json,
    new_namespace,
    operator_writes,
    service_account_kubeconfig,
)

pytestmark = pytest.mark.k8s

LEASE_SECONDS = 4


def manifest() -> str:
    return yaml.safe_dump({
        "apiVersion": "llmop.dev/v1alpha1", "kind": "LLMDeployment", "metadata": {"name": "chat"},
        "spec": {"engine": {"maxModelLen": 2048}, "replicas": 2},
    })  # fmt: skip


def holder(cluster, lease: str) -> tuple[str, int] | None:
    obj = kubectl_json(cluster, "lease", lease, "-n", OPERATOR_NS)
    return obj and (obj["spec"].get("holderIdentity", ""), obj["spec"].get("leaseTransitions", 0))


def ready(cluster, ns):
    d = get(cluster, "llmd", "chat", ns)
    return d if d and (condition(d, "Ready") or {}).get("status") == "True" and d["status"].get(
        "observedGeneration") == d["metadata"]["generation"] else None  # fmt: skip


def test_the_standby_takes_over_from_a_killed_leader_and_a_clean_leader_hands_over(k8s_cluster, operator_slot,
                                                                                  tmp_path):
    kc = k8s_cluster
    operator_slot.stop()  # only the two replicas below run
    install_chart(kc, "replicas=0")
    lease = f"llmop-test-{uuid.uuid4().hex[:6]}"
    kubeconfig = service_account_kubeconfig(kc, tmp_path / "kubeconfig")
    args = ("--leader-elect", f"--leader-election-namespace={OPERATOR_NS}", f"--leader-election-id={lease}",
            f"--lease-duration={LEASE_SECONDS}")  # fmt: skip
    replicas = {name: OperatorProcess(kubeconfig, tmp_path / f"{name}.log",
                                      {"KUBECONFIG": str(kubeconfig), "POD_NAME": name}, args)
                for name in ("a", "b")}  # fmt: skip
    a, b = replicas["a"], replicas["b"]
    ns = new_namespace(kc)
    try:
        a.start()
        eventually(lambda: holder(kc, lease) == ("a", 0), timeout=60, what="a leads")
        b.start()
        eventually(lambda: "waiting for leadership" in b.tail(), timeout=60, what="b stands by")

        apply(kc, manifest(), ns, "--server-side", "--field-manager=gitops")
        a.kill()  # SIGKILL right after the apply: no release, the Lease has to expire
        assert holder(kc, lease)[0] == "a"
        eventually(lambda: holder(kc, lease) == ("b", 1), timeout=60, what="b took the lease over")
        eventually(lambda: ready(kc, ns), timeout=120, what="Ready after the takeover")
        for kind in OWNED:  # nothing duplicated
            items = kubectl_json(kc, kind, "-n", ns, "-l", "app.kubernetes.io/instance=chat")["items"]
            assert len(items) == 1, f"{kind}: {[i['metadata']['name'] for i in items]}"
        d = ready(kc, ns)
        assert d["status"]["replicas"] == 2 and condition(d, "SizingValid")["status"] == "True"  # no status lost

        # Converged: renewals of the Lease go on, no other object changes.
        before = operator_writes(kc, ns)
        time.sleep(3 * LEASE_SECONDS)
        assert operator_writes(kc, ns) == before

        # A leader stopped with SIGTERM releases the Lease: the standby leads without waiting it out.
        a.start()
        eventually(lambda: a.tail().count("waiting for leadership") == 1, timeout=60, what="a stands by")
        b.stop()
        assert "released lease" in b.tail()
        eventually(lambda: holder(kc, lease) == ("a", 2), timeout=60, what="a leads again")
        assert b.proc.returncode == 0
        log_b = b.tail(400)
        assert log_b.index("waiting for leadership") < log_b.index("is now the leader")
    finally:
        for proc in replicas.values():
            proc.stop()
        kc.kubectl("delete", "lease", lease, "-n", OPERATOR_NS, check=False)
        kc.kubectl("delete", "namespace", ns, "--wait=false", check=False)
