"""Adapter placement: one pass over one base LLMDeployment binds the LLMAdapters that name it,
writes the adapter manifest its pods load at start-up, loads and unloads adapters on its ready pods
through their admin API, and writes every adapter's status (and the base's adapter count).

Level-based like the reconciler: every trigger (an LLMAdapter created, changed or deleted, the base
changed or deleted, the placement daemon every few seconds) runs the same pass, which converges
however often it runs.
Deciding is done by the pure functions of `binding`, `quota`, `pod_sync` and `status`; this is the I/O.
"""

from __future__ import annotations

import base64
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kubernetes.client.exceptions import ApiException

from llmop.operator.adapters import retries
from llmop.operator.adapters.binding import Binding, ManifestEntry, base_of, bind
from llmop.operator.adapters.engine_admin import AdminError, EngineAdmin
from llmop.operator.adapters.pod_sync import AdapterOnPod, sync_plan
from llmop.operator.adapters.quota import within_quota
from llmop.operator.adapters.status import adapter_status, base_adapters, changed, transitions
from llmop.operator.api import llmadapter
from llmop.operator.api.conditions import is_true
from llmop.operator.api.llmdeployment import API_VERSION, KIND, LLMDeploymentSpec
from llmop.operator.api.llmadapter import PodState
from llmop.operator.api.timestamps import rfc3339
from llmop.operator.build.desired import SpecError, parse_spec
from llmop.operator.build.meta import Owner
from llmop.operator.build.tenancy import ADMIN_TOKEN_KEY, admin_secret, manifest_config_map
from llmop.operator.kube.client import Kube
from llmop.operator.kube.identity import ObjectKey
from llmop.operator.reconcile.coalesce import Coalescer

log = logging.getLogger("llmop.operator.adapters")
FIELD_MANAGER = "llmop-adapters"
# An engine's answer to a load that retrying the same files cannot change: a bad name (400), a
# conflict such as every slot pinned (409), an unusable adapter (422). A 403 (the source is outside
# the pod's roots) is a pod on an older template during an adapterClaims rollout: it converges.
_REFUSED = {400, 409, 422}

Connect = Callable[[str, int, str], EngineAdmin]


@dataclass(frozen=True)
class PlacementOutcome:
    """What one pass saw and did (for logs and tests)."""

    bound: int
    pods: int
    loads: int
    unloads: int


