"""The built-in autoscaler on real engine pods: a load through the Service queues requests on the
one pod, the operator finds that pod by the Deployment's selector (no static targets), reads its
queue wait, and moves /scale up; the Deployment starts a second pod; when the load stops, /scale
comes back down. Once with the `pods` source (the operator scrapes pod IPs) and once with a real
Prometheus that discovers the pods through the API server by their `prometheus.io` annotations.
With the `pods` source a GitOps tool owns the manifest (server-side apply, its own field manager,
no `replicas:`) and re-applies it while the autoscaler holds two replicas: no conflict, and the
replica count stays the autoscaler's. Waits are bounded by `eventually`, never timed assertions."""

from __future__ import annotations

import json

import pytest
import yaml
from pods import EXAMPLE, engine_pods, ready_pod, service_url, wait_ready
from processes import Load, Prometheus, prometheus_binary

from llmop.operator.local import eventually, kubectl_json

pytestmark = [pytest.mark.k8s, pytest.mark.realnode]


def autoscaled(name: str, metrics: dict) -> dict:
    body = yaml.safe_load(EXAMPLE.read_text())
    body["metadata"] = {"name": name}
    body["spec"]["engine"]["maxNumSeqs"] = 1  # one sequence at a time, so a few clients queue
    body["spec"]["engine"]["port"] = 8080  # not the scrape port's old default: discovery must use the pod's port
    body["spec"]["autoscaling"] = {
        "enabled": True, "minReplicas": 1, "maxReplicas": 2,
        "targetQueueWaitSeconds": 0.2, "intervalSeconds": 2, "metricWindowSeconds": 10,
        "podStartupSeconds": 0,
        "scaleUp": {"stabilizationWindowSeconds": 0, "periodSeconds": 2},
        "scaleDown": {"stabilizationWindowSeconds": 20, "periodSeconds": 5},
        "metrics": metrics,
    }  # fmt: skip
    return body


def scale(cluster, ns: str, name: str) -> int:
    out = cluster.kubectl("get", "--raw", f"/apis/llmop.dev/v1alpha1/namespaces/{ns}/llmdeployments/{name}/scale")
    return int(json.loads(out.stdout)["spec"].get("replicas", 0))


def scraped(cluster, ns: str, name: str, pod: str) -> bool:
    status = ((kubectl_json(cluster, "llmd", name, "-n", ns) or {}).get("status") or {}).get("autoscaling") or {}
    return any(p["name"] == pod and p["scraped"] for p in status.get("pods", []))


def gitops_apply(cluster, ns: str, name: str, metrics: dict):
    """What Argo CD (ServerSideApply=true) or Flux does: server-side apply as its own field
    manager, without --force-conflicts, the manifest leaving replicas to the autoscaler."""
    return cluster.kubectl("apply", "-n", ns, "-f", "-", "--server-side", "--field-manager=gitops",
                           input=yaml.safe_dump(autoscaled(name, metrics)), check=False)  # fmt: skip


def surge(cluster, ns: str, name: str, metrics: dict, gitops: bool = False) -> tuple[dict, dict]:
    """Deploy, load through the Service until /scale goes up, stop, wait for it to come down:
    (the LLMDeployment with its managed fields, the first pod). `gitops`: the manifest is
    server-side applied, and applied again at two replicas, under the autoscaler's ticks."""
    if gitops:
        assert gitops_apply(cluster, ns, name, metrics).returncode == 0
    else:
        cluster.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(autoscaled(name, metrics)))
    llmd = wait_ready(cluster, ns, name)
    pod = ready_pod(cluster, ns, name)
    assert pod is not None
    eventually(lambda: scraped(cluster, ns, name, pod["metadata"]["name"]), timeout=120,
               what="the autoscaler reading the pod it discovered")  # fmt: skip
    assert scale(cluster, ns, name) == 1
    with Load(service_url(cluster, ns, name), clients=6) as load:
        eventually(lambda: scale(cluster, ns, name) >= 2, timeout=300, what="scale-up under load")
        eventually(lambda: len(engine_pods(cluster, ns, name)) == 2, timeout=120,
                   what="the Deployment's second pod")  # fmt: skip
        if gitops:
            for _ in range(3):  # a sync loop re-applying Git while the autoscaler ticks every 2 s
                out = gitops_apply(cluster, ns, name, metrics)
                assert out.returncode == 0, out.stderr  # a conflict would fail here
                assert scale(cluster, ns, name) == 2
    assert load.done > 0
    eventually(lambda: scale(cluster, ns, name) == 1, timeout=300, what="scale-down after load")
    eventually(lambda: len(engine_pods(cluster, ns, name)) == 1, timeout=120, what="back to one pod")
    return kubectl_json(cluster, "llmd", name, "-n", ns, "--show-managed-fields"), pod


def spec_replicas_owners(body: dict) -> dict[str, str]:
    """Field manager -> operation, of the managedFields entries that own spec.replicas."""
    return {m["manager"]: m["operation"] for m in body["metadata"]["managedFields"]
            if "f:replicas" in (m.get("fieldsV1") or {}).get("f:spec", {})}  # fmt: skip


def assert_recorded(cluster, ns: str, name: str, body: dict, gitops: bool = False) -> None:
    status = body["status"]["autoscaling"]
    assert status["history"] and status["lastDecision"], status
    assert status["history"][-1]["desiredReplicas"] == 1, status["history"]
    assert max(h["desiredReplicas"] for h in status["history"]) == 2, status["history"]
    assert {c["type"]: c["status"] for c in status["conditions"]}["MetricsAvailable"] == "True"
    events = json.loads(cluster.kubectl("get", "events", "-n", ns, "-o", "json",
                                        "--field-selector", f"involvedObject.name={name}").stdout)
    seen = {e["reason"] for e in events["items"]}
    assert {"ScaledUp", "ScaledDown"} <= seen, seen
    owners = spec_replicas_owners(body)
    if gitops:
        # Server-side applied without replicas, the field was defaulted and nobody owns it; the
        # API server (1.36) records no owner for writes through /scale then either. What matters:
        # the GitOps manager never owns it, so its applies neither reset it nor conflict.
        assert "gitops" not in owners, owners
    else:
        # Created by client-side apply, which owned the default; /scale writes take it over.
        assert owners.get("llmop-autoscaler") == "Update", owners


def test_pods_source_discovers_the_pods_and_scales_them_up_and_down(k8s_cluster, pod_ns):
    body, _ = surge(k8s_cluster, pod_ns, "chat", {"source": "pods"}, gitops=True)
    assert_recorded(k8s_cluster, pod_ns, "chat", body, gitops=True)
    managers = {m["manager"] for m in body["metadata"]["managedFields"]}
    assert "gitops" in managers, managers


@pytest.mark.skipif(prometheus_binary() is None, reason="needs Debian's prometheus package")
def test_prometheus_scraping_pods_by_annotation_drives_the_same_scaling(k8s_cluster, pod_ns, tmp_path):
    prom = Prometheus.pods_by_annotation(tmp_path, k8s_cluster, pod_ns)
    try:
        body, pod = surge(k8s_cluster, pod_ns, "chat-prom",
                          {"source": "prometheus", "prometheus": {"url": prom.url}})
        assert prom.has_series(f'llmop_request_queue_time_seconds_count{{pod="{pod["metadata"]["name"]}"}}')
    finally:
        prom.stop()
    assert_recorded(k8s_cluster, pod_ns, "chat-prom", body)
