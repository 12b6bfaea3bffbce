"""Tenancy on the real control plane (no engine pods: the base has 0 replicas): LLMAdapters bind or
are refused by their base's grants, the base counts them, the operator writes the adapter manifest
and creates the admin credential, and revoking a grant (relabelling the tenant's namespace) or
deleting the base is seen. Loading into real pods: tests/realnode/test_tenant_adapters.py."""

from __future__ import annotations

import json

import pytest

from harness import apply, condition, eventually, get, new_namespace

pytestmark = pytest.mark.k8s


def _adapter(name: str, base_ns: str, source: str = "pvc://adapters/x") -> dict:
    return {"apiVersion": "llmop.dev/v1alpha1", "kind": "LLMAdapter", "metadata": {"name": name},
            "spec": {"baseRef": {"name": "chat", "namespace": base_ns}, "source": source}}  # fmt: skip


def _bound(cluster, ns: str, name: str, reason: str) -> dict:
    return eventually(lambda: (a := get(cluster, "llmadapter", name, ns))
                      and (condition(a, "Bound") or {}).get("reason") == reason and a,
                      what=f"{ns}/{name} Bound reason {reason}")  # fmt: skip


def test_grants_bind_count_and_revoke(k8s_cluster, ns):
    tenant, other = new_namespace(k8s_cluster), new_namespace(k8s_cluster)
    try:
        k8s_cluster.kubectl("label", "namespace", other, "llm-tenant=true")
        base = {"apiVersion": "llmop.dev/v1alpha1", "kind": "LLMDeployment", "metadata": {"name": "chat"},
                "spec": {"replicas": 0}}
        apply(k8s_cluster, base, ns)
        apply(k8s_cluster, _adapter("sum", ns), tenant)
        a = _bound(k8s_cluster, tenant, "sum", "TenancyDisabled")
        assert a["status"]["phase"] == "Pending" and a["status"]["model"] == f"{tenant}/sum"

        base["spec"]["tenancy"] = {"namespaces": [tenant], "adapterClaims": ["adapters"],
                                   "namespaceSelector": {"matchLabels": {"llm-tenant": "true"}}}
        apply(k8s_cluster, base, ns)
        _bound(k8s_cluster, tenant, "sum", "Granted")
        apply(k8s_cluster, _adapter("sum", ns), other)  # granted by its label
        _bound(k8s_cluster, other, "sum", "Granted")
        apply(k8s_cluster, _adapter("remote", ns, "hf://org/lora"), tenant)
        remote = _bound(k8s_cluster, tenant, "remote", "UnsupportedSource")
        assert remote["status"]["phase"] == "Failed"

        llmd = eventually(lambda: (d := get(k8s_cluster, "llmd", "chat", ns))
                          and (d.get("status") or {}).get("tenantAdapters") == 2 and d, what="2 bound")  # fmt: skip
        assert llmd["status"]["boundAdapters"] == sorted([f"{tenant}/sum", f"{other}/sum"])
        manifest = json.loads(get(k8s_cluster, "configmap", "chat-adapters", ns)["data"]["adapters.json"])
        assert {e["name"]: e["source"] for e in manifest["adapters"]} == {
            f"{tenant}/sum": "/mnt/pvc/adapters/x", f"{other}/sum": "/mnt/pvc/adapters/x"}
        secret = get(k8s_cluster, "secret", "chat-admin", ns)
        assert secret and len(secret["data"]["token"]) >= 40  # created once, random
        pod = get(k8s_cluster, "deployment", "chat", ns)["spec"]["template"]["spec"]
        assert {v["name"] for v in pod["volumes"]} >= {"admin-credential", "tenant-adapters", "pvc-adapters"}
        engine_yaml = get(k8s_cluster, "configmap", "chat-engine", ns)["data"]["engine.yaml"]
        assert "adapter_manifest: /etc/llmop/adapters/adapters.json" in engine_yaml

        # The engine checks rank and alpha when it loads: they are fixed at creation (CEL).
        for patch in ('{"spec":{"rank":8}}', '{"spec":{"alpha":16}}'):
            refused = k8s_cluster.kubectl("patch", "llmadapter", "sum", "-n", tenant, "--type=merge", "-p", patch,
                                          check=False)  # fmt: skip
            assert refused.returncode != 0 and "is immutable" in refused.stderr, (patch, refused.stderr)

        # Relabelling the namespace revokes its grant (the placement daemon sees it).
        k8s_cluster.kubectl("label", "namespace", other, "llm-tenant-")
        _bound(k8s_cluster, other, "sum", "NotGranted")
        events = json.loads(k8s_cluster.kubectl("get", "events", "-n", other, "-o", "json").stdout)["items"]
        assert any(e["reason"] == "NotGranted" and e["involvedObject"]["kind"] == "LLMAdapter" for e in events)
        eventually(lambda: get(k8s_cluster, "llmd", "chat", ns)["status"].get("tenantAdapters") == 1, what="1 bound")
        assert get(k8s_cluster, "secret", "chat-admin", ns)["data"] == secret["data"]  # never regenerated

        # One directory per tenant: sources elsewhere on the claim are refused, the pods roll.
        base["spec"]["tenancy"]["adapterClaimLayout"] = "PerNamespace"
        apply(k8s_cluster, base, ns)
        _bound(k8s_cluster, tenant, "sum", "OutsideNamespaceDirectory")  # pvc://adapters/x is not under tenant/
        eventually(lambda: get(k8s_cluster, "deployment", "chat", ns)["spec"]["template"]["metadata"]["annotations"]
                   .get("llmop.dev/adapter-claim-layout") == "PerNamespace", what="the pod template's layout")  # fmt: skip

        k8s_cluster.kubectl("delete", "llmd", "chat", "-n", ns)
        _bound(k8s_cluster, tenant, "sum", "BaseNotFound")
    finally:
        for name in (tenant, other):
            k8s_cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)
