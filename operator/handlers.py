"""kopf handlers: every trigger runs the same level-based reconcile (`reconcile.reconciler`).

Triggers: an LLMDeployment is created, its spec changes, the operator (re)starts, an owned object
changes (drift is reverted, Deployment progress reaches status) and a slow resync timer. Errors map
to kopf's retry model: API trouble is a TemporaryError (retried with backoff), a spec that can never
work is a PermanentError (recorded in status and an Event; retried only when the spec changes).
The autoscaler's daemon registers beside these (imported below). LLMAdapters (tenants' adapters)
are placed by one level-based pass per base (`adapters.placer`), run when an adapter changes, its
base changes or goes, and by a daemon per base with tenancy every few seconds (new pods, failed
loads, revoked grants). Every handler gets the operator object (`controllers.Operator`) as `memo.operator`:
`llmop operator` passes it to kopf.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import kopf
from kubernetes.client.exceptions import ApiException

from llmop.operator.adapters.binding import base_of
from llmop.operator.api import llmadapter
from llmop.operator.api.conditions import is_true
from llmop.operator.api.llmdeployment import GROUP, KIND, PLURAL, VERSION
from llmop.operator.autoscaling import timer  # noqa: F401 - registers the autoscaler's daemon
from llmop.operator.build.desired import SpecError
from llmop.operator.build.meta import ENGINE_NAME, INSTANCE_LABEL, MANAGED_BY
from llmop.operator.controllers import Operator
from llmop.operator.reconcile.reconciler import Reconciler

log = logging.getLogger("llmop.operator")
RESYNC_SECONDS = 300.0
PLACEMENT_SECONDS = 5.0
OWNED = [("", "v1", "configmaps"), ("", "v1", "services"), ("apps", "v1", "deployments"),
         ("policy", "v1", "poddisruptionbudgets"), ("networking.k8s.io", "v1", "networkpolicies")]  # fmt: skip


def kopf_memo(operator: Operator) -> kopf.Memo:
    """kopf's global memo for `operator` (`kopf.run(memo=...)`); per-object memos are copies of it."""
    return kopf.Memo(operator=operator)


def _reconciler(memo: kopf.Memo) -> Reconciler:
    return memo.operator.reconciler


def _run(fn, *args) -> Any:
    try:
        return fn(*args)
    except SpecError as err:
        raise kopf.PermanentError(f"{err.reason}: {err}") from err
    except ApiException as err:
        if err.status in (400, 422):  # the operator built something the API server rejects
            raise kopf.PermanentError(f"API server refused: {err.status} {err.reason}: {err.body}") from err
        raise kopf.TemporaryError(f"API error {err.status}: {err.reason}", delay=5) from err
    except (OSError, ConnectionError) as err:
        raise kopf.TemporaryError(f"API unreachable: {err}", delay=5) from err


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    """kopf's bookkeeping under llmop.dev annotations; no kopf Events (we post our own)."""
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=GROUP, key="last-handled-configuration"
    )
    settings.persistence.finalizer = f"{GROUP}/finalizer"
    settings.posting.enabled = False
    # Watching given namespaces, the operator holds a Role there and nothing cluster-wide: kopf's
    # scanning of CRDs and namespaces (cluster-scoped lists it would retry, then fall back from)
    # is off, and the namespaces are taken as given.
    settings.scanning.disabled = memo.operator.namespaced
    settings.execution.max_workers = 8
    settings.watching.server_timeout = 300
    settings.networking.request_timeout = 60
    logging.getLogger("kubernetes").setLevel(logging.WARNING)


