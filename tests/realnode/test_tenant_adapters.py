"""Tenants' LoRA adapters on real engine pods (`LLMAdapter`, docs/adapters.md).

A base LLMDeployment in one namespace grants a tenant namespace and mounts a claim (a hostPath
PersistentVolume on the real node) holding PEFT adapters made from the embedded model. The tenant's
LLMAdapter is loaded into the running pod through its admin API (no restart) and answers as
`<namespace>/<name>`; an ungranted namespace's adapter stays NotGranted and its model id is a 404; a
corrupt adapter fails with the engine's reason while the rest keeps serving, and loads on a retry once
its files are fixed; a replacement pod serves
the adapter as soon as it is Ready; revoking the grant unloads it.
"""

from __future__ import annotations

import shutil
import uuid

import httpx
import pytest
import yaml

from llmop.operator.local import condition, eventually, kubectl_json

from pods import EXAMPLE, START_S, ready_pod, service_url, wait_ready

pytestmark = [pytest.mark.k8s, pytest.mark.realnode]

CLAIM = "tenant-adapters"
PROMPT = "Write one sentence about the sea."


def _complete(url: str, model: str) -> httpx.Response:
    return httpx.post(f"{url}/v1/completions", timeout=120,
                      json={"model": model, "prompt": PROMPT, "max_tokens": 12, "temperature": 0})  # fmt: skip


def _apply(cluster, ns: str, doc: dict) -> None:
    cluster.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(doc))


def _adapter(name: str, base_ns: str, source: str) -> dict:
    return {"apiVersion": "llmop.dev/v1alpha1", "kind": "LLMAdapter", "metadata": {"name": name},
            "spec": {"baseRef": {"name": "smollm2", "namespace": base_ns}, "source": source}}  # fmt: skip


def _phase(cluster, ns: str, name: str, phase: str, bound: str | None = None) -> dict:
    """Wait for `phase` (and, given `bound`, that Bound reason): a Pending written while a pod was
    replaced must not pass for the Pending a revoked grant writes."""
    return eventually(lambda: (a := kubectl_json(cluster, "llmadapter", name, "-n", ns))
                      and (a.get("status") or {}).get("phase") == phase
                      and (bound is None or (condition(a, "Bound") or {}).get("reason") == bound) and a,
                      timeout=180, interval=1, what=f"LLMAdapter {ns}/{name} {phase} {bound or ''}")  # fmt: skip


@pytest.fixture
def adapter_volume(k8s_cluster, pod_ns, adapter_dirs, tmp_path_factory):
    """A claim in the base namespace, bound to a hostPath volume with one good and one corrupt adapter."""
    root = tmp_path_factory.mktemp("tenant-volume")
    shutil.copytree(adapter_dirs["attn-r8"], root / "team" / "summarizer")
    (root / "team" / "broken").mkdir()
    shutil.copy(adapter_dirs["attn-r8"] / "adapter_config.json", root / "team" / "broken")
    (root / "team" / "broken" / "adapter_model.safetensors").write_bytes(b"not safetensors")
    for path in [root, *root.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    pv = f"adapters-{uuid.uuid4().hex[:6]}"
    k8s_cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump({
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": pv},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadOnlyMany"], "storageClassName": "",
                 "hostPath": {"path": str(root), "type": "Directory"},
                 "claimRef": {"namespace": pod_ns, "name": CLAIM}}}))  # fmt: skip
    _apply(k8s_cluster, pod_ns, {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": CLAIM},
                                 "spec": {"accessModes": ["ReadOnlyMany"], "storageClassName": "", "volumeName": pv,
                                          "resources": {"requests": {"storage": "1Gi"}}}})  # fmt: skip
    yield root
    k8s_cluster.kubectl("delete", "pv", pv, "--wait=false", check=False)


