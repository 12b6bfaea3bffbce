"""Parsing the engine's metrics: real prometheus_client exposition in, decision samples out."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Gauge, Histogram, generate_latest

from llmop.operator.autoscaling.metrics import (
    EngineSnapshot, SnapshotRing, parse_engine_metrics, sample_between,
)


def engine_registry(waits: list[float], oldest: float, waiting: int, models=("m",)) -> bytes:
    """The exposition an engine with these queue waits would serve, written by prometheus_client."""
    reg = CollectorRegistry()
    hist = Histogram("llmop_request_queue_time_seconds", "queue", ["model"], registry=reg)
    age = Gauge("llmop_oldest_waiting_request_age_seconds", "age", ["model"], registry=reg)
    wait = Gauge("llmop_num_requests_waiting", "waiting", ["model"], registry=reg)
    run = Gauge("llmop_num_requests_running", "running", ["model"], registry=reg)
    Histogram("llmop_time_to_first_token_seconds", "ttft", ["model"], registry=reg).labels("m")
    for model in models:
        for w in waits:
            hist.labels(model).observe(w)
        age.labels(model).set(oldest)
        wait.labels(model).set(waiting)
        run.labels(model).set(3)
    return generate_latest(reg)


def test_parses_sum_count_and_gauges():
    text = engine_registry([0.1, 0.3, 0.5], oldest=0.7, waiting=4).decode()
    snap = parse_engine_metrics(text, time=10.0)
    assert snap.queue_time_count == 3
    assert snap.queue_time_sum == pytest.approx(0.9)
    assert (snap.oldest_waiting_age, snap.waiting, snap.running) == (0.7, 4, 3)


def test_labels_are_summed_and_the_oldest_age_is_the_max():
    text = engine_registry([0.2], oldest=1.5, waiting=2, models=("a", "b")).decode()
    snap = parse_engine_metrics(text, time=0.0)
    assert (snap.queue_time_count, snap.waiting, snap.oldest_waiting_age) == (2, 4, 1.5)


def test_not_an_engine():
    assert parse_engine_metrics("# nothing here\nup 1\n", 0.0) is None


def test_window_mean_from_counter_deltas():
    a = parse_engine_metrics(engine_registry([0.1] * 10, 0.0, 0).decode(), time=0.0)
    b = parse_engine_metrics(engine_registry([0.1] * 10 + [0.5] * 20, 0.6, 5).decode(), time=60.0)
    sample = sample_between("p", True, a, b)
    assert sample.mean_queue_wait == pytest.approx(0.5)
    assert sample.admission_rate == pytest.approx(20 / 60)
    assert sample.signal == pytest.approx(0.6)  # the oldest waiting request is older than the mean


def test_counter_reset_uses_the_new_value():
    old = EngineSnapshot(0.0, queue_time_sum=100.0, queue_time_count=1000.0)
    new = EngineSnapshot(30.0, queue_time_sum=2.0, queue_time_count=4.0)
    assert sample_between("p", True, old, new).mean_queue_wait == pytest.approx(0.5)


def test_missing_scrape_is_not_zero():
    sample = sample_between("p", True, EngineSnapshot(0.0, 0.0, 0.0), None)
    assert not sample.scraped and sample.signal is None


def test_ring_reaches_back_one_window():
    ring = SnapshotRing()
    times = range(0, 300, 15)
    starts = [ring.add(EngineSnapshot(t, 0.0, 0.0), window=60.0) for t in times]
    assert starts[0] is None and starts[1].time == 0
    assert {t - s.time for t, s in zip(times[4:], starts[4:])} == {60}


def test_an_engine_that_never_served_is_idle_not_missing():
    reg = CollectorRegistry()
    Histogram("llmop_request_queue_time_seconds", "queue", ["model"], registry=reg)
    snap = parse_engine_metrics(generate_latest(reg).decode(), time=0.0)
    assert snap is not None and snap.queue_time_count == 0
