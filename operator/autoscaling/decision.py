"""The autoscaling decision: per-pod queue-wait samples and the recent past in, desired replicas out.

A pure function over frozen dataclasses, so every rule is a row in a table test and the simulator
in bench/ runs exactly the code the operator runs.

The signal combines what has happened and what is happening. What has happened: the mean queue
wait of the requests a pod admitted during the window, from the deltas of the queue-time histogram's
`_sum` and `_count` counters. What is happening: the age of the oldest request still waiting, which
rises at once when the queue stalls, while the histogram sees nothing until requests leave the queue.
A pod's signal is the larger of the two; the fleet's signal is the mean over ready, scraped pods.

Then, in order:
- bounds first: replicas outside [min, max] move to the bound whatever the metrics say;
- no ready pod scraped → hold (a missing scrape is not a zero);
- within 1 ± tolerance of the target → recommend the current count (no flapping near the target);
  otherwise ceil(pods × signal / target), where pods counts only ready, scraped pods (starting
  pods are not capacity);
- the per-pod capacity, learned from pods whose queue never emptied during a window (their
  admission rate is what one pod can do), turns the demand (arrivals, queue growth, backlog to
  drain, and its rise forecast one pod start-up ahead) into the pods it needs: that count caps a
  scale-up (a backlog keeps the wait high after enough capacity is ordered), floors a scale-down
  (queue wait reads ~0 at any spare capacity, so a low wait does not say how much is spare), and
  scales up before the queue forms when demand grows past it;
- stabilization: scale up to the lowest recommendation of the up window, down to the highest of
  the (longer) down window, and only after a full down window of observations;
- scale-down waits while a pod is unready or unscraped (its load is unknown);
- rate limits: at most max(replicas, percent) per step, and a least period between moves.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from enum import StrEnum

# A backlog counts as extra demand that would clear it within this many metric windows.
BACKLOG_DRAIN_WINDOWS = 2.0


class DecisionReason(StrEnum):
    """Why the decision came out as it did (status.autoscaling.lastDecision.reason)."""

    SCALE_UP = "ScaleUp"
    SCALE_DOWN = "ScaleDown"
    BELOW_MIN_REPLICAS = "BelowMinReplicas"
    ABOVE_MAX_REPLICAS = "AboveMaxReplicas"
    METRICS_MISSING = "MetricsMissing"
    NO_READY_PODS = "NoReadyPods"
    HOLD = "Hold"
    HOLD_TOLERANCE = "HoldTolerance"
    HOLD_CAPACITY_FLOOR = "HoldCapacityFloor"
    HOLD_AT_MAX_REPLICAS = "HoldAtMaxReplicas"
    HOLD_AT_MIN_REPLICAS = "HoldAtMinReplicas"
    HOLD_STABILIZATION = "HoldStabilization"
    HOLD_PODS_UNMEASURED = "HoldPodsUnmeasured"
    HOLD_RATE_LIMITED = "HoldRateLimited"


@dataclass(frozen=True)
class PodSample:
    """One pod's (or scrape target's) metrics over the window ending now.

    `queue_time_sum_delta`/`queue_time_count_delta` are deltas of the queue-time histogram's
    counters over `window_seconds`; None when the pod was not scraped (or has no earlier sample).
    """

    name: str
    ready: bool
    scraped: bool
    queue_time_sum_delta: float | None = None
    queue_time_count_delta: float | None = None
    window_seconds: float | None = None
    oldest_waiting_age: float | None = None
    waiting: float | None = None
    running: float | None = None
    waiting_start: float | None = None  # requests waiting at the window's start

    @property
    def mean_queue_wait(self) -> float | None:
        """Mean queue wait of the requests admitted in the window; None when none were admitted."""
        if not self.scraped or not self.queue_time_count_delta or self.queue_time_count_delta <= 0:
            return None
        return max(0.0, (self.queue_time_sum_delta or 0.0) / self.queue_time_count_delta)

    @property
    def admission_rate(self) -> float | None:
        """Requests per second this pod took out of its queue during the window."""
        if not self.scraped or self.queue_time_count_delta is None or not self.window_seconds:
            return None
        return max(0.0, self.queue_time_count_delta) / self.window_seconds

    @property
    def demand_rate(self) -> float | None:
        """Requests/s arriving (admitted plus queue growth) plus what drains the backlog within
        BACKLOG_DRAIN_WINDOWS windows. None without a full window."""
        rate = self.admission_rate
        if rate is None or self.waiting is None or self.waiting_start is None:
            return None
        growth = (self.waiting - self.waiting_start) / self.window_seconds
        drain = self.waiting / (BACKLOG_DRAIN_WINDOWS * self.window_seconds)
        return max(0.0, rate + growth) + drain

    @property
    def saturated_throughout(self) -> bool:
        """Requests waited at both ends of the window: its admission rate is its capacity."""
        return bool(self.waiting_start) and bool(self.waiting) and self.admission_rate is not None

    @property
    def signal(self) -> float | None:
        """max(windowed mean, oldest waiting age); None when not scraped; 0 for an idle pod."""
        if not self.scraped:
            return None
        return max(self.mean_queue_wait or 0.0, self.oldest_waiting_age or 0.0)


@dataclass(frozen=True)
class Rules:
    """Stabilization and rate limits for one direction."""

    window_seconds: float
    max_replicas_per_step: int
    max_percent_per_step: int
    period_seconds: float

    def step(self, current: int) -> int:
        """Most replicas one move may add or remove from `current`."""
        return max(self.max_replicas_per_step, math.ceil(current * self.max_percent_per_step / 100))


@dataclass(frozen=True)
class Policy:
    """The knobs of spec.autoscaling the decision needs, in plain numbers."""

    min_replicas: int = 1
    max_replicas: int = 4
    target: float = 0.2
    tolerance: float = 0.1
    up: Rules = Rules(0, 4, 100, 15)
    down: Rules = Rules(300, 2, 25, 30)
    # Share of the learned per-pod capacity demand may use: with continuous batching queue wait
    # stays near zero up to the knee and explodes past it, so keep below it.
    target_utilization: float = 0.7
    # How far ahead to forecast a rising demand: a pod ordered now serves this much later.
    pod_startup_seconds: float = 60.0

    @classmethod
    def from_spec(cls, spec) -> "Policy":
        """Build from an `AutoscalingSpec` (kept duck-typed so this module needs no pydantic)."""

        def rules(r) -> Rules:
            return Rules(
                r.stabilization_window_seconds,
                r.max_replicas_per_step,
                r.max_percent_per_step,
                r.period_seconds,
            )

        return cls(
            spec.min_replicas,
            spec.max_replicas,
            spec.target_queue_wait_seconds,
            spec.tolerance,
            rules(spec.scale_up),
            rules(spec.scale_down),
            spec.target_utilization,
            spec.pod_startup_seconds,
        )


@dataclass(frozen=True)
class History:
    """What the decision remembers between calls (persisted in status.autoscaling).

    `recommendations` are (unix time, raw recommended replicas), pruned to the longest window;
    `capacity_per_pod` is the learned admission rate (requests/s) of one saturated pod;
    `since` is when recommendations started (scale-down needs a full window of them);
    `demands` are recent demand estimates, whose trend forecasts demand one pod start-up ahead.
    """

    recommendations: tuple[tuple[float, int], ...] = ()
    last_scale_up: float | None = None
    last_scale_down: float | None = None
    capacity_per_pod: float | None = None
    since: float | None = None
    demands: tuple[tuple[float, float], ...] = ()  # (unix time, demand req/s), for the trend


@dataclass(frozen=True)
class Result:
    """The decision: desired replicas, why, and the history to pass to the next call."""

    desired: int
    current: int
    reason: DecisionReason
    message: str
    signal: float | None
    ready: int
    pod_signals: tuple[tuple[str, float | None], ...]
    missing: tuple[str, ...]
    history: History
    recommendation: int | None = None

    @property
    def changed(self) -> bool:
        return self.desired != self.current


@dataclass(frozen=True)
class _Context:
    """The derived quantities every rule reads (computed once per decision)."""

    now: float
    current: int
    policy: Policy
    signal: float | None
    ready: int
    scraped: tuple[PodSample, ...]
    missing: tuple[str, ...]
    unready: tuple[str, ...]
    pod_signals: tuple[tuple[str, float | None], ...]


def decide(
    now: float, current: int, pods: tuple[PodSample, ...], policy: Policy, history: History
) -> Result:
    """Desired replicas for `current` replicas given the pods' samples; pure and deterministic."""
    ready = tuple(p for p in pods if p.ready)
    scraped = tuple(p for p in ready if p.scraped)
    ctx = _Context(
        now=now,
        current=current,
        policy=policy,
        signal=(sum(p.signal for p in scraped) / len(scraped)) if scraped else None,
        ready=len(ready),
        scraped=scraped,
        missing=tuple(p.name for p in ready if not p.scraped),
        unready=tuple(p.name for p in pods if not p.ready),
        pod_signals=tuple((p.name, p.signal) for p in pods),
    )

    def result(desired: int, reason: DecisionReason, message: str, hist: History, rec: int | None = None):
        return Result(
            desired, current, reason, message, ctx.signal, ctx.ready, ctx.pod_signals,
            ctx.missing, hist, rec,
        )

    if current < policy.min_replicas or current > policy.max_replicas:
        bound = min(max(current, policy.min_replicas), policy.max_replicas)
        reason = DecisionReason.BELOW_MIN_REPLICAS if current < policy.min_replicas \
            else DecisionReason.ABOVE_MAX_REPLICAS
        return result(bound, reason, f"replicas {current} outside [{policy.min_replicas}, "
                      f"{policy.max_replicas}]", _moved(history, now, bound > current))

    if not scraped:
        reason = DecisionReason.METRICS_MISSING if ready else DecisionReason.NO_READY_PODS
        msg = f"no metrics from {', '.join(ctx.missing)}" if ready else "no ready pod to measure"
        return result(current, reason, msg, history)

    capacity = _learn_capacity(ctx, history.capacity_per_pod)
    demand = _total(ctx, "demand_rate")
    history = _remember_demand(history, now, demand, policy)
    raw, hold_reason, why = _recommend(ctx, capacity, _forecast(history, now, demand, policy))
    history = _remember(history, now, raw, policy, capacity)
    desired, reason, message = _stabilize_and_limit(ctx, raw, hold_reason, why, history)
    if desired != current:
        history = _moved(history, now, desired > current)
    return result(desired, reason, message, history, raw)