@pytest.fixture
def tenants(k8s_cluster):
    names = [f"tenant-{uuid.uuid4().hex[:6]}", f"other-{uuid.uuid4().hex[:6]}"]
    for ns in names:
        k8s_cluster.kubectl("create", "namespace", ns)
    yield names
    for ns in names:
        k8s_cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def test_tenant_adapters_load_into_running_pods_and_follow_grants(k8s_cluster, real_node, pod_ns, adapter_volume,
                                                                  tenants):
    tenant, other = tenants
    base = yaml.safe_load(EXAMPLE.read_text())
    base["spec"]["tenancy"] = {"namespaces": [tenant], "adapterClaims": [CLAIM]}
    _apply(k8s_cluster, pod_ns, base)
    wait_ready(k8s_cluster, pod_ns, "smollm2")
    pod = ready_pod(k8s_cluster, pod_ns, "smollm2")
    url = service_url(k8s_cluster, pod_ns, "smollm2")
    plain = _complete(url, "smollm2-135m")
    assert plain.status_code == 200, plain.text

    # Granted: loaded into the running pod (not restarted) and served under its namespaced id.
    _apply(k8s_cluster, tenant, _adapter("summarizer", pod_ns, f"pvc://{CLAIM}/team/summarizer"))
    ready = _phase(k8s_cluster, tenant, "summarizer", "Ready")["status"]
    assert ready["model"] == f"{tenant}/summarizer" and ready["base"] == f"{pod_ns}/smollm2"
    assert ready["readyPods"] == ready["desiredPods"] == 1 and ready["pods"][0]["pod"] == pod["metadata"]["name"]
    tuned = _complete(url, f"{tenant}/summarizer")
    assert tuned.status_code == 200, tuned.text
    assert tuned.json()["model"] == f"{tenant}/summarizer"
    assert tuned.json()["choices"][0]["text"] != plain.json()["choices"][0]["text"]  # the adapter's tokens
    same = ready_pod(k8s_cluster, pod_ns, "smollm2")
    assert same["metadata"]["uid"] == pod["metadata"]["uid"]
    assert same["status"]["containerStatuses"][0]["restartCount"] == 0
    base_status = kubectl_json(k8s_cluster, "llmd", "smollm2", "-n", pod_ns)["status"]
    assert base_status["tenantAdapters"] == 1 and base_status["boundAdapters"] == [f"{tenant}/summarizer"]

    # Not granted: never loaded, a 404 for its model id, a Warning Event.
    _apply(k8s_cluster, other, _adapter("summarizer", pod_ns, f"pvc://{CLAIM}/team/summarizer"))
    refused = _phase(k8s_cluster, other, "summarizer", "Pending")
    assert (condition(refused, "Bound") or {}).get("reason") == "NotGranted"
    assert _complete(url, f"{other}/summarizer").status_code == 404
    events = kubectl_json(k8s_cluster, "events", "-n", other)["items"]
    assert any(e["reason"] == "NotGranted" and e["involvedObject"]["kind"] == "LLMAdapter" for e in events)

    # Corrupt: Failed with the engine's reason; the good adapter and the base keep serving, no crash loop.
    _apply(k8s_cluster, tenant, _adapter("broken", pod_ns, f"pvc://{CLAIM}/team/broken"))
    broken = _phase(k8s_cluster, tenant, "broken", "Failed")
    assert broken["status"]["pods"][0]["state"] == "Failed" and broken["status"]["pods"][0]["message"]
    assert _complete(url, f"{tenant}/summarizer").json()["choices"][0]["text"] == tuned.json()["choices"][0]["text"]
    assert _complete(url, "smollm2-135m").status_code == 200
    # Fixed on the volume, with no change to the LLMAdapter: the backoff's next retry loads it.
    good = adapter_volume / "team" / "summarizer" / "adapter_model.safetensors"
    shutil.copy(good, adapter_volume / "team" / "broken" / "adapter_model.safetensors")
    healed = _phase(k8s_cluster, tenant, "broken", "Ready")["status"]
    assert healed["pods"][0]["state"] == "Loaded" and _complete(url, f"{tenant}/broken").status_code == 200
    k8s_cluster.kubectl("delete", "llmadapter", "broken", "-n", tenant)

    # A replacement pod reads the manifest before /ready: it serves the adapter as soon as it is Ready.
    k8s_cluster.kubectl("delete", "pod", "-n", pod_ns, pod["metadata"]["name"], "--wait=false")
    new = eventually(lambda: (p := ready_pod(k8s_cluster, pod_ns, "smollm2"))
                     and p["metadata"]["uid"] != pod["metadata"]["uid"] and p,
                     timeout=START_S, interval=1, what="a replacement pod Ready")  # fmt: skip
    direct = f"http://{new['status']['podIP']}:{url.rsplit(':', 1)[1]}"
    first = _complete(direct, f"{tenant}/summarizer")
    assert first.status_code == 200, first.text
    assert first.json()["choices"][0]["text"] == tuned.json()["choices"][0]["text"]

    # Revoking the grant unloads it, without a restart.
    base["spec"]["tenancy"]["namespaces"] = []
    _apply(k8s_cluster, pod_ns, base)
    revoked = _phase(k8s_cluster, tenant, "summarizer", "Pending", bound="NotGranted")
    assert condition(revoked, "Bound")["status"] == "False"
    eventually(lambda: _complete(url, f"{tenant}/summarizer").status_code == 404, timeout=60, interval=1,
               what="the revoked adapter unloaded")  # fmt: skip
    assert ready_pod(k8s_cluster, pod_ns, "smollm2")["metadata"]["uid"] == new["metadata"]["uid"]