class AdapterPlacer:
    """Places LLMAdapters on engine pods; one pass per base at a time, from any thread."""

    def __init__(self, kube: Kube, namespaces: tuple[str, ...] = (), connect: Connect = EngineAdmin):
        self.kube = kube
        self.namespaces = namespaces  # the operator watches only these (empty: all)
        self.connect = connect
        self._passes = Coalescer()
        self._pods: dict[str, _PodMemory] = {}  # by pod uid

    @classmethod
    def beside(cls, operator_kube: Kube, namespaces: tuple[str, ...] = ()) -> "AdapterPlacer":
        """A placer over the operator's API client, writing as its own field manager."""
        return cls(Kube(operator_kube.api, FIELD_MANAGER), namespaces)

    def place(self, namespace: str, name: str) -> PlacementOutcome | None:
        """One pass over the base `namespace/name` (which may be gone: its adapters say so); None
        when a pass over it is under way (that one runs once more: a burst of triggers, such as
        every adapter's event at start-up, makes one or two passes)."""
        return self._passes.run((namespace, name), lambda: self._place(namespace, name))

    def _place(self, namespace: str, name: str) -> PlacementOutcome:
        watched = not self.namespaces or namespace in self.namespaces  # else no RBAC to read it
        body = self.kube.get(ObjectKey(API_VERSION, KIND, namespace, name)) if watched else None
        spec = _spec(body)
        adapters = [a for a in self._adapters() if base_of(a) == (namespace, name)
                    and not a["metadata"].get("deletionTimestamp")]  # fmt: skip
        labels = self._labels(namespace, spec, {a["metadata"]["namespace"] for a in adapters})
        alone = [bind(a, spec, labels.get(a["metadata"]["namespace"], {}), self.namespaces) for a in adapters]
        bindings = within_quota(adapters, alone, spec.tenancy if spec else None)
        desired = {b.entry.name: b.entry for b in bindings if b.entry is not None}
        pods: dict[str, dict[str, AdapterOnPod]] = {}
        loads = unloads = 0
        if body is not None and spec is not None and spec.tenancy is not None:
            owner = Owner.from_body(body)
            self.kube.apply(manifest_config_map(owner, [e.wire() for e in desired.values()]))
            pods, loads, unloads = self._sync_pods(owner, spec, desired)
        for adapter, binding in zip(adapters, bindings):
            self._write_status(adapter, binding, pods)
        if body is not None and spec is not None:
            old = body.get("status") or {}
            new = base_adapters(bindings)
            if changed(old, new):
                self.kube.patch_status(namespace, name, new, as_field_manager=True)
        return PlacementOutcome(len(desired), len(pods), loads, unloads)

    def _adapters(self) -> list[dict[str, Any]]:
        """Every LLMAdapter the operator may see; none when the CRD is not installed (a chart
        upgrade does not install new CRDs: crds/llmop.dev_llmadapters.yaml must be applied)."""
        try:
            if not self.namespaces:
                return self.kube.list_all(llmadapter.API_VERSION, llmadapter.KIND)
            return [a for ns in self.namespaces
                    for a in self.kube.list_all(llmadapter.API_VERSION, llmadapter.KIND, ns)]  # fmt: skip
        except ApiException as err:
            if err.status != 404:
                raise
            log.warning("the LLMAdapter CRD is not installed: no adapters to place")
            return []

    def _labels(self, base_ns: str, spec: LLMDeploymentSpec | None,
                namespaces: set[str]) -> dict[str, dict[str, str] | None]:
        """Labels of the adapters' namespaces, read only when the base grants by label selector;
        None for each when the operator watches given namespaces (a Role cannot let it read
        Namespaces: only `tenancy.namespaces` grant there, and the adapters say so)."""
        if spec is None or spec.tenancy is None or spec.tenancy.namespace_selector is None:
            return {}
        wanted = [ns for ns in namespaces if ns != base_ns and ns not in spec.tenancy.namespaces]
        if self.namespaces:
            return dict.fromkeys(wanted)
        return {ns: self.kube.namespace_labels(ns) or {} for ns in wanted}

    def _token(self, owner: Owner, spec: LLMDeploymentSpec) -> str | None:
        secret = self.kube.get(ObjectKey("v1", "Secret", owner.namespace, admin_secret(spec, owner.name) or ""))
        value = ((secret or {}).get("data") or {}).get(ADMIN_TOKEN_KEY)
        return base64.b64decode(value).decode().strip() if value else None

    def _sync_pods(self, owner: Owner, spec: LLMDeploymentSpec, desired: dict[str, ManifestEntry],
                   ) -> tuple[dict[str, dict[str, AdapterOnPod]], int, int]:
        """Each ready engine pod brought to `desired`; returns every pod's adapter states."""
        ready = [p for p in self.kube.list_pods(owner.namespace, owner.selector())
                 if is_true((p.get("status") or {}).get("conditions"), "Ready")
                 and p["status"].get("podIP") and not p["metadata"].get("deletionTimestamp")]  # fmt: skip
        if not ready:
            return {}, 0, 0
        token = self._token(owner, spec)
        out: dict[str, dict[str, AdapterOnPod]] = {}
        loads = unloads = 0
        for pod in ready:
            pod_name = pod["metadata"]["name"]
            if token is None:
                out[pod_name] = {n: AdapterOnPod(PodState.LOADING, "the admin credential Secret is not readable yet")
                                 for n in desired}  # fmt: skip
                continue
            admin = self.connect(pod["status"]["podIP"], spec.engine.admin_port, token)
            memory = self._pods.setdefault(pod["metadata"].get("uid", pod_name), _PodMemory())
            now = time.monotonic()
            states, tried, n_unload = _sync_one(admin, desired, memory.resolved, pod_name,
                                                retries.held(memory.failures, desired, now))
            memory.failures = retries.after_pass(memory.failures, desired, states, tried, now)
            out[pod_name] = {**states, **{n: f.report() for n, f in memory.failures.items() if n in tried}}
            loads, unloads = loads + len(tried), unloads + n_unload
        live = {p["metadata"].get("uid", p["metadata"]["name"]) for p in ready}
        for uid in [u for u in self._pods if u not in live]:  # pods gone or not ready: forget
            del self._pods[uid]
        return out, loads, unloads

    def _write_status(self, adapter: dict[str, Any], binding: Binding, pods: dict[str, dict[str, AdapterOnPod]]) -> None:
        per_pod = {p: states.get(binding.model, AdapterOnPod(PodState.LOADING)) for p, states in pods.items()}
        old = adapter.get("status") or {}
        new = adapter_status(old, binding, per_pod, int(adapter["metadata"].get("generation") or 1), rfc3339())
        if not changed(old, new):
            return
        try:  # one adapter's trouble (deleted meanwhile, a refused patch) never stops the others'
            self.kube.patch_status_of(ObjectKey.of(adapter), new, as_field_manager=True)
            for event in transitions(old, new):
                self.kube.event(adapter, *event)
        except ApiException as err:
            if err.status != 404:
                log.warning("status of LLMAdapter %s/%s not written: %s %s", adapter["metadata"]["namespace"],
                            adapter["metadata"]["name"], err.status, err.reason)


