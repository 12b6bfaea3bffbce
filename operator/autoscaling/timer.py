"""The kopf daemon that runs the autoscaler for every LLMDeployment: collect, decide, write /scale.

One tick: read /scale (current replicas and the pod selector), find the targets (ready pods, or
`metrics.targets`), collect per-pod samples (scrape, or Prometheus), call the pure `decide`, write
replicas only through the /scale subresource (so GitOps, which owns `spec`, never fights it), and
write status.autoscaling (signal per pod and aggregated, desired vs current, last decision, short
history, conditions). An Event is posted on every scale and when metrics go missing.

The daemon ticks every `TICK_SECONDS` (env LLMOP_AUTOSCALER_TICK_SECONDS); each LLMDeployment
decides only when its own `autoscaling.intervalSeconds` has passed. The blocking work runs in a
thread. Its log is news only: a decision at INFO when it changes (`log_level`), an error at WARNING
when it first appears, everything else at DEBUG.
Registered by importing this module (operator/handlers.py does); each tick takes the operator's
`Autoscaler` (its `Kube` clients) from kopf's memo, where `llmop operator` put the operator object.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import kopf
from pydantic import ValidationError

from llmop.operator.api.llmdeployment import GROUP, PLURAL, VERSION
from llmop.operator.build.meta import Owner
from llmop.operator.kube.client import EventType, Kube

from . import prometheus
from .collect import PodsCollector
from .decision import DecisionReason, Policy, Result, decide
from .hpa import build_hpa, hpa_key
from .spec import AutoscalingSpec, AutoscalingStatus
from .state import METRICS_AVAILABLE, history_from_status, status_after
from .targets import Target, pod_targets, static_targets

TICK_SECONDS = float(os.environ.get("LLMOP_AUTOSCALER_TICK_SECONDS", "1"))
FIELD_MANAGER = "llmop-autoscaler"


class ScaleEvent(StrEnum):
    """Reasons of the autoscaler's Events (a scale in either direction; MetricsMissing is the
    decision's own reason)."""

    SCALED_UP = "ScaledUp"
    SCALED_DOWN = "ScaledDown"


@dataclass(frozen=True)
class Autoscaler:
    """The autoscaler's API access: `kube` writes /scale, status.autoscaling and HPAs as its own
    field manager (and counts its own requests); `events` is the operator's, so its Events come
    from the operator like the reconciler's."""

    kube: Kube
    events: Kube

    @classmethod
    def beside(cls, operator_kube: Kube) -> "Autoscaler":
        """An autoscaler over the operator's API client."""
        return cls(Kube(operator_kube.api, FIELD_MANAGER), operator_kube)


@dataclass
class TimerState:
    """Per-LLMDeployment memory in the operator process (kopf memo): only what may be lost."""

    collector: PodsCollector = field(default_factory=PodsCollector)
    last_tick: float = 0.0
    hpa_applied: bool | None = None  # None: unknown (first tick after start)
    last_status: AutoscalingStatus | None = None  # what this process wrote last (fresher than kopf's body)
    last_error: str | None = None  # the last tick's failure, logged at WARNING once


def _targets(kube: Kube, namespace: str, selector: str | None, spec: AutoscalingSpec) -> list[Target]:
    if spec.metrics.targets:
        return static_targets(spec.metrics.targets, spec.metrics.path)
    if not selector:
        return []
    return pod_targets(kube.list_pods(namespace, selector), spec.metrics.port, spec.metrics.path)


def _collect(state: TimerState, targets: list[Target], spec: AutoscalingSpec, now: float):
    m = spec.metrics
    if m.source == "prometheus":
        return prometheus.collect(m.prometheus.url, m.prometheus.selector, m.prometheus.pod_label,
                                  targets, spec.metric_window_seconds, m.prometheus.timeout_seconds)
    return state.collector.collect(targets, spec.metric_window_seconds, m.timeout_seconds, now)


def _previous(status: dict[str, Any]) -> AutoscalingStatus | None:
    try:
        raw = (status or {}).get("autoscaling")
        return AutoscalingStatus.model_validate(raw) if raw else None
    except ValidationError:
        return None  # written by an older operator: start afresh rather than crash the loop


