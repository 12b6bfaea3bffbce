"""The `pods` metrics source: scrape each engine's /metrics in parallel and window the counters.

Plain stdlib HTTP (urllib) in a small thread pool: the operator image stays lean, and a slow or
dead pod costs one timeout, not a stalled loop. A failed scrape yields an unscraped sample, never a
zero, so the decision holds instead of scaling down on missing data.
"""

from __future__ import annotations

import urllib.request
from concurrent.futures import ThreadPoolExecutor

from .decision import PodSample
from .metrics import SnapshotRing, parse_engine_metrics, sample_between
from .targets import Target


def fetch(url: str, timeout: float) -> str | None:
    """GET `url` and return its body, or None on any failure (refused, timeout, non-2xx)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 (http only)
            return resp.read().decode("utf-8", "replace")
    except (OSError, ValueError):
        return None


def _parse(body: str | None, now: float):
    """A body that is not valid exposition text counts as a failed scrape."""
    if body is None:
        return None
    try:
        return parse_engine_metrics(body, now)
    except ValueError:
        return None


class PodsCollector:
    """Scrapes targets and keeps one snapshot ring per target (the only in-memory state)."""

    def __init__(self, max_workers: int = 16) -> None:
        self._rings: dict[str, SnapshotRing] = {}
        self._max_workers = max_workers

    def collect(self, targets: list[Target], window: float, timeout: float, now: float
                ) -> tuple[PodSample, ...]:
        """One sample per target; only ready targets are scraped (unready ones are not capacity)."""
        ready = [t for t in targets if t.ready]
        with ThreadPoolExecutor(max_workers=max(1, min(self._max_workers, len(ready)))) as pool:
            bodies = dict(zip([t.name for t in ready],
                              pool.map(lambda t: fetch(t.url, timeout), ready)))
        samples = []
        for target in targets:
            body = bodies.get(target.name)
            snap = _parse(body, now)
            start = self._rings.setdefault(target.name, SnapshotRing()).add(snap, window) \
                if snap is not None else None
            samples.append(sample_between(target.name, target.ready, start, snap))
        for gone in set(self._rings) - {t.name for t in targets}:
            del self._rings[gone]
        return tuple(samples)
