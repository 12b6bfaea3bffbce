"""Specs the API server rejects (schema and CEL, with the field named), and a spec that passes the
schema but cannot be sized: SizingValid=False with the reason, an Event, and nothing created."""

from __future__ import annotations

import json

import pytest

from harness import apply, condition, eventually, get

pytestmark = pytest.mark.k8s


def llmd(name: str, spec: dict) -> dict:
    return {"apiVersion": "llmop.dev/v1alpha1", "kind": "LLMDeployment", "metadata": {"name": name}, "spec": spec}


@pytest.mark.parametrize(
    "spec,field",
    [
        ({"kvCache": {"budgetTokens": 100, "concurrency": 2, "contextLength": 512}}, "spec.kvCache.budgetTokens"),
        ({"kvCache": {"concurrency": 2}}, "spec.kvCache.concurrency"),
        ({"parallelism": {"tensor": "lots"}}, "spec.parallelism.tensor"),
        ({"parallelism": {"tensor": 0}}, "spec.parallelism.tensor"),
        ({"replicas": -1}, "spec.replicas"),
        ({"model": {"source": "ftp://weights"}}, "spec.model.source"),
        ({"accelerator": {"memoryPerGPU": "lots"}}, "spec.accelerator.memoryPerGPU"),
        ({"kvCache": {"dtype": "int3"}}, "spec.kvCache.dtype"),
        ({"autoscaling": {"minReplicas": 5, "maxReplicas": 2}}, "spec.autoscaling"),
        ({"engine": {"maxModelLen": 1024}, "kvCache": {"concurrency": 2, "contextLength": 4096}},
         "spec.kvCache.contextLength"),
        ({"model": {"architecture": {"parameters": 1, "layers": 1, "attentionHeads": 4, "kvHeads": 3,
                                      "headDim": 8}}}, "spec.model.architecture.kvHeads"),
        ({"model": {"quantization": "fp16"}}, "spec.model.quantization"),  # fp16 weights: CPU only
        ({"tenancy": {"maxAdaptersPerNamespace": 0}}, "spec.tenancy.maxAdaptersPerNamespace"),
    ],
)  # fmt: skip
def test_api_server_rejects_with_the_field(k8s_cluster, ns, spec, field):
    out = apply(k8s_cluster, llmd("bad", spec), ns, check=False)
    assert out.returncode != 0
    assert field in out.stderr, out.stderr
    assert get(k8s_cluster, "llmd", "bad", ns) is None


def test_unsizable_spec_gets_a_condition_and_nothing_else(k8s_cluster, ns):
    spec = {
        "model": {"source": "hf://meta-llama/Meta-Llama-3-70B-Instruct"},
        "accelerator": {"gpusPerNode": 2},
        "kvCache": {"concurrency": 100, "contextLength": 4096},
    }
    apply(k8s_cluster, llmd("toobig", spec), ns)
    obj = eventually(lambda: (d := get(k8s_cluster, "llmd", "toobig", ns)) and condition(d, "SizingValid") and d)
    sizing = condition(obj, "SizingValid")
    assert sizing["status"] == "False" and sizing["reason"] == "ExceedsNode"
    assert "needs 4 GPUs of 80.00 GiB per node; nodes have 2" in sizing["message"]
    assert condition(obj, "Ready")["status"] == "False"
    events = eventually(lambda: json.loads(k8s_cluster.kubectl(
        "get", "events", "-n", ns, "--field-selector", "involvedObject.name=toobig", "-o", "json").stdout)["items"])
    assert any(e["reason"] == "ExceedsNode" and e["type"] == "Warning" for e in events)
    owned = k8s_cluster.kubectl("get", "deployments,services,configmaps,pdb,networkpolicies", "-n", ns,
                                "-l", "app.kubernetes.io/instance=toobig", "-o", "name").stdout.strip()  # fmt: skip
    assert owned == ""
