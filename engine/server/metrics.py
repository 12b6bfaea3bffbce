"""Prometheus metrics of one server, in its own registry (several apps may share a process).

The names are a contract: the operator's autoscaler reads `llmop_request_queue_time_seconds` and
`llmop_oldest_waiting_request_age_seconds` (see docs/metrics.md). Latencies come from the
engine's monotonic request timestamps, never from the HTTP layer's clock:

- queue time is observed in the engine step that first schedules a request (an `on_step` hook on
  the engine thread), so a request aborted during its prefill still counts;
- per-request latencies and token counts are fed by `RequestTracker` from the outputs the request
  streams;
- engine gauges are read at scrape time from the engine's last stats snapshot; the oldest waiting
  request's age is computed against the scrape-time clock, so it keeps rising while the engine is
  stalled — the real-time queue signal the queue-time histogram cannot give.
"""

from __future__ import annotations

import time
from typing import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from llmop.engine.engine import EngineStats
from llmop.engine.outputs import RequestOutput

_LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                    7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0)
_TOKEN_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000)

FINISH_REASONS = ("stop", "length", "abort")
REJECT_REASONS = ("invalid_request", "invalid_json", "unsupported", "unknown_field", "invalid_grammar",
                  "context_length", "prompt_too_long",
                  "body_too_large", "unknown_model", "queue_full", "queue_timeout", "adapter_unavailable",
                  "draining", "unauthorized", "forbidden", "untrusted_priority")


class _EngineGauges(Collector):
    """Scrape-time gauges from the engine's stats snapshot."""

    def __init__(self, model: str, stats: Callable[[], EngineStats]):
        self.model = model
        self.stats = stats

    def collect(self) -> Iterable[GaugeMetricFamily]:
        s = self.stats()
        now = time.monotonic()
        age = max(0.0, now - s.oldest_waiting_arrival) if s.oldest_waiting_arrival is not None else 0.0
        usage = 1.0 - s.num_free_blocks / s.num_total_blocks if s.num_total_blocks else 0.0
        for name, doc, value in (
            ("llmop_num_requests_waiting", "Requests waiting to be scheduled", s.num_waiting),
            ("llmop_num_requests_running", "Requests in the running batch", s.num_running),
            ("llmop_oldest_waiting_request_age_seconds",
             "Age of the request waiting longest for its first schedule (0 if none)", age),
            ("llmop_kv_cache_usage_ratio", "Fraction of KV cache blocks in use", usage),
            ("llmop_kv_cache_free_blocks", "Free KV cache blocks", s.num_free_blocks),
            ("llmop_kv_cache_total_blocks", "KV cache blocks in the pool", s.num_total_blocks),
        ):
            g = GaugeMetricFamily(name, doc, labels=["model"])
            g.add_metric([self.model], value)
            yield g
        pre = CounterMetricFamily("llmop_num_preemptions", "Requests preempted (recomputed later)",
                                  labels=["model"])
        pre.add_metric([self.model], s.num_preemptions)
        yield pre
        for name, doc, value in (
            ("llmop_prefix_cache_queries", "Prompt tokens looked up in the prefix cache (at first admission)",
             s.prefix_cache_queries),
            ("llmop_prefix_cache_hits", "Prompt tokens found there, so not computed", s.prefix_cache_hits),
            ("llmop_spec_decode_drafts", "Speculative decoding: a request verifying proposed tokens in a step",
             s.spec_drafts),
            ("llmop_spec_decode_draft_tokens", "Speculative decoding: proposed tokens verified", s.spec_draft_tokens),
            ("llmop_spec_decode_accepted_tokens", "Speculative decoding: proposed tokens accepted",
             s.spec_accepted_tokens),
        ):
            c = CounterMetricFamily(name, doc, labels=["model"])
            c.add_metric([self.model], value)
            yield c
        by_position = CounterMetricFamily("llmop_spec_decode_accepted_tokens_per_position",
                                          "Speculative decoding: proposals accepted at each position (0 = first)",
                                          labels=["model", "position"])
        for j, value in enumerate(s.spec_accepted_by_position):
            by_position.add_metric([self.model, str(j)], value)
        yield by_position