def tick(kube: Kube, name: str, namespace: str, status: dict[str, Any], spec: AutoscalingSpec,
         state: TimerState, now: float) -> tuple[Result, AutoscalingStatus | None, AutoscalingStatus]:
    """One decision for one LLMDeployment; returns (result, previous status, new status)."""
    scale = kube.get_scale(namespace, name)
    current = int((scale.get("spec") or {}).get("replicas") or 0)
    selector = (scale.get("status") or {}).get("selector")
    targets = _targets(kube, namespace, selector, spec)
    samples = _collect(state, targets, spec, now)
    prev = state.last_status or _previous(status)
    result = decide(now, current, samples, Policy.from_spec(spec), history_from_status(prev))
    if result.changed:
        kube.patch_scale(namespace, name, result.desired)
    new = status_after(prev, result, samples, spec.target_queue_wait_seconds, now)
    kube.patch_status(namespace, name, {"autoscaling": new.model_dump(mode="json", by_alias=True)},
                      as_field_manager=True)
    state.last_status = new
    return result, prev, new


def sync_hpa(kube: Kube, body: dict[str, Any], spec: AutoscalingSpec, state: TimerState) -> None:
    """Mode hpa: server-side apply the HPA; otherwise make sure none is left behind."""
    owner = Owner.from_body(body)
    if spec.enabled and spec.mode == "hpa":
        kube.apply(build_hpa(owner, spec))
        state.hpa_applied = True
    elif state.hpa_applied is not False:
        kube.delete(hpa_key(owner))
        state.hpa_applied = False


def _metrics_went_missing(prev: AutoscalingStatus | None, new: AutoscalingStatus) -> bool:
    def available(s: AutoscalingStatus | None) -> str | None:
        return next((c.status for c in (s.conditions if s else []) if c.type == METRICS_AVAILABLE),
                    None)
    return available(new) == "False" and available(prev) != "False"


def log_level(prev: AutoscalingStatus | None, result: Result) -> int:
    """INFO when the decision is news (a scale, a new desired count, the first decision this
    process makes), DEBUG for a tick that re-decides what was already decided."""
    if result.changed or prev is None or prev.desired_replicas != result.desired:
        return logging.INFO
    return logging.DEBUG


def error_level(previous: str | None, error: str) -> int:
    """WARNING for a new error, DEBUG while the same error repeats tick after tick."""
    return logging.DEBUG if previous == error else logging.WARNING


async def _tick(scaler: Autoscaler, body, spec, status, name: str, namespace: str, state: TimerState,
                logger) -> None:
    """Decide for this LLMDeployment if its interval has passed."""
    try:
        auto = AutoscalingSpec.model_validate(dict(spec).get("autoscaling") or {})
    except ValidationError:
        return  # the reconciler reports an invalid spec; nothing to scale on
    now = time.time()
    if now - state.last_tick < auto.interval_seconds:
        return
    state.last_tick = now
    await asyncio.to_thread(sync_hpa, scaler.kube, dict(body), auto, state)
    if not auto.enabled or auto.mode != "builtin":
        state.last_status = None
        return
    result, prev, new = await asyncio.to_thread(
        tick, scaler.kube, name, namespace, dict(status), auto, state, now)
    logger.log(log_level(prev, result), "autoscaler: %s -> %s replicas: %s: %s", result.current,
               result.desired, result.reason, result.message)
    events = []
    if result.changed:
        verb = ScaleEvent.SCALED_UP if result.desired > result.current else ScaleEvent.SCALED_DOWN
        events.append((EventType.NORMAL, verb, f"{result.current} -> {result.desired} replicas: "
                       f"{result.reason}: {result.message}"))
    if _metrics_went_missing(prev, new):
        events.append((EventType.WARNING, DecisionReason.METRICS_MISSING, result.message))
    for event in events:
        try:
            await asyncio.to_thread(scaler.events.event, dict(body), *event)
        except Exception as err:  # noqa: BLE001 - an Event is best-effort; the scale already happened
            logger.warning("autoscaler: could not post Event %s: %s", event[1], err)


@kopf.daemon(GROUP, VERSION, PLURAL, id="autoscaler", cancellation_timeout=10)
async def autoscaler(body, spec, status, name, namespace, memo, logger, stopped, **_) -> None:
    """One loop per LLMDeployment, a tick every `TICK_SECONDS` (a daemon rather than a kopf timer:
    kopf logs every run of a timer at INFO). `body`, `spec` and `status` are kopf's live views;
    `memo.operator` is the operator object (`llmop.operator.controllers`)."""
    state: TimerState = memo.setdefault("llmop_autoscaler", TimerState())
    scaler: Autoscaler = memo.operator.autoscaler
    while not stopped:
        try:
            await _tick(scaler, body, spec, status, name, namespace, state, logger)
            state.last_error = None
        except Exception as err:  # noqa: BLE001 - API trouble: retry next tick, never end the loop
            logger.log(error_level(state.last_error, str(err)), "autoscaler tick failed: %s", err)
            state.last_error = str(err)
        await stopped.wait(TICK_SECONDS)
