"""What the real-pod tests share: the example they deploy and how they find its pods."""

from __future__ import annotations

from pathlib import Path

import httpx

from llmop.operator.api.conditions import is_true
from llmop.operator.local import condition, eventually, kubectl_json

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "smollm2.yaml"
START_S = 900  # a cold page cache: torch and the model load from the image's layers


def engine_pods(cluster, ns: str, name: str) -> list[dict]:
    pods = kubectl_json(cluster, "pods", "-n", ns, "-l", f"app.kubernetes.io/instance={name}") or {}
    return [p for p in pods.get("items", []) if not p["metadata"].get("deletionTimestamp")]


def ready_pod(cluster, ns: str, name: str) -> dict | None:
    pods = [p for p in engine_pods(cluster, ns, name) if is_true(p["status"].get("conditions"), "Ready")]
    return pods[0] if len(pods) == 1 else None


def chat(url: str, model: str) -> str:
    reply = httpx.post(f"{url}/v1/chat/completions", timeout=120, json={
        "model": model, "max_tokens": 16, "temperature": 0,
        "messages": [{"role": "user", "content": "Say hello to Kubernetes."}],
    })  # fmt: skip
    assert reply.status_code == 200, reply.text
    return reply.json()["choices"][0]["message"]["content"]


def wait_ready(cluster, ns: str, name: str) -> dict:
    """The LLMDeployment once its Ready condition is True (its engine pods passed /ready)."""
    return eventually(lambda: (d := kubectl_json(cluster, "llmd", name, "-n", ns))
                      and (condition(d, "Ready") or {}).get("status") == "True" and d,
                      timeout=START_S, interval=2, what=f"{name} Ready")  # fmt: skip


def service_url(cluster, ns: str, name: str) -> str:
    """http://<ClusterIP>:<port> of the LLMDeployment's Service (kube-proxy routes it from the host)."""
    svc = kubectl_json(cluster, "service", name, "-n", ns)
    port = next(p["port"] for p in svc["spec"]["ports"] if p["name"] == "http")
    return f"http://{svc['spec']['clusterIP']}:{port}"
