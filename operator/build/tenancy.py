"""What `spec.tenancy` adds to a base's engine pods: the admin listener the operator loads tenants'
adapters through, its credential, the tenants' adapter claims, and the adapter manifest.

The manifest is a ConfigMap (`<name>-adapters`, written by adapter placement, not the reconciler)
mounted as a directory, so edits reach running pods without a restart and a restarted pod reads
the current list before it reports ready (the engine's `adapter_manifest`). The credential is the
Secret the spec names (spec.engine.adminCredentialSecret) or, with tenancy and none named, one the
operator creates once (`<name>-admin`, random) and reads back to call the admin API.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

from llmop.operator.api.llmdeployment import LLMDeploymentSpec
from llmop.operator.build.meta import Owner

ADAPTERS_DIR = "/etc/llmop/adapters"
MANIFEST_FILE = "adapters.json"
MANIFEST_VOLUME = "tenant-adapters"
ADMIN_TOKEN_KEY = "token"


def admin_secret(spec: LLMDeploymentSpec, name: str) -> str | None:
    """The Secret holding the engine's admin credential; None: the pods have no admin listener."""
    if spec.engine.admin_credential_secret:
        return spec.engine.admin_credential_secret
    return f"{name}-admin" if spec.tenancy is not None else None


def operator_made_secret(owner: Owner, spec: LLMDeploymentSpec) -> dict[str, Any] | None:
    """The admin credential Secret the operator creates (once: never re-applied, the token is random),
    or None when the spec names its own or has no tenancy."""
    if spec.tenancy is None or spec.engine.admin_credential_secret:
        return None
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": owner.metadata(admin_secret(spec, owner.name)),
            "stringData": {ADMIN_TOKEN_KEY: secrets.token_urlsafe(32)}}  # fmt: skip


def manifest_name(owner: Owner) -> str:
    return f"{owner.name}-adapters"


def manifest_config_map(owner: Owner, entries: list[dict[str, Any]]) -> dict[str, Any]:
    """The adapter manifest the engine pods load at start-up (sorted: an unchanged list is a no-op apply)."""
    text = json.dumps({"adapters": sorted(entries, key=lambda e: e["name"])}, indent=1, sort_keys=True)
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": owner.metadata(manifest_name(owner)),
            "data": {MANIFEST_FILE: text}}  # fmt: skip


def manifest_entry_bytes(entry: dict[str, Any]) -> int:
    """What one entry adds to the manifest's text (`manifest_config_map`: indented two levels deep,
    and its separator), so placement can fill the ConfigMap without rendering it once per entry."""
    text = json.dumps(entry, indent=1, sort_keys=True)  # ASCII: characters are bytes
    return len(text) + 2 * (text.count("\n") + 1) + len(",\n")


# The API server refuses a ConfigMap whose data (keys and values) exceeds 1 MiB; the text around
# the entries ('{"adapters": [...]}', indented: about 35 bytes) takes the last 64.
MANIFEST_LIMIT = 1024 * 1024
MANIFEST_ROOM = MANIFEST_LIMIT - len(MANIFEST_FILE) - 64


def manifest_volume(owner: Owner) -> dict[str, Any]:
    """Optional: a pod may start before placement wrote the ConfigMap (no file = no adapters)."""
    return {"name": MANIFEST_VOLUME, "configMap": {"name": manifest_name(owner), "optional": True}}


def manifest_mount() -> dict[str, Any]:
    return {"name": MANIFEST_VOLUME, "mountPath": ADAPTERS_DIR, "readOnly": True}
