"""Each GPU example applied to the real control plane becomes Ready on the fake GPU nodes, with the
GPU counts and engine config sizing decided. (smollm2.yaml runs on the CPU, in a real pod:
tests/realnode/test_engine_pod.py.)"""

from __future__ import annotations

import pytest
import yaml

from harness import ROOT, apply, condition, eventually, get

pytestmark = pytest.mark.k8s

# example -> (tensor-parallel size, GPUs per pod)
EXPECTED = {"llama3-8b.yaml": 1, "llama3-70b.yaml": 4}


def _prerequisites(cluster, ns: str) -> None:
    """What the examples refer to: the HF token Secret, and a bound PVC with the 70B weights."""
    cluster.kubectl("create", "secret", "generic", "hf-token", "-n", ns, "--from-literal=HF_TOKEN=x")
    pv = {
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": f"{ns}-weights"},
        "spec": {"capacity": {"storage": "200Gi"}, "accessModes": ["ReadOnlyMany"],
                 "hostPath": {"path": "/tmp"}, "storageClassName": "",
                 "claimRef": {"namespace": ns, "name": "llama3-70b-weights"}},
    }  # fmt: skip
    pvc = {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "llama3-70b-weights"},
        "spec": {"accessModes": ["ReadOnlyMany"], "resources": {"requests": {"storage": "200Gi"}},
                 "storageClassName": "", "volumeName": f"{ns}-weights"},
    }  # fmt: skip
    apply(cluster, pv, ns)
    apply(cluster, pvc, ns)


@pytest.mark.parametrize("example", sorted(EXPECTED))
def test_example_becomes_ready(k8s_cluster, ns, example):
    manifest = yaml.safe_load((ROOT / "examples" / example).read_text())
    name = manifest["metadata"]["name"]
    _prerequisites(k8s_cluster, ns)
    apply(k8s_cluster, manifest, ns)

    llmd = eventually(
        lambda: (d := get(k8s_cluster, "llmd", name, ns)) and (condition(d, "Ready") or {}).get("status") == "True" and d,
        what=f"{name} Ready",
    )
    tp = EXPECTED[example]
    assert llmd["status"]["sizing"]["tensorParallelSize"] == tp
    assert condition(llmd, "SizingValid")["status"] == "True"
    assert condition(llmd, "Degraded")["status"] == "False"
    assert llmd["status"]["endpoint"] == f"http://{name}.{ns}.svc:8000/v1"

    dep = get(k8s_cluster, "deployment", name, ns)
    engine = dep["spec"]["template"]["spec"]["containers"][0]
    assert engine["resources"]["limits"]["nvidia.com/gpu"] == str(tp)
    cm = get(k8s_cluster, "configmap", f"{name}-engine", ns)
    assert yaml.safe_load(cm["data"]["engine.yaml"])["tensor_parallel_size"] == tp
    assert get(k8s_cluster, "service", name, ns) and get(k8s_cluster, "pdb", name, ns)
    assert get(k8s_cluster, "networkpolicy", name, ns)  # stored by the API server (not enforced on kwok)

    out = k8s_cluster.kubectl("get", "pods", "-n", ns, "-l", f"app.kubernetes.io/instance={name}",
                              "-o", "jsonpath={range .items[*]}{.spec.nodeName} {end}").stdout.split()  # fmt: skip
    assert out and all(node.startswith("llmop-gpu-") for node in out), out
