"""The smollm2 example runs as a real pod: containerd starts the engine image, the kubelet's
readiness probe on /ready makes the LLMDeployment Ready, and a chat completion from the host
goes through the Service (kube-proxy). A deleted pod is replaced by one that serves."""

from __future__ import annotations

import httpx
import pytest
import yaml

from llmop.operator.local import eventually

from pods import EXAMPLE, START_S, chat, ready_pod, service_url, wait_ready

pytestmark = [pytest.mark.k8s, pytest.mark.realnode]


def test_smollm2_runs_in_a_real_pod_and_answers_through_its_service(k8s_cluster, real_node, pod_ns):
    body = yaml.safe_load(EXAMPLE.read_text())
    name = body["metadata"]["name"]
    k8s_cluster.kubectl("apply", "-n", pod_ns, "-f", "-", input=yaml.safe_dump(body))

    llmd = wait_ready(k8s_cluster, pod_ns, name)
    pod = ready_pod(k8s_cluster, pod_ns, name)
    assert pod is not None
    assert pod["spec"]["nodeName"] == real_node.name
    (engine,) = pod["status"]["containerStatuses"]
    assert engine["image"].endswith(real_node.engine_image.split("/", 1)[1]) and engine["started"], engine
    assert engine["containerID"].startswith("containerd://") and "running" in engine["state"]
    assert pod["status"]["podIP"].startswith("10.89.")

    url = service_url(k8s_cluster, pod_ns, name)
    model = llmd["status"]["model"]
    assert chat(url, model).strip()

    # The engine's own metrics count the request: it was this pod that answered.
    metrics = httpx.get(f"http://{pod['status']['podIP']}:{url.rsplit(':', 1)[1]}/metrics", timeout=30).text
    assert any(line.startswith("llmop_request_success_total") and not line.rstrip().endswith(" 0.0")
               for line in metrics.splitlines()), metrics[:2000]  # fmt: skip

    k8s_cluster.kubectl("delete", "pod", "-n", pod_ns, pod["metadata"]["name"], "--wait=false")
    new = eventually(lambda: (p := ready_pod(k8s_cluster, pod_ns, name))
                     and p["metadata"]["uid"] != pod["metadata"]["uid"] and p,
                     timeout=START_S, interval=2, what="a replacement pod Ready")  # fmt: skip
    assert new["spec"]["nodeName"] == real_node.name
    assert chat(url, model).strip()
