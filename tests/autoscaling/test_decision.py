"""The decision, by table: each row is a situation an autoscaler for LLM serving must get right."""

from __future__ import annotations

import pytest

from llmop.operator.autoscaling.decision import History, PodSample, Policy, Rules, decide
from llmop.operator.autoscaling.spec import AutoscalingSpec

WINDOW = 60.0
POLICY = Policy(min_replicas=1, max_replicas=10, target=0.2, tolerance=0.1,
                up=Rules(0, 4, 100, 15), down=Rules(300, 1, 10, 60))


def pod(name="p", mean=None, age=0.0, rate=5.0, ready=True, scraped=True, waiting=None,
        waiting_start=None) -> PodSample:
    """A pod that admitted `rate` req/s over the window at mean queue wait `mean` (None: none);
    `waiting`/`waiting_start` (queue length now / at the window's start) give it a demand."""
    count = 0.0 if mean is None else rate * WINDOW
    return PodSample(name, ready, scraped,
                     queue_time_sum_delta=(mean or 0.0) * count if scraped else None,
                     queue_time_count_delta=count if scraped else None,
                     window_seconds=WINDOW if scraped else None,
                     oldest_waiting_age=age if scraped else None,
                     waiting=waiting, waiting_start=waiting_start)


def pods(*means, **kw):
    return tuple(pod(f"p{i}", m, **kw) for i, m in enumerate(means))


def old_history(*recs) -> History:
    """History with recommendations long ago enough that no period or window blocks."""
    return History(recommendations=tuple(recs), last_scale_up=-1e9, last_scale_down=-1e9, since=-1e9)


@pytest.mark.parametrize(
    "case, current, samples, history, desired, reason",
    [
        ("step up: 2x the target on 2 pods", 2, pods(0.4, 0.4), History(), 4, "ScaleUp"),
        ("step up is rate-limited to max(+4, +100%)", 2, pods(2.0, 2.0), History(), 6, "ScaleUp"),
        ("big fleets step up by +100%", 5, pods(*[2.0] * 5), History(), 10, "ScaleUp"),
        ("at max: hold", 10, pods(*[1.0] * 10), History(), 10, "HoldAtMaxReplicas"),
        ("within tolerance: hold", 4, pods(0.21, 0.19, 0.2, 0.22), History(), 4, "HoldTolerance"),
        ("step down waits for the down window", 4, pods(0.0, 0.0, 0.0, 0.0), History(), 4,
         "HoldStabilization"),
        ("step down after a quiet window, one at a time", 4, pods(0.0, 0.0, 0.0, 0.0),
         old_history((-290.0, 1), (-150.0, 1)), 3, "ScaleDown"),
        ("step down blocked by a busy recommendation in the window", 4, pods(0.0, 0.0, 0.0, 0.0),
         old_history((-290.0, 1), (-100.0, 5)), 4, "HoldStabilization"),
        ("never below minReplicas", 1, pods(0.0), old_history((-290.0, 1)), 1, "HoldAtMinReplicas"),
        ("below min is raised whatever the metrics", 0, (), History(), 1, "BelowMinReplicas"),
        ("above max is lowered whatever the metrics", 12, (), History(), 10, "AboveMaxReplicas"),
        ("no ready pod: hold", 3, pods(1.0, 1.0, ready=False), History(), 3, "NoReadyPods"),
        ("all scrapes missing: hold, not zero", 3, pods(0.0, 0.0, 0.0, scraped=False),
         old_history((-290.0, 1)), 3, "MetricsMissing"),
        ("stalled queue, no completions: the oldest age scales up", 2,
         (pod("a", None, age=0.5), pod("b", None, age=0.5)), History(), 5, "ScaleUp"),
        ("one saturated pod among idle ones: fleet mean within reach, hold", 4,
         pods(0.8, 0.0, 0.0, 0.0), History(), 4, "HoldTolerance"),
        ("one stalled pod far past target among idle ones: scale up", 4,
         (pod("hot", 0.5, age=8.0),) + pods(0.0, 0.0, 0.0), History(), 8, "ScaleUp"),
        # 6 pods x 3 req/s = 18 req/s; at 70% of 5 req/s a pod, 18 / 3.5 -> 6 pods still needed.
        ("scale-down floored at the learned capacity", 6,
         pods(*[0.0] * 6, rate=3.0, waiting=0, waiting_start=0),
         History(((-290.0, 1),), -1e9, -1e9, capacity_per_pod=5.0, since=-1e9), 6, "HoldCapacityFloor"),
        # No queue yet, but 4 x 4.5 = 18 req/s needs 6 pods at 70% of 4.3 req/s: ahead of the queue.
        ("demand past the learned capacity scales up before the queue forms", 4,
         pods(0.0, 0.0, 0.0, 0.0, rate=4.5, waiting=0, waiting_start=0),
         History(capacity_per_pod=4.3), 6, "ScaleUp"),
    ],
)
def test_decision_table(case, current, samples, history, desired, reason):
    result = decide(0.0, current, samples, POLICY, history)
    assert (result.desired, result.reason) == (desired, reason), f"{case}: {result.message}"


