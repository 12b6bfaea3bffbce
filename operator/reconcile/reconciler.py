"""One reconcile of one LLMDeployment: desired state → server-side apply (and delete what the spec
turned off) → status → Events.

Level-based and idempotent: every trigger (create, spec change, a change to an owned object, the
resync timer, operator restart) runs the same function on the object as stored, so it converges to
the same state however often or in whatever order it runs. Nothing here decides; it calls the pure
builders and status functions and does the I/O.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kubernetes.client.exceptions import ApiException

from llmop.operator.api.llmdeployment import KIND
from llmop.operator.build.desired import SpecError, desired_state
from llmop.operator.build.errors import SpecCondition, SpecReason
from llmop.operator.build.meta import Owner
from llmop.operator.build.settings import Settings
from llmop.operator.kube.client import EventType, Kube
from llmop.operator.kube.identity import ObjectKey
from llmop.operator.api.conditions import changed_conditions
from llmop.operator.api.timestamps import rfc3339
from llmop.operator.reconcile.coalesce import Coalescer
from llmop.operator.reconcile.pods import PodTrouble, diagnose
from llmop.operator.reconcile.status import ConditionType, Reason, changed, failed_status, healthy_status

log = logging.getLogger("llmop.operator")


@dataclass(frozen=True)
class Outcome:
    """What one reconcile did (for logs and tests)."""

    applied: int
    status_written: bool
    error: SpecError | None = None


class Reconciler:
    """Reconciles LLMDeployments through a `Kube`; safe to call from several threads."""

    def __init__(self, kube: Kube, settings: Settings):
        self.kube = kube
        self.settings = settings
        self._locks: defaultdict[tuple[str, str], threading.Lock] = defaultdict(threading.Lock)
        self._guard = threading.Lock()
        self._coalescer = Coalescer()
        self._deleted: set[ObjectKey] = set()  # turned-off objects this process made sure are gone

    def reconcile_named(self, namespace: str, name: str) -> Outcome | None:
        """Reconcile by name (triggers from owned objects); None when the LLMDeployment is gone or a
        reconcile of it is already running (that one runs once more afterwards: bursts coalesce)."""
        return self._coalescer.run((namespace, name), lambda: self._fetch_and_reconcile(namespace, name))

    def _fetch_and_reconcile(self, namespace: str, name: str) -> Outcome | None:
        with self._locks[(namespace, name)]:
            body = self._latest(namespace, name)
            if body is None or body["metadata"].get("deletionTimestamp"):
                return None  # the garbage collector removes what it owned
            return self._reconcile(body)

    def _latest(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The LLMDeployment as stored now, None when it is gone. Read under the object's lock: a
        body read before it may predate the status the previous holder wrote, and deciding from
        that status would post that holder's Events (Sized, …) a second time."""
        try:
            return self.kube.get_llmdeployment(namespace, name)
        except ApiException as err:
            if err.status == 404:
                return None
            raise

    def reconcile(self, body: dict[str, Any]) -> Outcome:
        """Bring the cluster to the state the LLMDeployment describes (as stored now: `body` only
        names it). Raises SpecError (after recording it in status and an Event) for a spec that
        cannot work; ApiException for the caller to retry."""
        m = body["metadata"]
        if m.get("deletionTimestamp"):
            return Outcome(0, False)  # the garbage collector removes what it owned
        return self._fetch_and_reconcile(m["namespace"], m["name"]) or Outcome(0, False)

    def _reconcile(self, body: dict[str, Any]) -> Outcome:
        m, old = body["metadata"], body.get("status") or {}
        try:
            desired = desired_state(body, self.settings)
            for obj in desired.created_once:  # before the pods that mount it
                self._create_once(obj, desired.owner)
        except SpecError as err:
            new = failed_status(old, err, int(m.get("generation", 1)), rfc3339())
            self._write_status(body, old, new)
            raise
        stored = {ObjectKey.of(o): self.kube.apply(o) for o in desired.objects}
        self._delete(desired.absent, applied=stored.keys())
        engine = stored[desired.engine]
        new = healthy_status(old, desired, engine, rfc3339(), self._trouble(desired, engine))
        written = self._write_status(body, old, new)
        return Outcome(len(stored), written)

    def _create_once(self, obj: dict[str, Any], owner: Owner) -> None:
        """Create `obj` when absent (read on every reconcile: it may have been deleted); one that
        exists must be this LLMDeployment's. One left by a deleted LLMDeployment of the same name is
        the garbage collector's to remove (retried meanwhile); anyone else's is a spec error, never
        adopted (its content would become the engines' credential)."""
        key = ObjectKey.of(obj)
        stored = self.kube.get(key)
        if stored is None:
            try:
                self.kube.create(obj)
            except ApiException as err:
                if err.status != 409:  # made meanwhile: the next reconcile checks whose it is
                    raise
            return
        refs = stored["metadata"].get("ownerReferences") or []
        if any(r.get("uid") == owner.uid for r in refs):
            return
        if any(r.get("kind") == KIND and r.get("name") == owner.name for r in refs):
            raise ApiException(status=409, reason=f"{key} belongs to a deleted {KIND} of the same name: waiting "
                                                   "for the garbage collector to remove it")
        raise SpecError(SpecCondition.DEGRADED, SpecReason.ADMIN_SECRET_CONFLICT,
                        f"Secret {key.name} exists and is not this LLMDeployment's: name it in "
                        "spec.engine.adminCredentialSecret (key `token`), or delete it so the operator makes its own")

    def _delete(self, absent: tuple[ObjectKey, ...], applied: Iterable[ObjectKey]) -> None:
        """Delete the objects the spec turned off, once each per process (the first reconcile after
        a start cannot know whether an earlier process left one behind), not on every reconcile:
        afterwards only this process's own apply brings one back, and that clears the mark."""
        with self._guard:
            self._deleted.difference_update(applied)
            todo = [key for key in absent if key not in self._deleted]
        for key in todo:
            self.kube.delete(key)  # False when it was not there: gone either way
        with self._guard:
            self._deleted.update(todo)

    def _trouble(self, desired, deployment: dict[str, Any]) -> PodTrouble | None:
        """Why engine pods are not running; the pods are listed only while some are not ready."""
        if ((deployment.get("status") or {}).get("readyReplicas") or 0) >= desired.spec.replicas:
            return None
        return diagnose(self.kube.list_pods(desired.owner.namespace, desired.owner.selector()))

    def _write_status(self, body: dict[str, Any], old: dict[str, Any], new: dict[str, Any]) -> bool:
        """Patch status only when it changes (no resourceVersion churn); an Event per transition."""
        if not changed(old, new):
            return False
        m = body["metadata"]
        self.kube.patch_status(m["namespace"], m["name"], new)
        for event in transitions(old, new):
            self.kube.event(body, *event)
        return True


def transitions(old: dict[str, Any], new: dict[str, Any]) -> list[tuple[EventType, str, str]]:
    """Events (type, reason, message) for conditions whose status changed, and a new sizing plan."""
    events = []
    if new.get("sizing") and (old.get("sizing") or {}).get("summary") != new["sizing"].get("summary"):
        events.append((EventType.NORMAL, Reason.SIZED, new["sizing"]["summary"]))
    for before, cond in changed_conditions(old, new):
        bad = (cond["type"] == ConditionType.DEGRADED) == (cond["status"] == "True")
        if (cond["type"] == ConditionType.PROGRESSING or cond["reason"] == Reason.WAITING_FOR_REPLICAS
                or (before is None and not bad)):
            continue  # progress is visible in status; only report news
        event = (EventType.WARNING if bad else EventType.NORMAL, cond["reason"], cond["message"] or cond["type"])
        if event not in events:  # Ready and Degraded saying the same thing: one Event
            events.append(event)
    return events
