"""Scale of tenants' adapters: N LLMAdapters across M tenant namespaces on a 2-replica base with
fewer device slots than adapters, on the dev cluster's real node, until all are Ready.

Reports the wall time from applying the adapters to all Ready, the adapter placement's own API
requests (counted by its `Kube`, logged at operator shutdown), the API server's request total over
the run per adapter, and each engine pod's adapter states (host tier vs device slots). Adapters are
synthetic PEFT directories (rank 8 on q_proj and v_proj of the embedded model, random weights) on a
hostPath volume. Results: bench/results/adapter_scale.json and docs/benchmarks.md.

    python -P bench/adapter_scale.py --adapters 200 --namespaces 20
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from pathlib import Path

import yaml

from llmop.operator.local import OperatorProcess, eventually, install_chart, kubectl_json, service_account_kubeconfig

BASE_NS, CLAIM, LABEL = "bench-adapters", "tenant-adapters", "llmop-bench-tenant"
RESULTS = Path(__file__).resolve().parent / "results"
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "smollm2.yaml"


def write_adapters(root: Path, n: int) -> None:
    """n PEFT directories, the weights of one random adapter hard-linked into each (distinct paths,
    distinct registry entries in the engine, one copy on disk)."""
    import torch
    from safetensors.torch import save_file

    gen = torch.Generator().manual_seed(0)
    tensors = {}
    for layer in range(30):  # SmolLM2-135M: hidden 576, 3 KV heads of 64
        for module, out in (("q_proj", 576), ("v_proj", 192)):
            key = f"base_model.model.model.layers.{layer}.self_attn.{module}"
            tensors[f"{key}.lora_A.weight"] = torch.randn(8, 576, generator=gen) * 0.05
            tensors[f"{key}.lora_B.weight"] = torch.randn(out, 8, generator=gen) * 0.05
    first = root / "a000"
    first.mkdir(parents=True)
    save_file(tensors, str(first / "adapter_model.safetensors"))
    (first / "adapter_config.json").write_text(json.dumps(
        {"peft_type": "LORA", "r": 8, "lora_alpha": 16, "target_modules": ["q_proj", "v_proj"], "bias": "none"}))
    for i in range(1, n):
        d = root / f"a{i:03d}"
        d.mkdir()
        for f in first.iterdir():
            (d / f.name).hardlink_to(f)
    for path in [root, *root.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)


def apiserver_requests(cluster) -> float:
    text = cluster.kubectl("get", "--raw", "/metrics", timeout=60).stdout
    return sum(float(m.group(1)) for m in re.finditer(r"^apiserver_request_total\{[^}]*\} (\S+)$", text, re.M))


def ready_adapters(cluster) -> int:
    out = cluster.kubectl("get", "llma", "-A", "-o", "jsonpath={range .items[*]}{.status.phase}{\"\\n\"}{end}")
    return out.stdout.split().count("Ready")


def pod_listing(cluster, pod: dict, token: str) -> dict:
    import httpx

    r = httpx.get(f"http://{pod['status']['podIP']}:8001/v1/adapters", timeout=30,
                  headers={"Authorization": f"Bearer {token}"})  # fmt: skip
    states: dict[str, int] = {}
    for a in r.json()["data"]:
        states[a["state"]] = states.get(a["state"], 0) + 1
    return states


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--adapters", type=int, default=200)
    parser.add_argument("--namespaces", type=int, default=20)
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--max-loras", type=int, default=4)
    parser.add_argument("--timeout", type=float, default=1800)
    args = parser.parse_args()
    from llmop.devcluster.testing import session_cluster, session_real_node

    with tempfile.TemporaryDirectory() as tmp, session_cluster() as cluster:
        work = Path(tmp)
        node = session_real_node()
        write_adapters(work / "volume", args.adapters)
        install_chart(cluster, "replicas=0")
        tenants = [f"bench-tenant-{i:02d}" for i in range(args.namespaces)]
        for ns in [BASE_NS, *tenants]:
            cluster.kubectl("create", "namespace", ns, check=False)
        for ns in tenants:
            cluster.kubectl("label", "namespace", ns, f"{LABEL}=true", "--overwrite")
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump({
            "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "bench-adapters"},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadOnlyMany"], "storageClassName": "",
                     "hostPath": {"path": str(work / "volume"), "type": "Directory"},
                     "claimRef": {"namespace": BASE_NS, "name": CLAIM}}}))  # fmt: skip
        cluster.kubectl("apply", "-n", BASE_NS, "-f", "-", input=yaml.safe_dump({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": CLAIM},
            "spec": {"accessModes": ["ReadOnlyMany"], "storageClassName": "", "volumeName": "bench-adapters",
                     "resources": {"requests": {"storage": "1Gi"}}}}))  # fmt: skip
        op = OperatorProcess(service_account_kubeconfig(cluster, work / "kubeconfig"), work / "operator.log",
                             {"LLMOP_ENGINE_IMAGE": node.engine_image})
        op.start()
        base = yaml.safe_load(EXAMPLE.read_text())
        base["spec"]["replicas"] = args.replicas
        base["spec"]["tenancy"] = {"namespaceSelector": {"matchLabels": {LABEL: "true"}}, "adapterClaims": [CLAIM]}
        base["spec"]["engine"]["overrides"] = {"max_loras": args.max_loras, "max_cpu_loras": args.adapters + 8}
        cluster.kubectl("apply", "-n", BASE_NS, "-f", "-", input=yaml.safe_dump(base))
        eventually(lambda: (d := kubectl_json(cluster, "llmd", "smollm2", "-n", BASE_NS))
                   and (d.get("status") or {}).get("readyReplicas") == args.replicas,
                   timeout=args.timeout, interval=2, what="the base's pods Ready")  # fmt: skip
        items = [{"apiVersion": "llmop.dev/v1alpha1", "kind": "LLMAdapter",
                  "metadata": {"name": f"a{i:03d}", "namespace": tenants[i % len(tenants)]},
                  "spec": {"baseRef": {"name": "smollm2", "namespace": BASE_NS}, "source": f"pvc://{CLAIM}/a{i:03d}"}}
                 for i in range(args.adapters)]  # fmt: skip
        before = apiserver_requests(cluster)
        t0 = time.monotonic()
        cluster.kubectl("apply", "-f", "-", "--server-side", input=yaml.safe_dump({"apiVersion": "v1", "kind": "List",
                                                                                   "items": items}), timeout=600)
        eventually(lambda: ready_adapters(cluster) == args.adapters, timeout=args.timeout, interval=1,
                   what="all adapters Ready")  # fmt: skip
        elapsed = time.monotonic() - t0
        after = apiserver_requests(cluster)
        import base64

        secret = kubectl_json(cluster, "secret", "smollm2-admin", "-n", BASE_NS)
        token = base64.b64decode(secret["data"]["token"]).decode()
        pods = kubectl_json(cluster, "pods", "-n", BASE_NS, "-l", "app.kubernetes.io/instance=smollm2")["items"]
        listings = {p["metadata"]["name"]: pod_listing(cluster, p, token) for p in pods}
        op.stop()
        log = op.log.read_text()
        m = re.search(r"llmop adapter placement api requests: (\{.*\})", log)
        placement = json.loads(m.group(1)) if m else {}
        result = {
            "adapters": args.adapters, "namespaces": args.namespaces, "replicas": args.replicas,
            "max_loras": args.max_loras,
            "all_ready_seconds": round(elapsed, 1),
            "placement_requests": placement,
            "placement_requests_per_adapter": round(sum(placement.values()) / args.adapters, 1) if placement else None,
            "apiserver_requests_per_adapter": round((after - before) / args.adapters, 1),
            "pod_adapter_states": listings,
        }  # fmt: skip
        print(json.dumps(result, indent=2))
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "adapter_scale.json").write_text(json.dumps(result, indent=2))
        for ns in [BASE_NS, *tenants]:
            cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        cluster.kubectl("delete", "pv", "bench-adapters", "--wait=false", check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
