"""What to do on one engine pod so it serves exactly the bound adapters: a pure plan from the pod's
own listing (GET /v1/adapters on its admin listener), and each bound adapter's state there.

The plan loads what is missing, reloads what changed (source or pinned), and unloads what is no
longer bound, except the adapters the base's own spec loads at start-up (`keep`). A failed load is
not retried on every pass (a corrupt adapter stays corrupt): it is reported with the engine's
error, and retried when its spec changes or the pod restarts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from llmop.operator.adapters.binding import ManifestEntry
from llmop.operator.api.llmadapter import PodState

_ENGINE_STATES = {"loading": PodState.LOADING, "failed": PodState.FAILED}  # cpu, resident, disk: loaded


@dataclass(frozen=True)
class AdapterOnPod:
    state: PodState
    message: str = ""


@dataclass(frozen=True)
class PodSync:
    """Unload `unload` (names), then load `load`; `states` of the bound adapters as listed."""

    load: tuple[ManifestEntry, ...] = ()
    unload: tuple[str, ...] = ()
    states: Mapping[str, AdapterOnPod] = field(default_factory=dict)


def sync_plan(desired: Mapping[str, ManifestEntry], listing: Iterable[dict[str, Any]],
              keep: Iterable[str] = ()) -> PodSync:
    """The plan for one pod; `listing` is its GET /v1/adapters `data`."""
    listed = {a["name"]: a for a in listing}
    load, unload, states = [], [], {}
    for name, entry in sorted(desired.items()):
        cur = listed.get(name)
        if cur is not None and (cur.get("source") != entry.source
                                or (cur.get("state") != "failed" and bool(cur.get("pinned")) != entry.pinned)):
            unload.append(name)
            cur = None
        if cur is None:
            load.append(entry)
            states[name] = AdapterOnPod(PodState.LOADING)
            continue
        state = _ENGINE_STATES.get(cur.get("state", ""), PodState.LOADED)
        states[name] = AdapterOnPod(state, (cur.get("error") or "") if state is PodState.FAILED else "")
    kept = set(keep)
    unload += sorted(n for n in listed if n not in desired and n not in kept)
    return PodSync(tuple(load), tuple(unload), states)
