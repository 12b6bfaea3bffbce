"""Why queue wait beats CPU: a discrete-event simulation of engine replicas under a load surge.

Replays Poisson arrivals (steady, then a surge of `--surge`x for ten minutes, then back) against
replicas that each serve `--slots` requests at once with a per-replica service rate of
`--service-rate` requests/s at a full batch, behind a kube-proxy-like random load balancer. New
replicas take `--startup` seconds before they are Ready. Four ways to set the replica count:

- `cpu`: Kubernetes HPA on CPU utilisation (target 70%). An engine pod's CPU is a busy scheduler
  loop: near constant, a little higher with a full batch, blind to how deep the queue is;
- `concurrency`: HPA on requests in flight per pod (running + waiting), target 80% of the slots;
- `queue-wait`: llmop's policy: the real `llmop.operator.autoscaling.decision.decide`, fed by the
  real snapshot/window code (`metrics.SnapshotRing`, `sample_between`) from simulated engine
  counters, with the spec's defaults;
- `static N`: N replicas all the time; the best static count is the smallest N that keeps >= 95% of
  the surge's requests under the target.

The per-replica service rate and slot count are the engine's, measured by the serving benchmark
(`bench/serving.py` writes `service_rate` into bench/results/serving.json: the requests/s one
`llmop serve` completes during its saturation burst); the load is given in replicas' worth of that
rate (`--base-load`), so the trace keeps its shape whatever the machine. The engine's CPU model
(what the CPU policy sees) is an assumption, stated in `Replica.cpu`.

Run: .venv/bin/python -P bench/serving.py --rates "" --burst 32 --skip-offline   # measures the rate
     .venv/bin/python -P bench/autoscaling_sim.py [--plot docs/autoscaling_sim.png]
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import json
import math
import random
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from llmop.operator.autoscaling.decision import History, Policy, decide
from llmop.operator.autoscaling.metrics import EngineSnapshot, SnapshotRing, sample_between
from llmop.operator.autoscaling.spec import AutoscalingSpec

SERVING_RESULTS = Path(__file__).parent / "results" / "serving.json"
UNIT_SERVICE_RATE = 4.0  # the Scenario default, for unit tests of the simulator; the benchmark uses the measured rate


@dataclass(frozen=True)
class Scenario:
    """The load trace and the replicas' physics."""

    base_rate: float = 10.0  # req/s before and after the surge
    surge: float = 4.0  # multiplier during the surge
    warmup_s: float = 1200.0  # steady load before measuring: the autoscalers settle and learn
    steady_s: float = 600.0
    surge_s: float = 600.0
    after_s: float = 900.0
    ramp_s: float = 0.0  # seconds to go from base to surge (0: a step)
    service_rate: float = UNIT_SERVICE_RATE
    slots: int = 32
    startup_s: float = 30.0
    prefill_s: float = 0.1  # added to queue wait to make TTFT
    target_s: float = 0.2
    min_replicas: int = 1
    max_replicas: int = 20
    seed: int = 1

    @property
    def duration(self) -> float:
        return self.warmup_s + self.steady_s + self.surge_s + self.after_s

    @property
    def surge_start(self) -> float:
        return self.warmup_s + self.steady_s

    def measured(self, t: float) -> bool:
        return t >= self.warmup_s

    def rate(self, t: float) -> float:
        start, end = self.surge_start, self.surge_start + self.surge_s
        high = self.base_rate * self.surge
        if t < start or t >= end + self.ramp_s:
            return self.base_rate
        if t < start + self.ramp_s:
            return self.base_rate + (high - self.base_rate) * (t - start) / self.ramp_s
        if t < end:
            return high
        return high - (high - self.base_rate) * (t - end) / self.ramp_s

    def in_surge(self, t: float) -> bool:
        return self.surge_start <= t < self.surge_start + self.surge_s


@dataclass
class Replica:
    """One engine pod: slots, a FIFO waiting queue, and the engine's cumulative counters."""

    name: str
    created: float
    ready_at: float
    busy: int = 0
    queue: deque = field(default_factory=deque)  # arrival times
    qsum: float = 0.0
    qcount: int = 0
    terminating: bool = False
    ended: float | None = None
    ring: SnapshotRing = field(default_factory=SnapshotRing)

    def ready(self, t: float) -> bool:
        return t >= self.ready_at and not self.terminating

    def cpu(self, slots: int) -> float:
        """A GPU engine's CPU: the scheduler loop spins whether or not requests wait."""
        return 0.55 + 0.15 * self.busy / slots


