"""Adapter quotas: which of the adapters that would bind to a base get its places.

Pure: the adapters (their metadata and status) with their bindings and the base's tenancy in, the
same bindings out, those over a limit turned into `QuotaExceeded` refusals. Three limits:
`maxAdaptersPerNamespace` (one tenant cannot take every place), `maxAdapters`, and the manifest
ConfigMap's 1 MiB, which holds every bound adapter (a hard ceiling whatever the spec says).

Places go first come first served, deterministically, so every pass decides the same: adapters
that hold a place (Bound=True to this base) first, then the waiting ones, each by
metadata.creationTimestamp, then namespace/name. An adapter keeps its place while it exists, so an
older adapter that becomes bindable later (its grant added, its source fixed) waits instead of
unloading a newer one that serves; a freed place (an adapter deleted, a limit raised) goes to the
oldest waiting one. Only a limit lowered below what is bound takes places back: the newest lose them.
Only adapters that would otherwise bind count: a refused one holds no place. The ConfigMap's room
is counted in bytes, not places: an adapter whose entry does not fit in what is left waits, and a
later one with a shorter entry may still fit.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence
from typing import Any

from llmop.operator.adapters.binding import BindReason, Binding
from llmop.operator.adapters.status import ConditionType
from llmop.operator.api.conditions import is_true
from llmop.operator.api.tenancy import TenancySpec
from llmop.operator.build.tenancy import MANIFEST_ROOM, manifest_entry_bytes


def _holds_place(adapter: dict[str, Any], binding: Binding) -> bool:
    """Bound to this very base at the last pass (a Bound=True about another base, before its baseRef
    changed, is no place here)."""
    status = adapter.get("status") or {}
    return is_true(status.get("conditions"), ConditionType.BOUND) and status.get("base") == "/".join(binding.base)


def _queue_key(adapter: dict[str, Any], binding: Binding) -> tuple[bool, str, str, str]:
    # RFC 3339 UTC timestamps of one format sort as strings; a missing one (never from the API
    # server) sorts first rather than failing the pass
    return (not _holds_place(adapter, binding), adapter["metadata"].get("creationTimestamp") or "",
            binding.namespace, binding.name)


def within_quota(adapters: Sequence[dict[str, Any]], bindings: Sequence[Binding],
                 tenancy: TenancySpec | None) -> list[Binding]:
    """`bindings` (one per adapter, in the same order) with those the base has no place for refused."""
    out = list(bindings)
    if tenancy is None:
        return out
    per_namespace: Counter[str] = Counter()
    total = size = 0
    queue = sorted((i for i, b in enumerate(bindings) if b.bound), key=lambda i: _queue_key(adapters[i], bindings[i]))
    for i in queue:
        b = out[i]
        cost = manifest_entry_bytes(b.entry.wire())  # type: ignore[union-attr]  # bound: it has an entry
        full = _full(b, tenancy, per_namespace[b.namespace], total, size + cost)
        if full is not None:
            out[i] = dataclasses.replace(b, reason=BindReason.QUOTA_EXCEEDED, message=full, entry=None)
            continue
        per_namespace[b.namespace] += 1
        total, size = total + 1, size + cost
    return out


def _full(b: Binding, tenancy: TenancySpec, from_namespace: int, total: int, size: int) -> str | None:
    """Why the base has no place for `b` (given what it already placed), None when it has one."""
    where = f"LLMDeployment {'/'.join(b.base)}"
    then = "it binds when one of them is deleted or the limit is raised"
    limit = tenancy.max_adapters_per_namespace
    if limit is not None and from_namespace >= limit:
        return (f"{where} holds its maxAdaptersPerNamespace of {limit} adapters from namespace {b.namespace} "
                f"(spec.tenancy); {then}")
    if tenancy.max_adapters is not None and total >= tenancy.max_adapters:
        return f"{where} holds its maxAdapters of {tenancy.max_adapters} adapters (spec.tenancy); {then}"
    if size > MANIFEST_ROOM:
        return (f"{where} holds {total} adapters, and its adapter manifest ConfigMap (1 MiB) has no room left "
                "for this one's entry; it binds when one of them is deleted")
    return None
