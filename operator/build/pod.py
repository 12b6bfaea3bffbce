"""The engine pod template: GPUs from sizing, probes on the engine's health endpoints, a drain that
finishes in-flight requests, the volumes its sources and config need, and the admin listener's
port and credential Secret when the spec names one (docs/security.md), and a read-only root
filesystem with emptyDirs where the engine writes (writable.py).

Shutdown: the preStop sleep lets the Service drop the pod first, then SIGTERM makes the engine stop
admitting and finish what it has for up to drainTimeoutSeconds; the grace period covers both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llmop.operator.api.llmdeployment import LLMDeploymentSpec
from llmop.operator.build import writable
from llmop.operator.build.engine_config import ADMIN_DIR, CONFIG_DIR, CONFIG_FILE
from llmop.operator.build.meta import Owner
from llmop.operator.build.settings import Settings
from llmop.operator.build.sources import Sources
from llmop.operator.build.tenancy import ADMIN_TOKEN_KEY, admin_secret, manifest_mount, manifest_volume

PRESTOP_SECONDS = 5
GRACE_MARGIN_SECONDS = 10
ENGINE_UID = 1000  # Dockerfile.engine's user
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
CONFIG_HASH = "llmop.dev/config-hash"
# Pods restore tenants' adapters under the layout they started with: a new layout rolls them.
CLAIM_LAYOUT = "llmop.dev/adapter-claim-layout"
CONFIG_VOLUME = "engine-config"
ADMIN_VOLUME = "admin-credential"


def _resources(spec: LLMDeploymentSpec, gpus: int) -> dict[str, Any]:
    gpu = spec.accelerator.pod_resources(gpus)
    res = spec.engine.resources
    return {"requests": {**res.requests, **gpu}, "limits": {**res.limits, **gpu}}


@dataclass(frozen=True)
class AdminListener:
    """The admin API's container port, and its credential Secret as a read-only mount (none
    without spec.engine.adminCredentialSecret or spec.tenancy), and with tenancy the adapter manifest."""

    ports: tuple[dict[str, Any], ...] = ()
    mounts: tuple[dict[str, Any], ...] = ()
    volumes: tuple[dict[str, Any], ...] = ()

    @classmethod
    def of(cls, owner: Owner, spec: LLMDeploymentSpec) -> "AdminListener":
        secret = admin_secret(spec, owner.name)
        if not secret:
            return cls()
        item = {"key": ADMIN_TOKEN_KEY, "path": ADMIN_TOKEN_KEY}
        tenants = spec.tenancy is not None
        return cls(({"name": "admin", "containerPort": spec.engine.admin_port, "protocol": "TCP"},),
                   ({"name": ADMIN_VOLUME, "mountPath": ADMIN_DIR, "readOnly": True},
                    *((manifest_mount(),) if tenants else ())),
                   ({"name": ADMIN_VOLUME, "secret": {"secretName": secret, "defaultMode": 0o440, "items": [item]}},
                    *((manifest_volume(owner),) if tenants else ())))


def _engine_container(spec: LLMDeploymentSpec, settings: Settings, sources: Sources, gpus: int,
                      admin: AdminListener) -> dict[str, Any]:
    engine = spec.engine

    def http(path: str, period: int, failures: int) -> dict[str, Any]:
        return {"httpGet": {"path": path, "port": "http"}, "periodSeconds": period,
                "timeoutSeconds": 5, "failureThreshold": failures}  # fmt: skip

    return {
        "name": "engine",
        "image": engine.image or settings.engine_image,
        "command": ["llmop", "serve", "--config", f"{CONFIG_DIR}/{CONFIG_FILE}", *engine.extra_args],
        "ports": [{"name": "http", "containerPort": engine.port, "protocol": "TCP"}, *admin.ports],
        "env": writable.env(writable.ENGINE_HOME),
        "resources": _resources(spec, gpus),
        # Loading weights can take many minutes: the startup probe holds liveness off for 30.
        "startupProbe": http("/health", 10, 180),
        "livenessProbe": http("/health", 10, 3),
        "readinessProbe": http("/ready", 5, 2),
        "lifecycle": {"preStop": {"exec": {"command": ["sleep", str(PRESTOP_SECONDS)]}}},
        "volumeMounts": [
            {"name": CONFIG_VOLUME, "mountPath": CONFIG_DIR, "readOnly": True},
            {"name": "dshm", "mountPath": "/dev/shm"},  # NCCL between tensor-parallel ranks
            *writable.engine_mounts(),
            *sources.mounts(),
            *admin.mounts,
        ],
        "securityContext": writable.security_context(),
    }


def engine_pod_template(
    owner: Owner, spec: LLMDeploymentSpec, settings: Settings, sources: Sources, gpus: int,
    config_map: str, config_hash: str,
) -> dict[str, Any]:
    """The Deployment's pod template; `config_hash` in an annotation rolls the pods when the
    engine config changes (and only then: replicas are not part of it)."""
    acc, extra = spec.accelerator, spec.pod_template
    admin = AdminListener.of(owner, spec)
    node_selector = dict(acc.node_selector)
    if acc.product:
        node_selector[GPU_PRODUCT_LABEL] = acc.product
    pod: dict[str, Any] = {
        "securityContext": {"runAsNonRoot": True, "runAsUser": ENGINE_UID, "runAsGroup": ENGINE_UID,
                            "fsGroup": ENGINE_UID, "seccompProfile": {"type": "RuntimeDefault"}},
        "terminationGracePeriodSeconds": PRESTOP_SECONDS + spec.engine.drain_timeout_seconds + GRACE_MARGIN_SECONDS,
        "containers": [_engine_container(spec, settings, sources, gpus, admin)],
        "volumes": [
            {"name": CONFIG_VOLUME, "configMap": {"name": config_map}},
            {"name": "dshm", "emptyDir": {"medium": "Memory"}},
            *writable.volumes(),
            *sources.volumes(),
            *admin.volumes,
        ],
    }  # fmt: skip
    if tolerations := acc.pod_tolerations():
        pod["tolerations"] = [t.wire() for t in tolerations]
    if sources.init_containers:
        pod["initContainers"] = [dict(c) for c in sources.init_containers]
    if node_selector:
        pod["nodeSelector"] = node_selector
    if extra.affinity:
        pod["affinity"] = extra.affinity
    if extra.priority_class_name:
        pod["priorityClassName"] = extra.priority_class_name
    if extra.service_account_name:
        pod["serviceAccountName"] = extra.service_account_name
    annotations = {
        **extra.annotations,
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(spec.engine.port),
        "prometheus.io/path": "/metrics",
        CONFIG_HASH: config_hash,
    }
    if spec.tenancy is not None:
        annotations[CLAIM_LAYOUT] = spec.tenancy.adapter_claim_layout.value
    return {
        "metadata": {"labels": {**extra.labels, **owner.selector_labels()}, "annotations": annotations},
        "spec": pod,
    }
