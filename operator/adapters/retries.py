"""Failed adapter loads are retried with exponential backoff, per pod and adapter.

A load can fail for reasons that heal without anyone touching the LLMAdapter: the tenant copies
the files onto the claim after creating it, a volume is slow, the pod was busy, a rollout had not
mounted the claim yet. So placement retries every failed load, but never more often than the
backoff allows (10 s, doubling, at most 10 min), so a corrupt adapter costs one read every 10 min,
not one every pass. A changed source or `pinned` starts over at once; a load that works forgets the
failures. The book is plain data; the placer keeps one per pod and updates it after each pass.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass

from llmop.operator.adapters.binding import ManifestEntry
from llmop.operator.adapters.pod_sync import AdapterOnPod
from llmop.operator.api.llmadapter import PodState

BASE_DELAY_S = 10.0
MAX_DELAY_S = 600.0


def backoff_s(failures: int) -> float:
    """The wait after `failures` failed loads in a row (the first retry 10 s after the first failure)."""
    return min(MAX_DELAY_S, BASE_DELAY_S * 2 ** max(0, failures - 1))


@dataclass(frozen=True)
class Failure:
    """The failed loads of one adapter on one pod, for the source and pinned they were tried with."""

    source: str
    pinned: bool
    failures: int
    at: float  # monotonic time of the last failure
    outcome: AdapterOnPod

    def matches(self, entry: ManifestEntry) -> bool:
        return (self.source, self.pinned) == (entry.source, entry.pinned)

    def due(self, now: float) -> bool:
        return now >= self.at + backoff_s(self.failures)

    def report(self) -> AdapterOnPod:
        """The state to report while the retry waits: the failure, and when it is tried again."""
        return AdapterOnPod(self.outcome.state, f"{self.outcome.message} (failed {self.failures}x; "
                                                f"retried {backoff_s(self.failures):.0f} s after the last try)")


FailureBook = Mapping[str, Failure]


def held(book: FailureBook, desired: Mapping[str, ManifestEntry], now: float) -> dict[str, AdapterOnPod]:
    """Adapters not to try on this pass (their retry is not due), with the state to report."""
    return {name: f.report() for name, f in book.items()
            if name in desired and f.matches(desired[name]) and not f.due(now)}  # fmt: skip


def after_pass(book: FailureBook, desired: Mapping[str, ManifestEntry], states: Mapping[str, AdapterOnPod],
               tried: Set[str], now: float) -> dict[str, Failure]:
    """The book after a pass that tried to load `tried` and left the bound adapters in `states`."""
    out: dict[str, Failure] = {}
    for name, entry in desired.items():
        state, prev = states.get(name), book.get(name)
        prev = prev if prev is not None and prev.matches(entry) else None
        if state is None or state.state is PodState.LOADED:
            continue
        if name in tried:
            out[name] = Failure(entry.source, entry.pinned, (prev.failures if prev else 0) + 1, now, state)
        elif prev is not None:
            out[name] = prev
    return out