# ---- baseline: the Kubernetes HPA algorithm (default behaviour) on a per-pod metric ----------


@dataclass
class HPAState:
    recommendations: list = field(default_factory=list)


def hpa_desired(now: float, current: int, values: list[float], target: float, state: HPAState,
                lo: int, hi: int) -> int:
    """kube-controller-manager's replica calculation: ratio of the pods' mean to the target,
    10% tolerance, scale-up max(4 pods, 100%)/15 s, scale-down 300 s stabilization."""
    if not values:
        return current
    ratio = sum(values) / len(values) / target
    raw = current if abs(ratio - 1) <= 0.1 else math.ceil(len(values) * ratio)
    state.recommendations = [(t, r) for t, r in state.recommendations if now - t < 300] + [(now, raw)]
    if raw > current:
        desired = min(raw, current + max(4, current))
    else:
        desired = max(r for _, r in state.recommendations)
    return max(lo, min(hi, desired))


# ---- the simulation ----------------------------------------------------------------------------


@dataclass
class Outcome:
    """Per-request results and the replica count over time of one run."""

    name: str
    waits: list  # (arrival, wait) per request
    replicas: list  # (t, replicas desired, ready)
    replica_seconds: float

    def share_under(self, target: float, pred) -> float:
        xs = [w for a, w in self.waits if pred(a)]
        return sum(w <= target for w in xs) / max(1, len(xs))

    def p99_ttft(self, prefill: float, pred) -> float:
        xs = sorted(w + prefill for a, w in self.waits if pred(a))
        return xs[min(len(xs) - 1, int(0.99 * len(xs)))] if xs else float("nan")


def simulate(sc: Scenario, policy: str, static: int | None = None, interval: float = 15.0,
             spec: AutoscalingSpec | None = None) -> Outcome:
    """Run one policy over the scenario; `static` fixes the count (policy ignored)."""
    rng = random.Random(sc.seed)
    service_mean = sc.slots / sc.service_rate
    start_n = static or max(sc.min_replicas, math.ceil(sc.base_rate / sc.service_rate / 0.8))
    replicas: list[Replica] = []
    counter = [0]
    events: list = []
    seq = itertools.count()  # tie-breaker: events never compare their payloads

    def push(t: float, prio: int, kind: str, r) -> None:
        heapq.heappush(events, (t, prio, next(seq), kind, r))

    def add(t: float, ready_now: bool) -> None:
        counter[0] += 1
        r = Replica(f"r{counter[0]}", t, t if ready_now else t + sc.startup_s)
        replicas.append(r)
        if not ready_now:
            push(r.ready_at, 1, "ready", r)

    for _ in range(start_n):
        add(0.0, True)
    desired = start_n
    waits: list = []
    timeline: list = []

    def start(r: Replica, t: float, arrival: float) -> None:
        r.busy += 1
        r.qsum += t - arrival
        r.qcount += 1
        waits.append((arrival, t - arrival))
        push(t + rng.expovariate(1 / service_mean), 0, "done", r)

    def scale_to(n: int, t: float) -> None:
        live = [r for r in replicas if not r.terminating]
        for _ in range(n - len(live)):
            add(t, False)
        # Remove starting pods first, then the least busy (what a ReplicaSet roughly does).
        for r in sorted(live, key=lambda r: (r.ready(t), r.busy + len(r.queue)))[: max(0, len(live) - n)]:
            r.terminating = True
            if r.busy == 0 and not r.queue:
                r.ended = t

    # Arrivals: thinning of a Poisson process at the trace's peak rate.
    peak = max(sc.base_rate, sc.base_rate * sc.surge)
    t = 0.0
    while True:
        t += rng.expovariate(peak)
        if t >= sc.duration:
            break
        if rng.random() < sc.rate(t) / peak:
            push(t, 2, "arrive", None)
    if static is None:
        for k in range(1, int(sc.duration / interval)):
            push(k * interval, 3, "tick", None)

    qw_policy = Policy.from_spec(spec or AutoscalingSpec(
        enabled=True, min_replicas=sc.min_replicas, max_replicas=sc.max_replicas,
        target_queue_wait_seconds=sc.target_s, interval_seconds=int(interval)))
    qw_window = (spec or AutoscalingSpec()).metric_window_seconds
    history, hpa = History(), HPAState()

    while events:
        t, _, _, kind, r = heapq.heappop(events)
        if kind == "arrive":
            ready = [x for x in replicas if x.ready(t)]
            target = rng.choice(ready)
            if target.busy < sc.slots:
                start(target, t, t)
            else:
                target.queue.append(t)
        elif kind == "done":
            r.busy -= 1
            if r.queue:
                start(r, t, r.queue.popleft())
            elif r.terminating and r.busy == 0:
                r.ended = t
        elif kind == "tick":
            live = [x for x in replicas if not x.terminating]
            ready = [x for x in live if x.ready(t)]
            if policy == "queue-wait":
                samples = []
                for x in live:
                    if not x.ready(t):
                        samples.append(sample_between(x.name, False, None, None))
                        continue
                    snap = EngineSnapshot(t, x.qsum, x.qcount,
                                          oldest_waiting_age=(t - x.queue[0]) if x.queue else 0.0,
                                          waiting=len(x.queue), running=x.busy)
                    samples.append(sample_between(x.name, True, x.ring.add(snap, qw_window), snap))
                result = decide(t, desired, tuple(samples), qw_policy, history)
                history, new = result.history, result.desired
            elif policy == "cpu":
                new = hpa_desired(t, desired, [x.cpu(sc.slots) for x in ready], 0.7, hpa,
                                  sc.min_replicas, sc.max_replicas)
            elif policy == "concurrency":
                new = hpa_desired(t, desired, [x.busy + len(x.queue) for x in ready],
                                  0.8 * sc.slots, hpa, sc.min_replicas, sc.max_replicas)
            else:
                raise ValueError(policy)
            if new != desired:
                desired = new
                scale_to(desired, t)
            if sc.measured(t):
                timeline.append((t, desired, len(ready)))

    end = sc.duration
    replica_seconds = sum(
        max(0.0, (r.ended if r.ended is not None else end) - max(r.created, sc.warmup_s))
        for r in replicas
    )
    # Requests still waiting at the end waited at least until the end.
    for r in replicas:
        waits.extend((a, end - a) for a in r.queue)
    if static is not None:
        timeline = [(sc.warmup_s, static, static), (end, static, static)]
    return Outcome(f"static {static}" if static else policy, waits, timeline, replica_seconds)