def _ratio(ctx: _Context) -> float:
    return ctx.signal / ctx.policy.target


def _total(ctx: _Context, rate: str) -> float | None:
    """A per-pod rate summed over scraped pods; a pod without a full window yet (just Ready)
    counts as the mean of the others (the load balancer spreads load evenly on average)."""
    rates = [r for r in (getattr(p, rate) for p in ctx.scraped) if r is not None]
    return sum(rates) / len(rates) * len(ctx.scraped) if rates else None


def _saturated_now(ctx: _Context) -> bool:
    return _ratio(ctx) > 1 + ctx.policy.tolerance


def _learn_capacity(ctx: _Context, known: float | None) -> float | None:
    """Per-pod saturation throughput: measured on pods whose queue never emptied during the
    window (their admission rate is their capacity), raised whenever pods admit more than it.

    An unsaturated pod's admission rate is its load, not its capacity, so on its own it only ever
    raises an estimate that saturation produced.
    """
    saturated = [p.admission_rate for p in ctx.scraped if p.saturated_throughout]
    if saturated:
        return sum(saturated) / len(saturated)
    rate = _total(ctx, "admission_rate")
    if known is None or not rate:
        return known
    return max(known, rate / len(ctx.scraped))


def _capacity_now(ctx: _Context, learned: float | None) -> float | None:
    """For the scale-up cap: the larger of the learned figure and, while saturated, what the pods
    admit now (a windowed rate that errs low, so the cap errs high)."""
    rate = _total(ctx, "admission_rate")
    now = rate / len(ctx.scraped) if _saturated_now(ctx) and rate else None
    return max(filter(None, (learned, now)), default=None)


