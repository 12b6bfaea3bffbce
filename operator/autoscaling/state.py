"""status.autoscaling <-> the decision's History and Result; pure, so the timer stays a thin shell.

The decision's memory (stabilization recommendations, last move times, learned capacity) lives in
status, not in the operator's memory, so a restarted or failed-over operator keeps its windows and
does not scale down early.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from llmop.operator.api.conditions import set_condition
from llmop.operator.api.timestamps import rfc3339

from .decision import DecisionReason, History, PodSample, Result
from .spec import (
    AutoscalingStatus,
    Decision,
    DemandSample,
    PodSignal,
    Recommendation,
)

HISTORY_LENGTH = 10


class AutoscalingConditionType(StrEnum):
    METRICS_AVAILABLE = "MetricsAvailable"
    SCALING_LIMITED = "ScalingLimited"


class ConditionReason(StrEnum):
    """Condition reasons that are not decision reasons."""

    METRICS_READ = "MetricsRead"
    WITHIN_LIMITS = "WithinLimits"


METRICS_AVAILABLE = AutoscalingConditionType.METRICS_AVAILABLE
SCALING_LIMITED = AutoscalingConditionType.SCALING_LIMITED
LIMITED_REASONS = {DecisionReason.HOLD_AT_MAX_REPLICAS, DecisionReason.HOLD_AT_MIN_REPLICAS,
                   DecisionReason.HOLD_RATE_LIMITED, DecisionReason.BELOW_MIN_REPLICAS,
                   DecisionReason.ABOVE_MAX_REPLICAS}
UNMEASURED = {DecisionReason.METRICS_MISSING, DecisionReason.NO_READY_PODS}


def history_from_status(status: AutoscalingStatus | None) -> History:
    """The decision's memory, as last written to status."""
    if status is None:
        return History()
    return History(
        recommendations=tuple((r.time, r.replicas) for r in status.recommendations),
        last_scale_up=status.last_scale_up_time,
        last_scale_down=status.last_scale_down_time,
        capacity_per_pod=status.capacity_per_pod_rps,
        since=status.observing_since,
        demands=tuple((d.time, d.requests_per_second) for d in status.demand_history),
    )


def _metrics_condition(conds: list[dict[str, Any]], result: Result, now: str) -> list[dict[str, Any]]:
    if result.reason in UNMEASURED:
        return set_condition(conds, METRICS_AVAILABLE, False, result.reason, result.message, now)
    if result.missing:
        return set_condition(conds, METRICS_AVAILABLE, False, DecisionReason.METRICS_MISSING,
                             f"no metrics from {', '.join(result.missing)}; not scaling down", now)
    return set_condition(conds, METRICS_AVAILABLE, True, ConditionReason.METRICS_READ,
                         f"queue metrics read from {result.ready} ready pods", now)


def _pod_signal(sample: PodSample) -> PodSignal:
    return PodSignal(
        name=sample.name, ready=sample.ready, scraped=sample.scraped,
        queue_wait_mean_seconds=_round(sample.mean_queue_wait),
        oldest_waiting_age_seconds=_round(sample.oldest_waiting_age),
        signal_seconds=_round(sample.signal), waiting=sample.waiting, running=sample.running,
    )


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def status_after(prev: AutoscalingStatus | None, result: Result, samples: tuple[PodSample, ...],
                 target: float, now: float) -> AutoscalingStatus:
    """The new status.autoscaling after one decision."""
    prev = prev or AutoscalingStatus()
    stamp = rfc3339(now)
    decision = Decision(
        time=stamp, current_replicas=result.current, desired_replicas=result.desired,
        signal_seconds=_round(result.signal), reason=result.reason, message=result.message,
    )
    history = list(prev.history)
    if result.changed:
        history = (history + [decision])[-HISTORY_LENGTH:]
    limited = result.reason in LIMITED_REASONS
    h = result.history
    return AutoscalingStatus(
        signal_seconds=_round(result.signal),
        target_queue_wait_seconds=target,
        current_replicas=result.current,
        ready_replicas=result.ready,
        desired_replicas=result.desired,
        pods=[_pod_signal(s) for s in samples],
        last_decision=decision,
        last_scale_time=stamp if result.changed else prev.last_scale_time,
        last_scale_up_time=h.last_scale_up,
        last_scale_down_time=h.last_scale_down,
        capacity_per_pod_rps=_round(h.capacity_per_pod),
        observing_since=h.since,
        demand_history=[DemandSample(time=t, requests_per_second=d) for t, d in h.demands],
        history=history,
        recommendations=[Recommendation(time=t, replicas=r) for t, r in h.recommendations],
        conditions=set_condition(
            _metrics_condition([c.wire() for c in prev.conditions], result, stamp), SCALING_LIMITED, limited,
            result.reason if limited else ConditionReason.WITHIN_LIMITS, result.message if limited else "", stamp),
    )
