"""The smollm2 example runs as a real pod: containerd starts the engine image, the kubelet's
readiness probe on /ready makes the LLMDeployment Ready, and a chat completion from the host
goes through the Service (kube-proxy). A deleted pod is replaced by one that serves."""

from __future__ import annotations

import httpx
import pytest
import yaml

from llmop.operator.local import condition, eventually, kubectl_json

from pods import EXAMPLE, START_S, chat, ready_pod

pytestmark = [pytest.mark.k8s, pytest.mark.realnode]


def test_smollm2_runs_in_a_real_pod_and_answers_through_its_service(k8s_cluster, real_node, pod_ns):
    body = yaml.safe_load(EXAMPLE.read_text())
    name = body["metadata"]["name"]
    k8s_cluster.kubectl("apply", "-n", pod_ns, "-f", "-", input=yaml.safe_dump(body))

    llmd = eventually(lambda: (d := kubectl_json(k8s_cluster, "llmd", name, "-n", pod_ns))
                      and (condition(d, "Ready") or {}).get("status") == "True" and d,
                      timeout=START_S, interval=2, what=f"{name} Ready")  # fmt: skip
    pod = ready_pod(k8s_cluster, pod_ns, name)
    assert pod is not None
    assert pod["spec"]["nodeName"] == real_node.name
    (engine,) = pod["status"]["containerStatuses"]
    assert engine["image"].endswith(real_node.engine_image.split("/", 1)[1]) and engine["started"], engine
    assert engine["containerID"].startswith("containerd://") and "running" in engine["state"]
    assert pod["status"]["podIP"].startswith("10.89.")

    svc = kubectl_json(k8s_cluster, "service", name, "-n", pod_ns)
    port = next(p["port"] for p in svc["spec"]["ports"] if p["name"] == "http")
    url = f"http://{svc['spec']['clusterIP']}:{port}"
    model = llmd["status"]["model"]
    assert chat(url, model).strip()

    # The engine's own metrics count the request: it was this pod that answered.
    metrics = httpx.get(f"http://{pod['status']['podIP']}:{port}/metrics", timeout=30).text
    assert any(line.startswith("llmop_request_success_total") and not line.rstrip().endswith(" 0.0")
               for line in metrics.splitlines()), metrics[:2000]  # fmt: skip

    k8s_cluster.kubectl("delete", "pod", "-n", pod_ns, pod["metadata"]["name"], "--wait=false")
    new = eventually(lambda: (p := ready_pod(k8s_cluster, pod_ns, name))
                     and p["metadata"]["uid"] != pod["metadata"]["uid"] and p,
                     timeout=START_S, interval=2, what="a replacement pod Ready")  # fmt: skip
    assert new["spec"]["nodeName"] == real_node.name
    assert chat(url, model).strip()