def test_missing_pod_does_not_block_scale_up_but_blocks_scale_down():
    up = decide(0.0, 3, pods(1.0, 1.0) + (pod("gone", scraped=False),), POLICY, History())
    assert up.reason == "ScaleUp" and up.missing == ("gone",)
    down = decide(0.0, 3, pods(0.0, 0.0) + (pod("gone", scraped=False),), POLICY,
                  old_history((-290.0, 1)))
    assert (down.desired, down.reason) == (3, "HoldPodsUnmeasured")


def test_starting_pods_are_not_capacity():
    # 2 ready pods at 3x target and 2 still starting: 2 x 3 = 6 needed, 4 exist -> scale up.
    samples = pods(0.6, 0.6) + (pod("new1", ready=False), pod("new2", ready=False))
    assert decide(0.0, 4, samples, POLICY, History()).desired == 6


def test_scale_up_waits_for_its_period():
    history = History(last_scale_up=-5.0)
    result = decide(0.0, 2, pods(1.0, 1.0), POLICY, history)
    assert (result.desired, result.reason) == (2, "HoldRateLimited")


def test_capacity_is_learned_from_pods_saturated_all_window():
    # Queue non-empty at both ends of the window: admission rate = capacity, even if lower.
    result = decide(0.0, 2, pods(1.0, 1.0, rate=7.0, waiting=9, waiting_start=5), POLICY,
                    History(capacity_per_pod=9.0))
    assert result.history.capacity_per_pod == pytest.approx(7.0)
    # Saturated only now (empty at the start): not a capacity measurement, estimate kept.
    partial = decide(0.0, 2, pods(1.0, 1.0, rate=3.0, waiting=9, waiting_start=0), POLICY, History())
    assert partial.history.capacity_per_pod is None
    # Unsaturated pods admitting more than the estimate raise it.
    relaxed = decide(0.0, 2, pods(0.0, 0.0, rate=11.0), POLICY, History(capacity_per_pod=9.0))
    assert relaxed.history.capacity_per_pod == pytest.approx(11.0)


def test_backlog_does_not_overshoot_the_scale_up():
    """12 s waits on 4 pods admitting 4 req/s each while 120 piled up in a minute on each: the wait
    ratio says 240 pods; demand = admitted 16 + growth 8 + backlog drain 4 = 28 req/s at 70% of
    4 req/s a pod says 10."""
    samples = pods(*[10.0] * 4, age=12.0, rate=4.0, waiting=120, waiting_start=0)
    result = decide(0.0, 4, samples, Policy(1, 100, up=Rules(0, 100, 1000, 15)), History())
    assert (result.desired, result.reason) == (10, "ScaleUp"), result.message


def test_rising_demand_is_forecast_one_startup_ahead():
    """Demand rising 0.1 req/s per second: at 60 s start-up, 6 req/s more than now."""
    policy = Policy(1, 20, pod_startup_seconds=60.0)
    history, current = History(capacity_per_pod=5.0), 4
    for t in range(0, 61, 15):
        rate = 2.0 + 0.025 * t  # per pod: 8 req/s in total at t=0, 14 at t=60
        result = decide(float(t), current, pods(*[0.0] * 4, rate=rate, waiting=0, waiting_start=0),
                        policy, history)
        history = result.history
    # Now 14 req/s needs ceil(14 / 3.5) = 4 pods; forecast 20 req/s needs 6.
    assert result.desired == 6, result.message


def test_noise_around_target_never_moves_replicas():
    """A steady load whose signal wanders inside the band: 100 ticks, not one change."""
    history, current = History(), 5
    noise = [0.185, 0.215, 0.2, 0.19, 0.21, 0.205, 0.195, 0.182, 0.218]
    for tick in range(100):
        means = [noise[(tick + i) % len(noise)] for i in range(current)]
        result = decide(tick * 15.0, current, pods(*means), POLICY, history)
        history, current = result.history, result.desired
    assert current == 5


def test_noise_spikes_cannot_shrink_through_the_down_window():
    """Quiet ticks with a spike every 4 minutes: the 5-minute down window keeps replicas."""
    history, current = History(), 4
    for tick in range(60):
        spike = tick % 16 == 0
        result = decide(tick * 15.0, current, pods(*[0.2 if spike else 0.05] * current), POLICY,
                        history)
        history, current = result.history, result.desired
        assert current == 4, result.message


def test_quiet_load_steps_down_once_per_period_to_min():
    history, current, seen = History(), 4, []
    for tick in range(200):
        result = decide(tick * 15.0, current, pods(*[0.0] * current), POLICY, history)
        history, current = result.history, result.desired
        seen.append(current)
    assert seen[-1] == 1 and seen[19] == 4  # nothing before a full 300 s window
    assert all(a - b in (0, 1) for a, b in zip(seen, seen[1:]))


def test_history_prunes_to_the_longest_window():
    history = History()
    for tick in range(100):
        history = decide(tick * 15.0, 4, pods(0.2, 0.2, 0.2, 0.2), POLICY, history).history
    assert len(history.recommendations) <= 300 / 15 + 1


def test_policy_from_spec_matches_the_defaults():
    policy = Policy.from_spec(AutoscalingSpec())
    assert policy.target == 0.2 and policy.down.window_seconds > policy.up.window_seconds
