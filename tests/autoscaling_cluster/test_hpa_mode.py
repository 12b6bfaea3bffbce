"""The autoscaler end to end: a real control plane, the operator, a real engine process past its
capacity; replicas go up through /scale under load and back down after it stops.

Once with the `pods` source (the operator scrapes the engine's /metrics) and once with a real
Prometheus server scraping the engine (`prometheus` source). Waits are bounded by `eventually`,
never timed assertions.
"""

from __future__ import annotations

import json

import pytest
import yaml
from processes import Load, Prometheus, prometheus_binary

from llmop.operator.local import eventually, kubectl_json

pytestmark = [pytest.mark.k8s, pytest.mark.slow]

EXAMPLE = __import__("pathlib").Path(__file__).parents[2] / "examples" / "smollm2.yaml"


def llmdeployment(name: str, metrics: dict) -> dict:
    body = yaml.safe_load(EXAMPLE.read_text())
    body["metadata"] = {"name": name}
    # On a kwok GPU node: the engines here are host processes reached through metrics.targets.
    del body["spec"]["accelerator"]
    body["spec"]["autoscaling"] = {
        "enabled": True, "minReplicas": 1, "maxReplicas": 3,
        "targetQueueWaitSeconds": 0.2, "intervalSeconds": 2, "metricWindowSeconds": 10,
        "podStartupSeconds": 0,
        "scaleUp": {"stabilizationWindowSeconds": 0, "periodSeconds": 2},
        "scaleDown": {"stabilizationWindowSeconds": 20, "periodSeconds": 5},
        "metrics": metrics,
    }
    return body


def scale(cluster, ns: str, name: str) -> int:
    out = cluster.kubectl("get", "--raw",
                          f"/apis/llmop.dev/v1alpha1/namespaces/{ns}/llmdeployments/{name}/scale")
    return int(json.loads(out.stdout)["spec"].get("replicas", 0))


def run_surge(cluster, ns: str, name: str, url: str, metrics: dict) -> dict:
    cluster.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(llmdeployment(name, metrics)))
    eventually(lambda: (kubectl_json(cluster, "llmd", name, "-n", ns) or {}).get("status", {})
               .get("autoscaling"), timeout=120, what="autoscaler status")
    assert scale(cluster, ns, name) == 1
    with Load(url, clients=6):
        eventually(lambda: scale(cluster, ns, name) >= 2, timeout=300, what="scale-up under load")
    eventually(lambda: scale(cluster, ns, name) == 1, timeout=300, what="scale-down after load")
    return kubectl_json(cluster, "llmd", name, "-n", ns, "--show-managed-fields")


def assert_recorded(cluster, ns: str, name: str, body: dict) -> None:
    status = body["status"]["autoscaling"]
    assert status["history"] and status["lastDecision"], status
    assert status["history"][-1]["desiredReplicas"] == 1, status["history"]
    assert status["pods"] and status["pods"][0]["scraped"], status["pods"]
    assert {c["type"]: c["status"] for c in status["conditions"]}["MetricsAvailable"] == "True"
    # The Deployment followed /scale (the operator never writes spec except through /scale).
    events = json.loads(cluster.kubectl("get", "events", "-n", ns, "-o", "json",
                                        "--field-selector", f"involvedObject.name={name}").stdout)
    seen = {e["reason"] for e in events["items"]}
    assert {"ScaledUp", "ScaledDown"} <= seen, seen
    managers = {m["manager"] for m in body["metadata"]["managedFields"]
                if "f:replicas" in json.dumps(m.get("fieldsV1", {}))}
    assert "llmop-autoscaler" in managers, managers


def test_pods_source_scales_up_under_load_and_back_down(k8s_cluster, ns, engine):
    body = run_surge(k8s_cluster, ns, "chat", engine.url, {"targets": [engine.url]})
    assert_recorded(k8s_cluster, ns, "chat", body)


@pytest.mark.skipif(prometheus_binary() is None, reason="needs Debian's prometheus package")
def test_prometheus_source_scales_up_under_load_and_back_down(k8s_cluster, ns, engine, tmp_path):
    instance = engine.url.removeprefix("http://")
    prom = Prometheus(tmp_path, [instance])
    try:
        eventually(lambda: "llmop_request_queue_time_seconds" in __import__("httpx").get(
            prom.url + "/api/v1/label/__name__/values").text, timeout=60, what="first scrape")
        body = run_surge(k8s_cluster, ns, "chat-prom", engine.url, {
            "source": "prometheus", "targets": [engine.url],
            "prometheus": {"url": prom.url, "podLabel": "instance"},
        })
    finally:
        prom.stop()
    assert_recorded(k8s_cluster, ns, "chat-prom", body)


def test_hpa_mode_emits_the_hpa_and_removes_it_when_switched_back(k8s_cluster, ns):
    body = llmdeployment("chat-hpa", {})
    body["spec"]["autoscaling"]["mode"] = "hpa"
    k8s_cluster.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(body))
    hpa = eventually(lambda: kubectl_json(k8s_cluster, "hpa", "chat-hpa", "-n", ns), timeout=120,
                     what="HPA applied")
    assert hpa["spec"]["scaleTargetRef"]["kind"] == "LLMDeployment"
    assert hpa["spec"]["metrics"][0]["pods"]["metric"]["name"] == "llmop_queue_wait_seconds"
    assert hpa["metadata"]["ownerReferences"][0]["name"] == "chat-hpa"
    body["spec"]["autoscaling"]["mode"] = "builtin"
    k8s_cluster.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(body))
    eventually(lambda: kubectl_json(k8s_cluster, "hpa", "chat-hpa", "-n", ns) is None, timeout=120,
               what="HPA deleted")