def _spec(body: dict[str, Any] | None) -> LLMDeploymentSpec | None:
    """The base's spec, None when it is gone, being deleted or unreadable (its own status says why)."""
    if body is None or body["metadata"].get("deletionTimestamp"):
        return None
    try:
        return parse_spec(body)
    except SpecError:
        return None


def _sync_one(admin: EngineAdmin, desired: dict[str, ManifestEntry], resolved: dict[str, str], pod: str,
              held: dict[str, AdapterOnPod] | None = None) -> tuple[dict[str, AdapterOnPod], set[str], int]:
    """One pod: list, unload, load (not `held` ones); the bound adapters' states there after it,
    the names it tried to load, and how many it unloaded. `resolved` (this pod's sources as the
    engine listed them after a load) is updated by the loads."""
    try:
        plan = sync_plan(desired, admin.list(), resolved, held)
    except AdminError as err:
        log.warning("pod %s: cannot list adapters: %s", pod, err)
        return {n: AdapterOnPod(PodState.LOADING, str(err)) for n in desired}, set(), 0
    states = dict(plan.states)
    deferred, tried = set(), set()
    for name in plan.unload:
        try:
            admin.unload(name)
        except AdminError as err:  # 409 while requests use it: the next pass tries again
            log.info("pod %s: unload %s deferred: %s", pod, name, err)
            deferred.add(name)
    for entry in plan.load:
        if entry.name in deferred:  # a reload whose old version still serves: not before it is out
            states[entry.name] = AdapterOnPod(PodState.LOADING, "reload pending: the loaded version is in use")
            continue
        tried.add(entry.name)
        try:
            listed = admin.load(entry)
            resolved[entry.source] = str(listed.get("source") or entry.source)
            states[entry.name] = AdapterOnPod(PodState.LOADED)
        except AdminError as err:
            state = PodState.FAILED if err.status in _REFUSED else PodState.LOADING
            states[entry.name] = AdapterOnPod(state, str(err))
    return states, tried, len(plan.unload)


@dataclass
class _PodMemory:
    """What placement remembers of one pod between passes."""

    resolved: dict[str, str] = field(default_factory=dict)  # source asked for -> source the engine listed
    failures: retries.FailureBook = field(default_factory=dict)
