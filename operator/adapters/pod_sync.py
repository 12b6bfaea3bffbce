"""What to do on one engine pod so it serves exactly the bound adapters: a pure plan from the pod's
own listing (GET /v1/adapters on its admin listener), and each bound adapter's state there.

The plan loads what is missing, reloads what changed (source or pinned), and unloads tenants'
adapters that are no longer bound. Only tenants' ids (`<namespace>/<name>`, the one form with a
slash) are ever unloaded: the base's own `spec.adapters` (no slash) and anything else the
platform loaded stay, old pods keep theirs during a rollout. A failed load is reloaded when it is
not `held`: the placer holds it, reported with the engine's error, until its backoff is over
(`retries`).

The engine lists the source it resolved (symlinks followed); `resolved` maps a source the operator
asked for to what the engine listed after loading it, so a symlinked directory is not reloaded on
every pass.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from llmop.operator.adapters.binding import ManifestEntry
from llmop.operator.api.llmadapter import PodState

_ENGINE_STATES = {"loading": PodState.LOADING}  # cpu, resident, disk: loaded (failed: reloaded or held)


def is_tenant_id(name: str) -> bool:
    """A model id placement owns: `<namespace>/<name>` (the base's own adapter names have no slash)."""
    return "/" in name


@dataclass(frozen=True)
class AdapterOnPod:
    state: PodState
    message: str = ""


@dataclass(frozen=True)
class PodSync:
    """Unload `unload` (names), then load `load` (a reload only once its unload succeeded);
    `states` of the bound adapters as listed."""

    load: tuple[ManifestEntry, ...] = ()
    unload: tuple[str, ...] = ()
    states: Mapping[str, AdapterOnPod] = field(default_factory=dict)


def sync_plan(desired: Mapping[str, ManifestEntry], listing: Iterable[dict[str, Any]],
              resolved: Mapping[str, str] | None = None, held: Mapping[str, AdapterOnPod] | None = None) -> PodSync:
    """The plan for one pod; `listing` is its GET /v1/adapters `data` (and start-up failures);
    `held` are failed adapters not to touch on this pass, with the state to report."""
    listed = {a["name"]: a for a in listing if isinstance(a.get("name"), str)}
    resolved, held = resolved or {}, held or {}
    load, unload, states = [], [], {}
    for name, entry in sorted(desired.items()):
        cur = listed.get(name)
        if name in held and (cur is None or cur.get("state") == "failed"):
            states[name] = held[name]
            continue
        if cur is not None:
            same_source = cur.get("source") in (entry.source, resolved.get(entry.source))
            failed = cur.get("state") == "failed"
            if not same_source or failed or bool(cur.get("pinned")) != entry.pinned:
                unload.append(name)
                load.append(entry)
                why = "retrying a failed load" if failed and same_source else "reloading: its source or pinned changed"
                states[name] = AdapterOnPod(PodState.LOADING, why)
                continue
        if cur is None:
            load.append(entry)
            states[name] = AdapterOnPod(PodState.LOADING)
            continue
        states[name] = AdapterOnPod(_ENGINE_STATES.get(cur.get("state", ""), PodState.LOADED))
    unload += sorted(n for n in listed if n not in desired and is_tenant_id(n))
    return PodSync(tuple(load), tuple(unload), states)