def _need(ctx: _Context, demand: float | None, capacity: float | None) -> int | None:
    """Pods that serve `demand` req/s at the target utilization of `capacity` req/s each."""
    if demand is None or not capacity:
        return None
    return math.ceil(demand / (capacity * ctx.policy.target_utilization) - 1e-9)


TREND_SECONDS = 60.0  # demand estimates this old and newer make the trend


def _remember_demand(history: History, now: float, demand: float | None, policy: Policy) -> History:
    if demand is None:
        return replace(history, demands=())
    kept = tuple((t, d) for t, d in history.demands if now - t <= TREND_SECONDS)
    return replace(history, demands=kept + ((now, demand),))


def _forecast(history: History, now: float, demand: float | None, policy: Policy) -> float | None:
    """Demand one pod start-up from now: today's plus its rise over the trend window, when it
    rose by more than the tolerance (never a fall: scale-down has its own window)."""
    if demand is None or len(history.demands) < 2:
        return demand
    t0, d0 = history.demands[0]
    if now - t0 < TREND_SECONDS / 2:
        return demand
    if demand - d0 <= policy.tolerance * d0:
        return demand  # within noise: a Poisson load's estimates wander, a real rise does not
    return demand + (demand - d0) / (now - t0) * policy.pod_startup_seconds


