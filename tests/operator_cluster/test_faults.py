"""The operator converges through control-plane faults, and nothing churns once it has: after each
fault the LLMDeployment is Ready on its latest spec, and the system falls quiet: a spell passes in
which nothing the operator writes changes (`harness.operator_writes`).

Faults (`llmop.devcluster.faults`), each right after a spec change, so a reconcile is in flight:
the API server restarted; etcd frozen; and an expired watch: the operator frozen while the spec
changes and an owned Service is deleted, the API server restarted and etcd's history compacted,
then the operator thawed, so every watch it resumes gets 410 Gone and it has to list again. The
operator SIGKILLed between applies is in test_lifecycle.py and test_leader_election.py."""

from __future__ import annotations

import os
import signal
import time

import pytest
import yaml

from harness import apply, condition, eventually, get, operator_writes

from llmop.devcluster import faults, runner

pytestmark = [pytest.mark.k8s, pytest.mark.slow]

QUIET_S = 10


def manifest(max_model_len: int) -> str:
    return yaml.safe_dump({
        "apiVersion": "llmop.dev/v1alpha1", "kind": "LLMDeployment", "metadata": {"name": "chat"},
        "spec": {"engine": {"maxModelLen": max_model_len}, "replicas": 2},
    })  # fmt: skip


def converged(cluster, ns, max_model_len: int) -> bool:
    d = get(cluster, "llmd", "chat", ns)
    cm = get(cluster, "configmap", "chat-engine", ns)
    return bool(
        d and (condition(d, "Ready") or {}).get("status") == "True"
        and d["status"].get("observedGeneration") == d["metadata"]["generation"]
        and cm and yaml.safe_load(cm["data"]["engine.yaml"])["max_model_len"] == max_model_len
        and get(cluster, "service", "chat", ns)
    )  # fmt: skip


def quiet(cluster, ns) -> bool:
    """Nothing the operator writes for the LLMDeployment changes for QUIET_S seconds."""
    before = operator_writes(cluster, ns)
    time.sleep(QUIET_S)
    return operator_writes(cluster, ns) == before


def settle(cluster, ns, max_model_len: int, what: str) -> None:
    """Converged, then a quiet spell. Right after an API server restart the controllers' relists
    rewrite the Deployment's and the PDB's status, and the operator mirrors the Deployment's into
    the LLMDeployment's; a write loop would never fall quiet."""
    start = time.monotonic()
    eventually(lambda: converged(cluster, ns, max_model_len), timeout=240, what=f"converged after {what}")
    ready_s = time.monotonic() - start
    eventually(lambda: quiet(cluster, ns), timeout=180, interval=0, what=f"no writes after {what}")
    assert converged(cluster, ns, max_model_len)
    print(f"{what}: converged in {ready_s:.1f}s, quiet {QUIET_S}s window ended {time.monotonic() - start:.1f}s after")


def test_the_operator_converges_through_control_plane_faults(k8s_cluster, ns, operator):
    kc, layout = k8s_cluster, runner.default_layout()
    gitops = ("--server-side", "--field-manager=gitops")
    apply(kc, manifest(2048), ns, *gitops)
    settle(kc, ns, 2048, "the first apply")

    apply(kc, manifest(3072), ns, *gitops)
    faults.restart_apiserver(layout)
    settle(kc, ns, 3072, "an API server restart")

    apply(kc, manifest(4096), ns, *gitops)
    with faults.etcd_paused(layout):
        time.sleep(8)
    settle(kc, ns, 4096, "etcd frozen for 8 s")

    os.kill(operator.proc.pid, signal.SIGSTOP)
    try:
        apply(kc, manifest(1024), ns, *gitops)
        kc.kubectl("delete", "service", "chat", "-n", ns)
        faults.restart_apiserver(layout)
        faults.compact_etcd()
    finally:
        os.kill(operator.proc.pid, signal.SIGCONT)
    settle(kc, ns, 1024, "an expired watch (410 Gone) with changes missed")
    assert operator.proc.poll() is None, operator.tail()