class ServerMetrics:
    """All metrics of one server. `model` is the base model's served name (the `model` label)."""

    def __init__(self, model: str, stats: Callable[[], EngineStats]):
        self.model = model
        self.registry = CollectorRegistry()
        r = self.registry
        hist = lambda name, doc, buckets: Histogram(name, doc, ["model"], registry=r, buckets=buckets)  # noqa: E731
        self.queue_time = hist("llmop_request_queue_time_seconds", "Arrival to first scheduled", _LATENCY_BUCKETS)
        self.ttft = hist("llmop_time_to_first_token_seconds", "Arrival to first token", _LATENCY_BUCKETS)
        self.itl = hist("llmop_inter_token_latency_seconds", "Between consecutive tokens of a request",
                        _LATENCY_BUCKETS)
        self.e2e = hist("llmop_e2e_request_latency_seconds", "Arrival to finish", _LATENCY_BUCKETS)
        self.prompt_hist = hist("llmop_request_prompt_tokens", "Prompt tokens per finished request", _TOKEN_BUCKETS)
        self.gen_hist = hist("llmop_request_generation_tokens", "Generated tokens per finished request",
                             _TOKEN_BUCKETS)
        self.prompt_tokens = Counter("llmop_prompt_tokens", "Prompt tokens prefilled", ["model"], registry=r)
        self.gen_tokens = Counter("llmop_generation_tokens", "Tokens generated", ["model"], registry=r)
        self.success = Counter("llmop_request_success", "Requests finished, by finish reason",
                               ["model", "finish_reason"], registry=r)
        self.rejected = Counter("llmop_request_rejected", "Requests refused, by reason", ["model", "reason"],
                                registry=r)
        for family in (self.queue_time, self.ttft, self.itl, self.e2e, self.prompt_hist, self.gen_hist,
                       self.prompt_tokens, self.gen_tokens):
            family.labels(model)  # every series exists (at 0) from the first scrape
        for reason in FINISH_REASONS:
            self.success.labels(model, reason)
        for reason in REJECT_REASONS:
            self.rejected.labels(model, reason)
        r.register(_EngineGauges(model, stats))
        self._last_step_end = 0.0

    def reject(self, reason: str) -> None:
        self.rejected.labels(self.model, reason if reason in REJECT_REASONS else "invalid_request").inc()

    def on_step(self, engine, outputs: list[RequestOutput]) -> None:
        """Engine-thread hook: observe queue time for requests first scheduled in this step."""
        since, self._last_step_end = self._last_step_end, time.monotonic()
        seen: set[str] = set()
        for r in engine.scheduler.running:
            t = r.times.first_scheduled
            if t is not None and t > since:
                seen.add(r.request_id)
                self.queue_time.labels(self.model).observe(t - r.times.arrival)
        for out in outputs:  # requests finished in the very step that scheduled them
            t = out.first_scheduled_time
            if out.finished and out.request_id not in seen and t is not None and t > since:
                self.queue_time.labels(self.model).observe(t - out.arrival_time)

    def tracker(self, model: str | None = None) -> "RequestTracker":
        return RequestTracker(self, model or self.model)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class RequestTracker:
    """Feeds one engine request's outputs into the metrics; `close()` when the stream ends."""

    def __init__(self, metrics: ServerMetrics, model: str):
        self.m = metrics
        self.model = model
        self._last_token_time: float | None = None
        self._done = False
        self._started = False

    def observe(self, out: RequestOutput) -> None:
        m, model = self.m, self.model
        if out.error is not None:  # rejected after queueing (queue timeout, adapter): counted as a rejection
            self._done = True
            return
        if out.new_token_ids:
            if not self._started:
                self._started = True
                m.prompt_tokens.labels(model).inc(out.num_prompt_tokens)
                if out.first_token_time is not None:
                    m.ttft.labels(model).observe(out.first_token_time - out.arrival_time)
            m.gen_tokens.labels(model).inc(len(out.new_token_ids))
            if out.token_time is not None:
                if self._last_token_time is not None:
                    m.itl.labels(model).observe(out.token_time - self._last_token_time)
                self._last_token_time = out.token_time
        if out.finished and not self._done:
            self._done = True
            reason = out.finish_reason if out.finish_reason in FINISH_REASONS else "abort"
            m.success.labels(model, reason).inc()
            if reason != "abort" and out.finish_time is not None:
                m.e2e.labels(model).observe(out.finish_time - out.arrival_time)
                m.prompt_hist.labels(model).observe(out.num_prompt_tokens)
                m.gen_hist.labels(model).observe(out.num_output_tokens)

    def close(self) -> None:
        """The consumer went away before the request finished: it was aborted."""
        if not self._done:
            self._done = True
            self.m.success.labels(self.model, "abort").inc()
