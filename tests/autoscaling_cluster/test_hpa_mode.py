"""`autoscaling.mode: hpa` on a real control plane: the operator emits a HorizontalPodAutoscaler
that targets the LLMDeployment's /scale on queue wait, and deletes it when switched back.
(The built-in autoscaler scaling real engine pods is tested in tests/realnode.)"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from llmop.operator.local import eventually, kubectl_json

pytestmark = [pytest.mark.k8s, pytest.mark.slow]

EXAMPLE = Path(__file__).parents[2] / "examples" / "smollm2.yaml"


def test_hpa_mode_emits_the_hpa_and_removes_it_when_switched_back(k8s_cluster, ns):
    body = yaml.safe_load(EXAMPLE.read_text())
    body["metadata"] = {"name": "chat-hpa"}
    del body["spec"]["accelerator"]  # no pod needs to run: on a kwok GPU node
    body["spec"]["autoscaling"] = {"enabled": True, "minReplicas": 1, "maxReplicas": 3, "mode": "hpa"}
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
