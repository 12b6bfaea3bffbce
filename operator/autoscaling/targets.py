"""Which engines to measure: the LLMDeployment's pods, or the spec's static targets (engines
outside the cluster).

Pure functions over the API's pod dicts, so readiness rules are tested without a cluster. A
terminating pod is neither capacity nor a reason to wait: it is leaving.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from llmop.operator.api.conditions import is_true


@dataclass(frozen=True)
class Target:
    """One engine to measure: `name` (pod name, or host:port), its metrics URL, and readiness."""

    name: str
    url: str
    ready: bool


def _is_ready(pod: dict) -> bool:
    status = pod.get("status") or {}
    ready = is_true(status.get("conditions"), "Ready")
    return status.get("phase") == "Running" and ready and bool(status.get("podIP"))


ENGINE_PORT_NAME = "http"  # the engine container's port, as the operator's pod template names it
DEFAULT_PORT = 8000


def _engine_port(pod: dict) -> int:
    for container in (pod.get("spec") or {}).get("containers") or []:
        for port in container.get("ports") or []:
            if port.get("name") == ENGINE_PORT_NAME:
                return int(port["containerPort"])
    return DEFAULT_PORT


def pod_targets(pods: list[dict], port: int | None, path: str) -> list[Target]:
    """Targets for the pods of one LLMDeployment (API dicts, camelCase), terminating ones left out;
    `port` None: each pod's own engine port (so `spec.engine.port` needs saying only once)."""
    out = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            continue
        ip = (pod.get("status") or {}).get("podIP") or ""
        host = f"[{ip}]" if ":" in ip else ip
        out.append(Target(meta.get("name", "?"), f"http://{host}:{port or _engine_port(pod)}{path}", _is_ready(pod)))
    return sorted(out, key=lambda t: t.name)


def static_targets(urls: list[str], path: str) -> list[Target]:
    """Targets from `metrics.targets` base URLs; each stands for one ready replica."""
    out = []
    for url in urls:
        parts = urlsplit(url if "://" in url else f"http://{url}")
        base = f"{parts.scheme}://{parts.netloc}"
        out.append(Target(parts.netloc, base + (parts.path if parts.path not in ("", "/") else path),
                          True))
    return out
