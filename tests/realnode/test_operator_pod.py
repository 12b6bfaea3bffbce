"""The chart's operator runs as a pod, the way users install it: the image built from
Dockerfile.operator, on the real node, reaching the API server through the `kubernetes` Service
with its ServiceAccount's token (no host process runs: the slot stopped it). It reconciles the
smollm2 example into an engine pod that answers through its Service."""

from __future__ import annotations

import pytest
import yaml
from pods import EXAMPLE, chat, ready_pod, service_url, wait_ready

from llmop.operator.local import OPERATOR_NS

pytestmark = [pytest.mark.k8s, pytest.mark.realnode]


def test_the_chart_operator_pod_deploys_an_engine_that_answers(k8s_cluster, real_node, operator_pod, fresh_ns):
    (pod,) = operator_pod.pods()
    assert pod["spec"]["nodeName"] == real_node.name
    assert pod["spec"]["serviceAccountName"] == "llmop" and pod["metadata"]["namespace"] == OPERATOR_NS

    body = yaml.safe_load(EXAMPLE.read_text())
    name = body["metadata"]["name"]
    k8s_cluster.kubectl("apply", "-n", fresh_ns, "-f", "-", input=yaml.safe_dump(body))
    llmd = wait_ready(k8s_cluster, fresh_ns, name)
    engine = ready_pod(k8s_cluster, fresh_ns, name)
    assert engine is not None
    assert engine["spec"]["containers"][0]["image"] == real_node.engine_image  # the chart's engineImage

    assert chat(service_url(k8s_cluster, fresh_ns, name), llmd["status"]["model"]).strip()
    # It was this pod that reconciled: its log names the (randomly named) namespace.
    assert fresh_ns in operator_pod.tail(400), operator_pod.tail()
