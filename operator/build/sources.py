"""Where the engine finds its weights: each `source` URI (the model's, each adapter's, and the draft
model's for speculative decoding) turned into a path inside the pod, plus the init container that
downloads it or the PVC that is mounted for it.

  (empty)                 the engine's embedded model (no path, nothing to fetch)
  /abs/path               inside the engine image, as is
  pvc://claim/sub/path    /mnt/pvc/claim/sub/path, the claim mounted read-only
  hf://org/repo[@rev]     /models/hf/org/repo, `hf download` in an init container
  s3://bucket/prefix      /models/s3/bucket/prefix, `aws s3 sync` in an init container

Downloads go into one emptyDir at /models shared by the init containers and the engine; the
downloaders run with a read-only root like the engine, their caches under /models/.home (writable.py).
Every downloader gets spec.model.credentialsSecret; two sources with one location (a model that is
its own draft) are fetched once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llmop.operator.api.llmdeployment import LLMDeploymentSpec
from llmop.operator.build import writable
from llmop.operator.build.settings import Settings

MODELS_DIR = "/models"
PVC_DIR = "/mnt/pvc"
MODELS_VOLUME = "models"


@dataclass(frozen=True)
class Location:
    """One source as the pod sees it: the path, and what makes the path exist."""

    path: str
    fetch_command: tuple[str, ...] = ()  # an init container's command, when it must be downloaded
    fetch_image: str | None = None
    claim: str | None = None  # a PVC to mount, when it lives on one


def locate(source: str, settings: Settings) -> Location:
    """The Location of one (schema-validated) source URI."""
    scheme, _, rest = source.partition("://")
    if not rest:
        return Location(source)
    if scheme == "pvc":
        claim, _, sub = rest.partition("/")
        return Location(f"{PVC_DIR}/{claim}/{sub}".rstrip("/"), claim=claim)
    if scheme == "hf":
        repo, _, revision = rest.partition("@")
        path = f"{MODELS_DIR}/hf/{repo}"
        command = ("hf", "download", repo, "--local-dir", path) + (("--revision", revision) if revision else ())
        return Location(path, command, settings.engine_image)
    path = f"{MODELS_DIR}/s3/{rest}".rstrip("/")
    return Location(path, ("aws", "s3", "sync", f"s3://{rest}", path), settings.s3_image)


@dataclass(frozen=True)
class Sources:
    """Every source of one LLMDeployment: engine paths, init containers, volumes and mounts."""

    model: str | None
    adapters: tuple[str, ...]
    init_containers: tuple[dict[str, Any], ...]
    claims: tuple[str, ...]
    draft: str | None = None  # speculative.draftModel's path (method draft)

    def volumes(self) -> list[dict[str, Any]]:
        out = [{"name": MODELS_VOLUME, "emptyDir": {}}] if self.init_containers else []
        return out + [
            {"name": _claim_volume(c), "persistentVolumeClaim": {"claimName": c, "readOnly": True}}
            for c in self.claims
        ]

    def roots(self) -> list[str]:
        """The directories the operator mounts for sources: the engine's `adapter_roots`."""
        return ([MODELS_DIR] if self.init_containers else []) + [f"{PVC_DIR}/{c}" for c in self.claims]

    def mounts(self) -> list[dict[str, Any]]:
        """The engine container's mounts of them."""
        out = [{"name": MODELS_VOLUME, "mountPath": MODELS_DIR}] if self.init_containers else []
        return out + [
            {"name": _claim_volume(c), "mountPath": f"{PVC_DIR}/{c}", "readOnly": True} for c in self.claims
        ]


def _claim_volume(claim: str) -> str:
    return f"pvc-{claim}"[:63].rstrip("-")


def _init_container(name: str, loc: Location, secret: str | None) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": name,
        "image": loc.fetch_image,
        "command": list(loc.fetch_command),
        "env": writable.env(f"{MODELS_DIR}/.home"),  # the downloaders' caches
        "volumeMounts": [{"name": MODELS_VOLUME, "mountPath": MODELS_DIR}, writable.tmp_mount()],
        "securityContext": writable.security_context(),
    }
    if secret:
        container["envFrom"] = [{"secretRef": {"name": secret}}]
    return container


def sources_for(spec: LLMDeploymentSpec, settings: Settings) -> Sources:
    """Resolve spec.model.source, every adapter source and the draft model's (in that order), and
    mount spec.tenancy.adapterClaims too (tenants' adapters: the admin API's roots)."""
    secret = spec.model.credentials_secret
    named: list[tuple[str, Location]] = []
    model = None
    if spec.model.source:
        loc = locate(spec.model.source, settings)
        named.append(("fetch-model", loc))
        model = loc.path
    adapters = []
    for i, adapter in enumerate(spec.adapters):
        loc = locate(adapter.source, settings)
        named.append((f"fetch-adapter-{i}", loc))
        adapters.append(loc.path)
    draft = None
    if (speculative := spec.engine.speculative) is not None and speculative.draft_model:
        loc = locate(speculative.draft_model, settings)
        named.append(("fetch-draft-model", loc))
        draft = loc.path
    fetches: dict[tuple[str, ...], tuple[str, Location]] = {}
    for n, loc in named:
        if loc.fetch_command:
            fetches.setdefault(loc.fetch_command, (n, loc))  # one download per location
    inits = tuple(_init_container(n, loc, secret) for n, loc in fetches.values())
    tenants = spec.tenancy.adapter_claims if spec.tenancy is not None else []  # LLMAdapters' files
    claims = tuple(dict.fromkeys([*(loc.claim for _, loc in named if loc.claim), *tenants]))
    return Sources(model, tuple(adapters), inits, claims, draft)
