"""The adapter manifest: the tenants' adapters the operator wants on this pod, kept across restarts.

The operator loads tenants' adapters through the admin API at run time; a pod that restarts has
lost them, and must not report ready (and take traffic for them) before it has them back. So the
operator also keeps them in a JSON file, mounted from a ConfigMap and named by `adapter_manifest`:

    {"adapters": [{"name": "team-a/summarizer", "source": "/mnt/pvc/a/summarizer", "pinned": false}]}

At start-up each entry is loaded exactly as a POST /v1/adapters of it would be (`adapter_restore`).
Nothing in the file may stop the engine: one tenant's bad entry is one failed adapter, not an
engine that never starts. An absent file means no adapters (an empty ConfigMap key, or a pod
started before the operator wrote one); a file that cannot be read or is not a manifest is logged
and reported as the manifest's error, and also means no adapters.

This module reads the file and keeps what start-up made of it (`ManifestStatus`): no engine.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from dataclasses import dataclass, field

from pydantic import ValidationError

from llmop.engine.config import AdapterLoad

log = logging.getLogger("llmop.server")


@dataclass(frozen=True)
class FailedAdapter:
    """A manifest entry that was not loaded, and the engine's reason. `name` and `source` are the
    entry's own when they are strings (the operator matches by name), else None."""

    name: str | None
    source: str | None
    error: str

    def to_json(self) -> dict:
        return {"name": self.name, "source": self.source, "error": self.error}


@dataclass(frozen=True)
class Manifest:
    """The entries to load, the entries refused as they were read, and why the file as a whole
    was not used (None: it was, or it is absent)."""

    entries: tuple[AdapterLoad, ...] = ()
    refused: tuple[FailedAdapter, ...] = ()
    error: str | None = None


def _as_str(value) -> str | None:
    return value if isinstance(value, str) else None


def _entry_error(err: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'entry'}: {e['msg']}" for e in err.errors())


def parse_manifest(text: str, path: str = "adapter manifest") -> Manifest:
    """The manifest in `text`. An entry that is not a valid adapter (no name or source, a name that
    is not one, an unknown field) is refused alone; so is every entry of a name listed twice (which
    one the operator meant is unknown)."""
    try:
        data = json.loads(text)
    except ValueError as e:
        return Manifest(error=f"{path}: not valid JSON ({e})")
    if not isinstance(data, dict) or not isinstance(data.get("adapters", []), list):
        return Manifest(error=f'{path}: expected a JSON object {{"adapters": [...]}}')
    unknown = sorted(set(data) - {"adapters"})
    if unknown:
        return Manifest(error=f"{path}: unknown fields {unknown} (expected only 'adapters')")
    raw = data.get("adapters", [])
    counts = Counter(_as_str(e.get("name")) for e in raw if isinstance(e, dict))
    entries, refused = [], []
    for i, item in enumerate(raw):
        name = _as_str(item.get("name")) if isinstance(item, dict) else None
        source = _as_str(item.get("source")) if isinstance(item, dict) else None
        if not isinstance(item, dict):
            refused.append(FailedAdapter(None, None, f"{path}: adapters[{i}] is not a JSON object"))
            continue
        if name is not None and counts[name] > 1:
            refused.append(FailedAdapter(name, source, f"{path}: {counts[name]} entries name {name!r}: none is loaded"))
            continue
        try:
            entries.append(AdapterLoad.model_validate(item))
        except ValidationError as err:
            refused.append(FailedAdapter(name, source, f"{path}: adapters[{i}]: {_entry_error(err)}"))
    return Manifest(tuple(entries), tuple(refused))


def read_manifest(path: str) -> Manifest:
    """The manifest at `path`; an absent file is an empty manifest."""
    try:
        text = open(path, encoding="utf-8").read()
    except FileNotFoundError:
        log.info("adapter manifest %s does not exist: no adapters to restore", path)
        return Manifest()
    except (OSError, UnicodeDecodeError) as e:
        return Manifest(error=f"{path}: cannot be read ({getattr(e, 'strerror', None) or e})")
    return parse_manifest(text, path)


@dataclass
class ManifestStatus:
    """What start-up made of the manifest, for /ready and GET /v1/adapters. `restored` turns true
    once every entry was tried (at once without a manifest); `failed` keeps the entries that did not
    load until a POST or DELETE of the same name supersedes them (`forget`). Event loop only."""

    path: str | None
    restored: bool = False
    error: str | None = None
    failed: list[FailedAdapter] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.restored = self.path is None

    def forget(self, name: str) -> bool:
        """Drop the start-up failure of `name`; whether there was one."""
        kept = [f for f in self.failed if f.name != name]
        found, self.failed = len(kept) != len(self.failed), kept
        return found

    def to_json(self) -> dict | None:
        if self.path is None:
            return None
        return {"path": self.path, "restored": self.restored, "error": self.error}
