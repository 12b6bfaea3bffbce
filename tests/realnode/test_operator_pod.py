"""The chart's operator runs as a pod, the way users install it: the image built from
Dockerfile.operator, on the real node, reaching the API server through the `kubernetes` Service
with its ServiceAccount's token (no host process runs: the slot stopped it). It reconciles the
smollm2 example into an engine pod that answers through its Service."""

from __future__ import annotations

import pytest
import yaml
from pods import EXAMPLE, START_S, chat, ready_pod

from llmop.operator.local import OPERATOR_NS, condition, eventually, kubectl_json

pytestmark = [pytest.mark.k8s, pytest.mark.realnode]


def test_the_chart_operator_pod_deploys_an_engine_that_answers(k8s_cluster, real_node, operator_pod, fresh_ns):
    (pod,) = operator_pod.pods()
    assert pod["spec"]["nodeName"] == real_node.name
    assert pod["spec"]["serviceAccountName"] == "llmop" and pod["metadata"]["namespace"] == OPERATOR_NS

    body = yaml.safe_load(EXAMPLE.read_text())
    name = body["metadata"]["name"]
    k8s_cluster.kubectl("apply", "-n", fresh_ns, "-f", "-", input=yaml.safe_dump(body))
    llmd = eventually(lambda: (d := kubectl_json(k8s_cluster, "llmd", name, "-n", fresh_ns))
                      and (condition(d, "Ready") or {}).get("status") == "True" and d,
                      timeout=START_S, interval=2, what=f"{name} Ready")  # fmt: skip
    engine = ready_pod(k8s_cluster, fresh_ns, name)
    assert engine is not None
    assert engine["spec"]["containers"][0]["image"] == real_node.engine_image  # the chart's engineImage

    svc = kubectl_json(k8s_cluster, "service", name, "-n", fresh_ns)
    port = next(p["port"] for p in svc["spec"]["ports"] if p["name"] == "http")
    assert chat(f"http://{svc['spec']['clusterIP']}:{port}", llmd["status"]["model"]).strip()
    # It was this pod that reconciled: its log names the (randomly named) namespace.
    assert fresh_ns in operator_pod.tail(400), operator_pod.tail()