@dataclass(frozen=True)
class Summary:
    """One policy's figures, averaged over seeds."""

    name: str
    surge_share: float
    all_share: float
    surge_p99: float
    all_p99: float
    replica_seconds: float
    max_replicas: float


def summarize(sc: Scenario, name: str, outs: list[Outcome]) -> Summary:
    def mean(xs):
        return sum(xs) / len(xs)

    return Summary(
        name,
        mean([o.share_under(sc.target_s, sc.in_surge) for o in outs]),
        mean([o.share_under(sc.target_s, sc.measured) for o in outs]),
        mean([o.p99_ttft(sc.prefill_s, sc.in_surge) for o in outs]),
        mean([o.p99_ttft(sc.prefill_s, sc.measured) for o in outs]),
        mean([o.replica_seconds for o in outs]),
        mean([max(d for _, d, _ in o.replicas) for o in outs]),
    )


def with_seed(sc: Scenario, seed: int) -> Scenario:
    return Scenario(**{**sc.__dict__, "seed": seed})


def best_static(sc: Scenario, seeds: list[int], bar: float = 0.95) -> tuple[int, list[Outcome]]:
    """The smallest fixed replica count that keeps `bar` of the surge's requests under target
    (mean over seeds), starting from the peak load's bare minimum."""
    for n in range(max(1, math.ceil(sc.base_rate * sc.surge / sc.service_rate)), 500):
        outs = [simulate(with_seed(sc, s), "static", static=n) for s in seeds]
        if summarize(sc, "", outs).surge_share >= bar:
            return n, outs
    raise RuntimeError("no static count meets the bar")


def table(rows: list[Summary]) -> str:
    out = [
        "| policy | under target, surge | under target, all | p99 TTFT surge (s) | p99 TTFT all (s) "
        "| replica-seconds | max replicas |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        out.append(
            f"| {r.name} | {100 * r.surge_share:.1f}% | {100 * r.all_share:.1f}% "
            f"| {r.surge_p99:.2f} | {r.all_p99:.2f} | {r.replica_seconds:,.0f} "
            f"| {r.max_replicas:.0f} |"
        )
    return "\n".join(out)