@kopf.on.cleanup()
def report_requests(logger: logging.Logger, memo: kopf.Memo, **_: Any) -> None:
    """On shutdown, log how many API requests the reconciler and adapter placement made (the scale
    benchmarks read them)."""
    logger.info("llmop api requests: %s", json.dumps(dict(memo.operator.kube.requests)))
    logger.info("llmop adapter placement api requests: %s", json.dumps(dict(memo.operator.placer.kube.requests)))


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL, field="spec")
def reconcile_llmdeployment(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """The LLMDeployment appeared, changed, or the operator restarted."""
    _run(_reconciler(memo).reconcile, dict(body))
    try:  # placement's trouble must not make kopf retry (or fail) the base's own reconcile
        _place(memo, body["metadata"]["namespace"], body["metadata"]["name"])
    except (kopf.TemporaryError, kopf.PermanentError) as err:
        log.warning("adapter placement for %s/%s failed (the placement daemon retries): %s",
                    body["metadata"]["namespace"], body["metadata"]["name"], err)


def _place(memo: kopf.Memo, namespace: str, name: str) -> None:
    """One placement pass over the base `namespace/name`."""
    _run(memo.operator.placer.place, namespace, name)


def _deleted(type: str | None = None, **_: Any) -> bool:
    return type == "DELETED"


# The filters are `when=` conditions, not early returns: kopf logs every handler it runs at INFO,
# and an operator at rest must log nothing (tests/operator_cluster/test_autoscaler_logs.py).
@kopf.on.event(GROUP, VERSION, PLURAL, when=_deleted)
def _base_deleted(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """A base is gone: its adapters say so (BaseNotFound)."""
    _place(memo, body["metadata"]["namespace"], body["metadata"]["name"])


def _has_tenancy(spec: kopf.Spec, **_: Any) -> bool:
    return spec.get("tenancy") is not None


@kopf.daemon(GROUP, VERSION, PLURAL, id="adapter-placement", when=_has_tenancy, cancellation_timeout=30)
async def place_adapters(body: kopf.Body, memo: kopf.Memo, stopped: kopf.DaemonStopped, **_: Any) -> None:
    """Catch what no event announces (a pod turning ready, a failed load's retry, a namespace
    relabelled): a pass every PLACEMENT_SECONDS while the base has tenancy (kopf stops the daemon
    when it loses it). A daemon, not a kopf timer, because kopf logs every timer run at INFO; its
    passes run on asyncio's thread pool, not on one of kopf's handler workers for good."""
    namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
    while not stopped:
        try:
            await asyncio.to_thread(_place, memo, namespace, name)
        except (kopf.TemporaryError, kopf.PermanentError) as err:
            log.warning("adapter placement for %s/%s failed (tried again in %.0f s): %s", namespace, name,
                        PLACEMENT_SECONDS, err)
        await stopped.wait(PLACEMENT_SECONDS)


def _adapter_news(body: kopf.Body, type: str | None = None, **_: Any) -> bool:
    """Not a status-only change (the placer's own writes)."""
    m, status = body.get("metadata", {}), body.get("status") or {}
    return not (type == "MODIFIED" and status.get("observedGeneration") == m.get("generation"))


@kopf.on.event(GROUP, VERSION, llmadapter.PLURAL, when=_adapter_news)
def _adapter_changed(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """An LLMAdapter appeared, changed its spec or was deleted: place its base's adapters."""
    base = base_of(dict(body))
    if base is not None:
        _place(memo, *base)


@kopf.timer(GROUP, VERSION, PLURAL, interval=RESYNC_SECONDS, initial_delay=RESYNC_SECONDS, idle=None)
def resync(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """A slow safety net: anything a missed watch event left behind converges here."""
    try:
        _run(_reconciler(memo).reconcile, dict(body))
    except kopf.PermanentError:
        pass  # already recorded in status; a timer must not keep reporting it


def _owner_name(body: kopf.Body) -> str | None:
    for ref in body.get("metadata", {}).get("ownerReferences", []):
        if ref.get("kind") == KIND and ref.get("apiVersion", "").startswith(f"{GROUP}/"):
            return ref["name"]
    return None


def _owned_changed(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """An owned object changed or was deleted: revert drift, recreate, refresh status."""
    name = _owner_name(body)
    if name is None:
        return
    try:
        _run(_reconciler(memo).reconcile_named, body["metadata"]["namespace"], name)
    except kopf.PermanentError:
        pass  # recorded in the owner's status by the reconcile itself


for _group, _version, _plural in OWNED:
    kopf.on.event(_group, _version, _plural, labels=MANAGED_BY)(_owned_changed)


def _pod_not_ready(body: kopf.Body, **_: Any) -> bool:
    """Only pods that are not (yet) ready can bring news the Deployment's status does not: the
    scheduler's or kubelet's reason (readiness changes reach the owner through its Deployment)."""
    return not is_true((body.get("status") or {}).get("conditions"), "Ready")


@kopf.on.event("", "v1", "pods", labels=ENGINE_NAME, when=_pod_not_ready)
def _engine_pod_changed(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """An engine pod that is not ready changed (unschedulable, image pull failing, crash looping):
    the owner's status and Events say why (`reconcile.pods`)."""
    name = body.get("metadata", {}).get("labels", {}).get(INSTANCE_LABEL)
    if not name:
        return
    try:
        _run(_reconciler(memo).reconcile_named, body["metadata"]["namespace"], name)
    except kopf.PermanentError:
        pass  # recorded in the owner's status by the reconcile itself
