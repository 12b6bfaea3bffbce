"""From an engine's /metrics text to the decision's per-pod samples; pure, no I/O.

The engine exposes a cumulative queue-time histogram; its windowed mean is a ratio of counter
deltas (Δsum / Δcount), so the autoscaler keeps a few snapshots per pod and differences the one at
the window's start with the latest. Counters restart from zero when a pod restarts: a negative delta
means a reset, and the new absolute value is the delta.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from .decision import PodSample

QUEUE_TIME = "llmop_request_queue_time_seconds"
OLDEST_AGE = "llmop_oldest_waiting_request_age_seconds"
WAITING = "llmop_num_requests_waiting"
RUNNING = "llmop_num_requests_running"


@dataclass(frozen=True)
class EngineSnapshot:
    """The engine's queue metrics at one instant, summed over the `model` (and adapter) labels."""

    time: float
    queue_time_sum: float
    queue_time_count: float
    oldest_waiting_age: float | None = None
    waiting: float | None = None
    running: float | None = None


def parse_engine_metrics(text: str, time: float) -> EngineSnapshot | None:
    """Parse Prometheus text; None when the queue-time histogram is absent (not an llmop engine)."""
    sums: dict[str, float] = {}
    gauges: dict[str, list[float]] = {OLDEST_AGE: [], WAITING: [], RUNNING: []}
    seen = False
    for family in text_string_to_metric_families(text):
        seen = seen or family.name == QUEUE_TIME  # declared but empty: an idle engine, not missing
        for sample in family.samples:
            if sample.name in (QUEUE_TIME + "_sum", QUEUE_TIME + "_count"):
                sums[sample.name] = sums.get(sample.name, 0.0) + sample.value
            elif sample.name in gauges:
                gauges[sample.name].append(sample.value)
    if not seen:
        return None
    return EngineSnapshot(
        time=time,
        queue_time_sum=sums.get(QUEUE_TIME + "_sum", 0.0),
        queue_time_count=sums.get(QUEUE_TIME + "_count", 0.0),
        oldest_waiting_age=max(gauges[OLDEST_AGE]) if gauges[OLDEST_AGE] else None,
        waiting=sum(gauges[WAITING]) if gauges[WAITING] else None,
        running=sum(gauges[RUNNING]) if gauges[RUNNING] else None,
    )


def _delta(new: float, old: float) -> float:
    return new if new < old else new - old


def sample_between(name: str, ready: bool, start: EngineSnapshot | None, end: EngineSnapshot | None
                   ) -> PodSample:
    """The decision's sample for one pod from two snapshots (start may be None on first sight)."""
    if end is None:
        return PodSample(name, ready, scraped=False)
    if start is None or start.time >= end.time:
        return PodSample(name, ready, True, oldest_waiting_age=end.oldest_waiting_age,
                         waiting=end.waiting, running=end.running)
    return PodSample(
        name,
        ready,
        True,
        queue_time_sum_delta=_delta(end.queue_time_sum, start.queue_time_sum),
        queue_time_count_delta=_delta(end.queue_time_count, start.queue_time_count),
        window_seconds=end.time - start.time,
        oldest_waiting_age=end.oldest_waiting_age,
        waiting=end.waiting,
        running=end.running,
        waiting_start=start.waiting,
    )


class SnapshotRing:
    """The last few snapshots of one pod, enough to reach back one metric window.

    The only state collection keeps in memory; losing it (operator restart) costs one window of
    histogram means, during which the oldest-waiting age still drives the signal.
    """

    def __init__(self) -> None:
        self._snaps: deque[EngineSnapshot] = deque()

    def add(self, snap: EngineSnapshot, window: float) -> EngineSnapshot | None:
        """Record `snap`; return the newest older snapshot at least `window` old (else the oldest)."""
        while len(self._snaps) >= 2 and snap.time - self._snaps[1].time >= window:
            self._snaps.popleft()
        start = self._snaps[0] if self._snaps else None
        self._snaps.append(snap)
        return start
