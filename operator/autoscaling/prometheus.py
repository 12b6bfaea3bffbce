"""The `prometheus` metrics source: the same per-pod samples, read from a Prometheus server.

Prometheus already keeps the counters' history, so the window is PromQL's `increase()` over
`metric_window_seconds`. Readiness still comes from the pods (Prometheus does not know it); a pod
with no series is unscraped, not idle. Query building and response parsing are pure.
"""

from __future__ import annotations

import json
import re
import urllib.parse
import urllib.request

from .decision import PodSample
from .metrics import OLDEST_AGE, QUEUE_TIME, RUNNING, WAITING
from .targets import Target


def default_selector(pod_label: str, names: list[str]) -> str:
    """Match exactly these pods (or host:port instances) by their `pod_label`."""
    # re.escape's backslashes must themselves be escaped inside a PromQL string literal.
    alternatives = "|".join(re.escape(n).replace("\\", "\\\\") for n in sorted(names)) or "^$"
    return f'{pod_label}=~"{alternatives}"'


def queries(selector: str, pod_label: str, window: int) -> dict[str, str]:
    """The instant queries, each `sum`/`max by (pod_label)`; `waiting_start` is the waiting gauge
    one window ago (`offset`), which capacity learning and the demand forecast need."""
    sel = "{" + selector + "}"
    by = f"by ({pod_label})"
    return {
        "sum": f"sum {by} (increase({QUEUE_TIME}_sum{sel}[{window}s]))",
        "count": f"sum {by} (increase({QUEUE_TIME}_count{sel}[{window}s]))",
        "age": f"max {by} ({OLDEST_AGE}{sel})",
        "waiting": f"sum {by} ({WAITING}{sel})",
        "waiting_start": f"sum {by} ({WAITING}{sel} offset {window}s)",
        "running": f"sum {by} ({RUNNING}{sel})",
    }


def parse_vector(body: str, pod_label: str) -> dict[str, float]:
    """An instant-vector response of /api/v1/query as {label value: value}."""
    doc = json.loads(body)
    if doc.get("status") != "success" or doc["data"]["resultType"] != "vector":
        raise ValueError(f"unexpected Prometheus response: {body[:200]}")
    return {
        r["metric"].get(pod_label, ""): float(r["value"][1]) for r in doc["data"]["result"]
    }


def samples_from_vectors(targets: list[Target], vectors: dict[str, dict[str, float]],
                         window: float) -> tuple[PodSample, ...]:
    """Join the query results with the targets by name; a target without series is unscraped."""
    out = []
    for t in targets:
        if not t.ready or t.name not in vectors["count"]:
            out.append(PodSample(t.name, t.ready, scraped=False))
            continue
        out.append(PodSample(
            t.name, True, True,
            queue_time_sum_delta=vectors["sum"].get(t.name, 0.0),
            queue_time_count_delta=vectors["count"][t.name],
            window_seconds=window,
            oldest_waiting_age=vectors["age"].get(t.name),
            waiting=vectors["waiting"].get(t.name),
            waiting_start=vectors.get("waiting_start", {}).get(t.name),
            running=vectors["running"].get(t.name),
        ))
    return tuple(out)


def query(base_url: str, promql: str, timeout: float) -> str:
    """Run one instant query; raises OSError/ValueError on failure."""
    url = base_url.rstrip("/") + "/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310
        return resp.read().decode()


def collect(base_url: str, selector: str, pod_label: str, targets: list[Target], window: int,
            timeout: float) -> tuple[PodSample, ...]:
    """Samples for `targets` from Prometheus; all unscraped when Prometheus cannot answer.

    An empty `selector` matches the targets by name; a user selector replaces that match.
    """
    selector = selector or default_selector(pod_label, [t.name for t in targets])
    try:
        vectors = {k: parse_vector(query(base_url, q, timeout), pod_label)
                   for k, q in queries(selector, pod_label, window).items()}
    except (OSError, ValueError, KeyError):
        return tuple(PodSample(t.name, t.ready, scraped=False) for t in targets)
    return samples_from_vectors(targets, vectors, window)