def _recommend(ctx: _Context, learned: float | None, demand: float | None
               ) -> tuple[int, str, str]:
    """Raw recommendation before stabilization and limits: (replicas, hold reason, why).

    The queue-wait ratio says which way: ceil(pods × signal / target), or the current count within
    the tolerance band. Once a per-pod capacity is known, the demand (arrivals, queue growth and
    the backlog to drain, forecast one pod start-up ahead while rising) at that capacity says how
    far:
    - a scale-up is capped at the pods the demand needs (a backlog keeps the wait high after
      enough capacity is ordered), but may always add one;
    - nothing goes below what the demand needs at the learned capacity: this floors a scale-down
      (queue wait reads ~0 at any spare capacity) and scales up ahead of the queue when demand
      grows past it (queue wait only rises once pods are already saturated).
    """
    ratio, tol, current = _ratio(ctx), ctx.policy.tolerance, ctx.current
    if 1 - tol <= ratio <= 1 + tol:
        raw, reason, why = current, DecisionReason.HOLD_TOLERANCE, f"signal/target {ratio:.2f} within 1 ± {tol}"
    else:
        raw, reason = math.ceil(len(ctx.scraped) * ratio - 1e-9), DecisionReason.HOLD
        why = f"signal {ctx.signal:.3f}s vs target {ctx.policy.target:g}s (x{ratio:.2f})"
    cap = _need(ctx, demand, _capacity_now(ctx, learned))
    if raw > current and cap is not None and raw > max(cap, current + 1):
        raw = max(cap, current + 1)
        why += f"; capped: demand {demand:.2f} req/s needs {raw}"
    floor = _need(ctx, demand, learned)
    if floor is not None and floor > raw:
        raw = floor
        reason = DecisionReason.HOLD_CAPACITY_FLOOR if floor <= current else reason
        why += f"; demand {demand:.2f} req/s needs {floor} pods at {learned:.2f} req/s/pod"
    return raw, reason, why


def _remember(history: History, now: float, raw: int, policy: Policy, capacity) -> History:
    horizon = max(policy.up.window_seconds, policy.down.window_seconds)
    recs = tuple((t, r) for t, r in history.recommendations if now - t < horizon) + ((now, raw),)
    since = now if history.since is None else history.since
    return replace(history, recommendations=recs, capacity_per_pod=capacity, since=since)


def _moved(history: History, now: float, up: bool) -> History:
    return replace(history, last_scale_up=now) if up else replace(history, last_scale_down=now)


def _stabilize_and_limit(
    ctx: _Context, raw: int, hold_reason: DecisionReason, why: str, history: History
) -> tuple[int, DecisionReason, str]:
    """Apply bounds, stabilization windows, the scale-down guard and the rate limits to `raw`."""
    current, policy, now = ctx.current, ctx.policy, ctx.now
    bounded = min(max(raw, policy.min_replicas), policy.max_replicas)
    if bounded == current:
        if raw != current:
            edge, reason = (("maxReplicas", DecisionReason.HOLD_AT_MAX_REPLICAS) if raw > current
                            else ("minReplicas", DecisionReason.HOLD_AT_MIN_REPLICAS))
            return current, reason, f"{why}; at {edge} {current}"
        return current, hold_reason, why

    up = raw > current
    rules = policy.up if up else policy.down
    window = [r for t, r in history.recommendations if now - t <= rules.window_seconds]
    stable = min(window) if up else max(window)
    young = not up and now - history.since < rules.window_seconds
    if young or ((stable <= current) if up else (stable >= current)):
        return current, DecisionReason.HOLD_STABILIZATION, (
            f"{why}; recommendation {raw} not stable for {rules.window_seconds:g}s"
        )
    if not up and (ctx.unready or ctx.missing):
        names = ", ".join(ctx.unready + ctx.missing)
        return current, DecisionReason.HOLD_PODS_UNMEASURED, f"{why}; not scaling down while {names} unmeasured"

    last = history.last_scale_up if up else history.last_scale_down
    if last is not None and now - last < rules.period_seconds:
        return current, DecisionReason.HOLD_RATE_LIMITED, (
            f"{why}; last scale {'up' if up else 'down'} {now - last:.0f}s ago "
            f"< {rules.period_seconds:g}s"
        )
    step = rules.step(current)
    desired = min(stable, current + step) if up else max(stable, current - step)
    limited = " (rate-limited)" if desired != stable else ""
    if not policy.min_replicas <= desired <= policy.max_replicas:
        desired = min(max(desired, policy.min_replicas), policy.max_replicas)
        limited = f" (bounded to [{policy.min_replicas}, {policy.max_replicas}])"
    return desired, DecisionReason.SCALE_UP if up else DecisionReason.SCALE_DOWN, f"{why}; {current} -> {desired}{limited}"
