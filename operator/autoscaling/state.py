"""status.autoscaling <-> the decision's History and Result; pure, so the timer stays a thin shell.

The decision's memory (stabilization recommendations, last move times, learned capacity) lives in
status, not in the operator's memory, so a restarted or failed-over operator keeps its windows and
does not scale down early.
"""

from __future__ import annotations

from datetime import datetime, timezone

from .decision import History, PodSample, Result
from .spec import (
    AutoscalingCondition,
    AutoscalingStatus,
    Decision,
    DemandSample,
    PodSignal,
    Recommendation,
)

HISTORY_LENGTH = 10
METRICS_AVAILABLE = "MetricsAvailable"
SCALING_LIMITED = "ScalingLimited"
LIMITED_REASONS = {"HoldAtMaxReplicas", "HoldAtMinReplicas", "HoldRateLimited", "BelowMinReplicas",
                   "AboveMaxReplicas"}


def rfc3339(unix: float) -> str:
    return datetime.fromtimestamp(unix, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


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


def _condition(prev: list[AutoscalingCondition], type_: str, true: bool, reason: str, message: str,
               now: float) -> AutoscalingCondition:
    status = "True" if true else "False"
    old = next((c for c in prev if c.type == type_), None)
    since = old.last_transition_time if old is not None and old.status == status else rfc3339(now)
    return AutoscalingCondition(type=type_, status=status, reason=reason, message=message,
                                last_transition_time=since)


def _metrics_condition(result: Result, prev, now: float) -> AutoscalingCondition:
    if result.reason in ("MetricsMissing", "NoReadyPods"):
        return _condition(prev, METRICS_AVAILABLE, False, result.reason, result.message, now)
    if result.missing:
        return _condition(prev, METRICS_AVAILABLE, False, "MetricsMissing",
                          f"no metrics from {', '.join(result.missing)}; not scaling down", now)
    return _condition(prev, METRICS_AVAILABLE, True, "MetricsRead",
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
    decision = Decision(
        time=rfc3339(now), current_replicas=result.current, desired_replicas=result.desired,
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
        last_scale_time=rfc3339(now) if result.changed else prev.last_scale_time,
        last_scale_up_time=h.last_scale_up,
        last_scale_down_time=h.last_scale_down,
        capacity_per_pod_rps=_round(h.capacity_per_pod),
        observing_since=h.since,
        demand_history=[DemandSample(time=t, requests_per_second=d) for t, d in h.demands],
        history=history,
        recommendations=[Recommendation(time=t, replicas=r) for t, r in h.recommendations],
        conditions=[
            _metrics_condition(result, prev.conditions, now),
            _condition(prev.conditions, SCALING_LIMITED, limited, result.reason if limited else
                       "WithinLimits", result.message if limited else "", now),
        ],
    )
