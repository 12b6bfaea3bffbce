"""Which adapters exist, where each one lives, and who is evicted when room runs out.

Two tiers, as in S-LoRA and vLLM: at most `max_slots` adapters resident in device slots (what a
forward pass can use) and at most `max_host` kept in host memory (resident ones included); the
rest stay registered on disk and are read again on demand. Both tiers evict the least recently
used adapter that is neither pinned nor in use by a running request. Plain Python over three
callables (read from disk, write a slot), so it is tested without a model.
"""

from __future__ import annotations

import enum
import itertools
from dataclasses import dataclass
from typing import Callable, Collection, Iterable


class AdapterState(str, enum.Enum):
    LOADING = "loading"  # registered, being read from disk
    CPU = "cpu"  # in host memory
    RESIDENT = "resident"  # in a device slot (and in host memory)
    DISK = "disk"  # registered, evicted from host memory; read again on use
    FAILED = "failed"  # the last read failed; `error` says why


class AdapterNotFound(KeyError):
    pass


class AdapterConflict(ValueError):
    """The operation does not fit the adapter's current state (exists, in use, pinned limit)."""


@dataclass(frozen=True)
class AdapterInfo:
    name: str
    source: str
    state: AdapterState
    pinned: bool
    slot: int | None
    error: str | None
    generation: int  # which registration of `name` this is (see AdapterRegistry.begin)


@dataclass
class _Entry:
    name: str
    source: str
    pinned: bool
    generation: int
    state: AdapterState = AdapterState.LOADING
    host: object | None = None
    slot: int | None = None
    error: str | None = None
    last_used: int = 0