def plot(sc: Scenario, outcomes: list[Outcome], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_load, ax_rep, ax_wait) = plt.subplots(3, 1, figsize=(10, 9), sharex=True)
    ts = [sc.warmup_s + i * 5.0 for i in range(int((sc.duration - sc.warmup_s) / 5))]
    ax_load.plot(ts, [sc.rate(t) for t in ts], color="black")
    ax_load.set_ylabel("arrivals (req/s)")
    ax_load.set_title(f"Load surge x{sc.surge:g}; {sc.service_rate:.2f} req/s per replica (measured), "
                      f"{sc.startup_s:g}s start-up")
    for o in outcomes:
        xs = [t for t, _, _ in o.replicas]
        ax_rep.step(xs, [d for _, d, _ in o.replicas], where="post", label=o.name)
        # Share of requests under target per 30 s bucket of arrival time.
        buckets: dict[int, list] = {}
        for a, w in filter(lambda aw: sc.measured(aw[0]), o.waits):
            buckets.setdefault(int(a // 30), []).append(w <= sc.target_s)
        keys = sorted(buckets)
        ax_wait.plot([k * 30 for k in keys], [100 * sum(buckets[k]) / len(buckets[k]) for k in keys],
                     label=o.name)
    ax_rep.set_ylabel("replicas (desired)")
    ax_rep.legend(loc="upper left")
    ax_wait.set_ylabel(f"% under {sc.target_s:g}s queue wait")
    ax_wait.set_xlabel("time (s)")
    ax_wait.set_ylim(0, 102)
    for ax in (ax_load, ax_rep, ax_wait):
        ax.axvspan(sc.surge_start, sc.surge_start + sc.surge_s, color="orange", alpha=0.08)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--serving-json", default=str(SERVING_RESULTS),
                    help="the serving benchmark's figures, for the measured service rate and slots")
    ap.add_argument("--service-rate", type=float, default=None,
                    help="req/s per replica at a full batch (overrides the measured one)")
    ap.add_argument("--slots", type=int, default=None, help="concurrent sequences per replica")
    ap.add_argument("--base-load", type=float, default=2.5,
                    help="load before and after the surge, in replicas' worth of the service rate")
    ap.add_argument("--surge", type=float, default=4.0)
    ap.add_argument("--ramp", type=float, default=120.0, help="seconds from base to surge load")
    ap.add_argument("--startup", type=float, default=30.0, help="seconds for a new replica to be Ready")
    ap.add_argument("--interval", type=float, default=15.0, help="autoscaler/HPA sync period")
    ap.add_argument("--seeds", default="1,2,3", help="comma-separated; figures are means")
    ap.add_argument("--plot", default=None, help="write the PNG here (first seed)")
    args = ap.parse_args(argv)
    seeds = [int(x) for x in args.seeds.split(",")]
    measured = {}
    if Path(args.serving_json).exists():
        measured = json.loads(Path(args.serving_json).read_text()).get("service_rate") or {}
    rate = args.service_rate or measured.get("req_s")
    if rate is None:
        ap.error(f"no measured service rate in {args.serving_json}: run bench/serving.py first "
                 "(see the docstring) or pass --service-rate")
    slots = args.slots or measured.get("slots") or 16
    print(f"service rate {rate:.3f} req/s per replica with {slots} slots "
          f"({'given' if args.service_rate else 'measured: ' + str(measured.get('measured_by'))})")
    sc = Scenario(base_rate=args.base_load * rate, surge=args.surge, ramp_s=args.ramp,
                  service_rate=rate, slots=slots, startup_s=args.startup, seed=seeds[0])
    print(f"scenario: {sc}")
    runs = {p: [simulate(with_seed(sc, s), p, interval=args.interval) for s in seeds]
            for p in ("cpu", "concurrency", "queue-wait")}
    n, static = best_static(sc, seeds)
    runs[f"best static ({n})"] = static
    rows = [summarize(sc, name, outs) for name, outs in runs.items()]
    print(table(rows))
    qw, st = rows[2], rows[3]
    ok = qw.surge_share >= 0.95 and qw.replica_seconds < st.replica_seconds
    print(f"\nbar (queue-wait >= 95% under target in the surge, fewer replica-seconds than the best "
          f"static count): {'MET' if ok else 'NOT MET'} "
          f"({100 * qw.surge_share:.1f}%, {qw.replica_seconds / st.replica_seconds:.2f}x static)")
    if args.plot:
        plot(sc, [outs[0] for outs in runs.values()], args.plot)
        print(f"plot: {args.plot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
