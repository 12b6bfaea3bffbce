"""Leader election on a coordination.k8s.io/v1 Lease: of several operator replicas, one reconciles.

The recipe Kubernetes' own controllers use (client-go's leaderelection): the leader renews the
Lease's renewTime every retry period; a candidate takes the Lease over once it has seen the same
record, unchanged, for a whole leaseDuration *on its own clock* (clocks of two machines are never
compared); every write is a compare-and-swap on resourceVersion, so two candidates racing for an
expired Lease cannot both win. A leader that fails to renew for renewDeadline stops leading (the
caller exits, and the pod comes back as a candidate), so it never reconciles beside a new leader.
A leader that shuts down cleanly releases the Lease and its successor takes over at once.

`next_step` is the decision, pure; `LeaderElector` does the API calls around it.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from enum import Enum
from typing import Any, Callable

from llmop.operator.kube.client import Kube
from llmop.operator.kube.identity import ObjectKey

log = logging.getLogger("llmop.leader")

API_VERSION, KIND = "coordination.k8s.io/v1", "Lease"


@dataclass(frozen=True)
class LeaseTiming:
    """How long a Lease lasts unrenewed; the renew deadline and retry period follow client-go's
    defaults in proportion (15 s, 10 s, 2 s)."""

    duration: float = 15.0

    @property
    def renew_deadline(self) -> float:
        return self.duration * 2 / 3

    @property
    def retry_period(self) -> float:
        return self.duration * 2 / 15


@dataclass(frozen=True)
class LeaseRecord:
    """What a Lease says: who holds it, for how long unrenewed, and its version."""

    holder: str
    duration_s: int
    transitions: int
    acquire_time: str | None
    version: str

    @classmethod
    def of(cls, lease: dict[str, Any]) -> "LeaseRecord":
        spec = lease.get("spec") or {}
        return cls(spec.get("holderIdentity") or "", int(spec.get("leaseDurationSeconds") or 0),
                   int(spec.get("leaseTransitions") or 0), spec.get("acquireTime"),
                   lease["metadata"]["resourceVersion"])  # fmt: skip


class Step(Enum):
    """What a candidate or leader does after reading the Lease."""

    CREATE = "create"  # no Lease yet
    RENEW = "renew"  # ours: push renewTime forward
    TAKE_OVER = "take-over"  # released, or unrenewed for its whole duration
    WAIT = "wait"  # another holder's, still fresh


def next_step(record: LeaseRecord | None, me: str, unchanged_since: float, now: float) -> Step:
    """The step for `me`, given the Lease as read (`None`: absent) and since when (on this
    process's monotonic clock) it has been seen unchanged."""
    if record is None:
        return Step.CREATE
    if record.holder == me:
        return Step.RENEW
    if not record.holder or now - unchanged_since >= record.duration_s:
        return Step.TAKE_OVER
    return Step.WAIT


class Outcome(Enum):
    """The result of one round against the API server."""

    LEADING = "leading"
    FOLLOWING = "following"  # another holder's Lease is fresh
    FAILED = "failed"  # a lost compare-and-swap or an API error: try again next period


def micro_time(unix: float) -> str:
    """metav1.MicroTime: RFC 3339 with microseconds, UTC."""
    return datetime.fromtimestamp(unix, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def default_identity() -> str:
    """The pod's name where the chart sets POD_NAME, else host name plus a random suffix (two
    processes on one host never share an identity)."""
    return os.environ.get("POD_NAME") or f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


class LeaderElector:
    """One candidate for the Lease `namespace/name`, identified by `identity`."""

    def __init__(self, kube: Kube, namespace: str, name: str, identity: str, timing: LeaseTiming = LeaseTiming(),
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time):
        self.kube, self.identity, self.timing = kube, identity, timing
        self.key = ObjectKey(API_VERSION, KIND, namespace, name)
        self.clock, self.wall = clock, wall
        self._seen: tuple[str, float] | None = None  # (resourceVersion, first seen at)
        self._stop = threading.Event()
        self._keeper: threading.Thread | None = None

    def try_once(self) -> Outcome:
        """Read the Lease and create, renew or take it over if `next_step` says so."""
        try:
            lease = self.kube.get(self.key)
        except Exception as err:  # noqa: BLE001 - any failure (API error, urllib3's, a timeout) is a failed round
            log.warning("leader election: reading lease %s failed: %s", self.key, err)
            return Outcome.FAILED
        now = self.clock()
        record = None if lease is None else LeaseRecord.of(lease)
        if record is not None and (self._seen is None or self._seen[0] != record.version):
            self._seen = (record.version, now)
        step = next_step(record, self.identity, self._seen[1] if self._seen else now, now)
        if step is Step.WAIT:
            return Outcome.FOLLOWING
        try:
            stored = self._write(step, lease, record)
        except Exception as err:  # noqa: BLE001 - 409: another candidate's write came first; or unreachable
            log.info("leader election: %s of lease %s failed: %s", step.value, self.key, getattr(err, "status", err))
            return Outcome.FAILED
        self._seen = (stored["metadata"]["resourceVersion"], now)
        if step is not Step.RENEW:
            log.info("leader election: %s is now the leader (lease %s, %s)", self.identity, self.key, step.value)
        return Outcome.LEADING

    def _write(self, step: Step, lease: dict[str, Any] | None, record: LeaseRecord | None) -> dict[str, Any]:
        now = micro_time(self.wall())
        spec = {"holderIdentity": self.identity, "leaseDurationSeconds": math.ceil(self.timing.duration),
                "renewTime": now}  # fmt: skip
        if step is Step.CREATE:
            body = {"apiVersion": API_VERSION, "kind": KIND,
                    "metadata": {"name": self.key.name, "namespace": self.key.namespace},
                    "spec": spec | {"acquireTime": now, "leaseTransitions": 0}}  # fmt: skip
            return self.kube.create(body)
        assert lease is not None and record is not None
        transitions = record.transitions + (step is Step.TAKE_OVER)
        acquired = now if step is Step.TAKE_OVER else record.acquire_time
        body = {**lease, "spec": {**lease.get("spec", {}), **spec, "acquireTime": acquired,
                                  "leaseTransitions": transitions}}  # fmt: skip
        return self.kube.replace(body)  # carries metadata.resourceVersion: a compare-and-swap

    def acquire(self) -> None:
        """Block until this candidate leads (one round per retry period)."""
        log.info("leader election: %s is a candidate for lease %s", self.identity, self.key)
        waiting_logged = False
        while self.try_once() is not Outcome.LEADING:
            if not waiting_logged:
                log.info("leader election: waiting for leadership (lease %s)", self.key)
                waiting_logged = True
            time.sleep(self.timing.retry_period)

    def keep(self, on_lost: Callable[[str], None]) -> None:
        """Renew in a background thread; `on_lost(reason)` when another holder took the Lease or
        no renewal succeeded for the renew deadline."""

        def renew_loop() -> None:
            last_renewed = self.clock()
            while not self._stop.wait(self.timing.retry_period):
                outcome = self.try_once()
                if self._stop.is_set():
                    return
                if outcome is Outcome.LEADING:
                    last_renewed = self.clock()
                elif outcome is Outcome.FOLLOWING:
                    return on_lost(f"lease {self.key} is held by another candidate")
                elif self.clock() - last_renewed > self.timing.renew_deadline:
                    return on_lost(f"lease {self.key} not renewed for {self.timing.renew_deadline:.1f}s")

        self._keeper = threading.Thread(target=renew_loop, name="lease-renewal", daemon=True)
        self._keeper.start()

    def release(self) -> None:
        """Stop renewing and hand the Lease back (holder emptied), so a standby takes over at once."""
        self._stop.set()
        if self._keeper is not None:
            self._keeper.join(timeout=self.timing.retry_period + 65)  # a renewal in flight ends first
        try:
            lease = self.kube.get(self.key)
            if lease is None or LeaseRecord.of(lease).holder != self.identity:
                return
            spec = {**lease.get("spec", {}), "holderIdentity": "", "leaseDurationSeconds": 1,
                    "renewTime": micro_time(self.wall())}  # fmt: skip
            self.kube.replace({**lease, "spec": spec})
            log.info("leader election: %s released lease %s", self.identity, self.key)
        except Exception as err:  # noqa: BLE001 - it expires by itself
            log.warning("leader election: releasing lease %s failed (it expires by itself): %s", self.key, err)