class AdapterRegistry:
    """`load(name, source) -> adapter` may raise (the adapter is then FAILED with the message);
    `write_slot(slot, adapter)` puts an adapter into a device slot, overwriting all of it, so a freed
    slot is never cleared: what it holds is unread until the next write.
    `max_host` 0 = no host limit. Not thread-safe: the engine thread owns it."""

    def __init__(self, max_slots: int, max_host: int, load: Callable[[str, str], object],
                 write_slot: Callable[[int, object], None]):
        if max_slots < 1:
            raise ValueError("max_slots must be >= 1")
        self.max_slots, self.max_host = max_slots, max_host
        self._load, self._write = load, write_slot
        self._entries: dict[str, _Entry] = {}
        self._slots: list[str | None] = [None] * max_slots
        self._clock = itertools.count(1)
        self._generations = itertools.count(1)
        self.num_slot_loads = 0  # adapters written into a slot
        self.num_slot_evictions = 0  # of those, written over another (LRU) adapter
        self.num_disk_loads = 0  # adapters read back from disk after leaving host memory
        self._failed_since: set[str] = set()  # failures not yet taken by `take_failed`

    # --- registration -----------------------------------------------------------------------------

    def begin(self, name: str, source: str, pinned: bool = False) -> None:
        """Register `name` in state LOADING (a FAILED entry may be registered again). Each registration
        gets a new `generation`, never reused: a name unloaded and loaded again may hold other
        weights, so what was computed under the old registration (cached KV) must not be found
        under the new one. Reads back from disk keep the generation (the same registration)."""
        old = self._entries.get(name)
        if old is not None and old.state is not AdapterState.FAILED:
            raise AdapterConflict(f"adapter {name!r} already exists ({old.state.value})")
        if pinned and sum(e.pinned for e in self._entries.values() if e.name != name) >= self.max_slots:
            raise AdapterConflict(f"cannot pin {name!r}: all {self.max_slots} slots are pinned")
        self._entries[name] = _Entry(name, source, pinned, next(self._generations))

    def finish(self, name: str, adapter: object, in_use: Collection[str] = ()) -> None:
        """The read succeeded: the adapter joins host memory (a pinned one also takes a slot)."""
        e = self._get(name)
        e.host, e.state, e.error, e.last_used = adapter, AdapterState.CPU, None, next(self._clock)
        self._fit_host(keep={name, *in_use})
        if e.pinned:
            self.ensure_resident([name], in_use)

    def fail(self, name: str, error: str) -> None:
        e = self._get(name)
        self._drop_slot(e)
        e.host, e.state, e.error = None, AdapterState.FAILED, error
        self._failed_since.add(name)

    def take_failed(self) -> set[str]:
        """Adapters that failed (a read at registration or a reload from disk) since the last call."""
        failed, self._failed_since = self._failed_since, set()
        return failed

    def add(self, name: str, source: str, pinned: bool = False, in_use: Collection[str] = ()) -> AdapterInfo:
        """Register and read now (start-up, offline use); raises what `load` raised."""
        self.begin(name, source, pinned)
        try:
            adapter = self._load(name, source)
        except Exception as e:
            self.fail(name, str(e))
            raise
        self.finish(name, adapter, in_use)
        return self.info(name)

    def remove(self, name: str, in_use: Collection[str] = ()) -> None:
        e = self._get(name)
        if name in in_use:
            raise AdapterConflict(f"adapter {name!r} is in use by requests; retry when they finish")
        self._drop_slot(e)
        del self._entries[name]

    # --- residency --------------------------------------------------------------------------------

    def ensure_host(self, name: str, in_use: Collection[str] = ()) -> bool:
        """Bring a DISK adapter back into host memory; False if it is not servable (loading, failed)."""
        e = self._get(name)
        if e.state is AdapterState.DISK:
            try:
                adapter = self._load(name, e.source)
            except Exception as err:
                self.fail(name, str(err))
                return False
            self.num_disk_loads += 1
            self.finish(name, adapter, in_use)
        return e.state in (AdapterState.CPU, AdapterState.RESIDENT)

    def ensure_resident(self, names: Iterable[str], in_use: Collection[str]) -> dict[str, int]:
        """Give every adapter in `names` a device slot, evicting LRU ones outside `names`, `in_use`
        and the pinned; returns name -> slot. The caller keeps distinct adapters <= max_slots."""
        names = list(dict.fromkeys(names))
        keep = set(names) | set(in_use)
        out: dict[str, int] = {}
        for name in names:
            e = self._get(name)
            e.last_used = next(self._clock)
            if e.slot is None:
                if not self.ensure_host(name, in_use=keep):
                    raise AdapterConflict(f"adapter {name!r} is {e.state.value}: {e.error or 'not loaded'}")
                slot = self._free_slot(keep)
                self._write(slot, e.host)
                self.num_slot_loads += 1
                self._slots[slot], e.slot, e.state = name, slot, AdapterState.RESIDENT
            out[name] = e.slot
        return out

    def _free_slot(self, keep: set[str]) -> int:
        if None in self._slots:
            return self._slots.index(None)
        victims = [self._entries[n] for n in self._slots
                   if n is not None and n not in keep and not self._entries[n].pinned]
        if not victims:
            raise AdapterConflict(f"all {self.max_slots} adapter slots are pinned or in use")
        victim = min(victims, key=lambda v: v.last_used)
        slot = victim.slot
        self._drop_slot(victim)
        self.num_slot_evictions += 1
        return slot

    def _drop_slot(self, e: _Entry) -> None:
        if e.slot is not None:
            self._slots[e.slot] = None
            e.slot = None
            e.state = AdapterState.CPU if e.host is not None else e.state

    def _fit_host(self, keep: set[str]) -> None:
        """Evict LRU host copies (not resident, pinned or kept) down to max_host; a soft limit:
        when nothing is evictable the tier stays over it rather than fail a request."""
        if not self.max_host:
            return
        held = [e for e in self._entries.values() if e.host is not None]
        victims = sorted((e for e in held if e.slot is None and not e.pinned and e.name not in keep),
                         key=lambda e: e.last_used)
        for e in victims[: max(0, len(held) - self.max_host)]:
            e.host, e.state = None, AdapterState.DISK

    # --- queries ----------------------------------------------------------------------------------

    def _get(self, name: str) -> _Entry:
        try:
            return self._entries[name]
        except KeyError:
            raise AdapterNotFound(name) from None

    def __contains__(self, name: str) -> bool:
        return name in self._entries

    def state(self, name: str) -> AdapterState:
        return self._get(name).state

    def state_of(self, name: str) -> AdapterState | None:
        """The state, or None if unknown (safe from another thread)."""
        e = self._entries.get(name)
        return None if e is None else e.state

    def pinned_resident(self) -> set[str]:
        return {n for n in self._slots if n is not None and self._entries[n].pinned}

    def info(self, name: str) -> AdapterInfo:
        e = self._get(name)
        return AdapterInfo(e.name, e.source, e.state, e.pinned, e.slot, e.error, e.generation)

    def infos(self) -> list[AdapterInfo]:
        return [self.info(n) for n in list(self._entries)]  # list(): a safe copy from another thread

    def host(self, name: str) -> object | None:
        return self._get(name).host
