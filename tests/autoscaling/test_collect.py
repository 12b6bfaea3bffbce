"""Collection over real HTTP: a prometheus_client exposition served on localhost, scraped twice."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from prometheus_client import CollectorRegistry, Gauge, Histogram, generate_latest

from llmop.operator.autoscaling.collect import PodsCollector
from llmop.operator.autoscaling.prometheus import parse_vector, queries, samples_from_vectors
from llmop.operator.autoscaling.targets import Target, pod_targets, static_targets
from llmop.serve_process import free_port


class Engine:
    """An HTTP server exposing the engine's queue metrics from a live prometheus_client registry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.queue = Histogram("llmop_request_queue_time_seconds", "q", ["model"],
                               registry=self.registry)
        self.age = Gauge("llmop_oldest_waiting_request_age_seconds", "a", ["model"],
                         registry=self.registry)
        registry = self.registry

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                body = generate_latest(registry)
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def engine():
    e = Engine()
    yield e
    e.close()


def closed_port_url() -> str:
    return f"http://127.0.0.1:{free_port()}"


def test_two_scrapes_give_the_windowed_mean(engine):
    collector = PodsCollector()
    targets = static_targets([engine.url], "/metrics")
    engine.queue.labels("m").observe(5.0)  # before the window: must not count
    first = collector.collect(targets, window=30, timeout=2, now=0.0)
    assert first[0].scraped and first[0].mean_queue_wait is None
    for w in (0.1, 0.3):
        engine.queue.labels("m").observe(w)
    engine.age.labels("m").set(0.05)
    (second,) = collector.collect(targets, window=30, timeout=2, now=30.0)
    assert second.mean_queue_wait == pytest.approx(0.2)
    assert second.signal == pytest.approx(0.2)


def test_dead_and_unready_targets_are_unscraped(engine):
    targets = static_targets([engine.url, closed_port_url()], "/metrics") + [
        Target("starting", engine.url + "/metrics", ready=False)
    ]
    live, dead, starting = PodsCollector().collect(targets, window=30, timeout=1, now=0.0)
    assert live.scraped and not dead.scraped and not starting.scraped
    assert dead.ready and not starting.ready


def test_pod_targets_follow_readiness_and_skip_terminating():
    def pod(name, ready, ip="10.0.0.1", deleting=False, port=9000):
        meta = {"name": name, **({"deletionTimestamp": "2026-01-01T00:00:00Z"} if deleting else {})}
        cond = [{"type": "Ready", "status": "True" if ready else "False"}]
        spec = {"containers": [{"name": "engine", "ports": [{"name": "admin", "containerPort": 8001},
                                                            {"name": "http", "containerPort": port}]}]}
        return {"metadata": meta, "spec": spec, "status": {"phase": "Running", "podIP": ip, "conditions": cond}}

    pods = [pod("b", False), pod("a", True), pod("c", True, deleting=True)]
    assert pod_targets(pods, None, "/metrics") == [Target("a", "http://10.0.0.1:9000/metrics", True),
                                                  Target("b", "http://10.0.0.1:9000/metrics", False)]
    # An explicit metrics.port wins over the pod's engine port.
    assert [t.url for t in pod_targets(pods, 8000, "/m")] == ["http://10.0.0.1:8000/m"] * 2


def test_prometheus_vectors_join_with_targets():
    def vector(values):
        return json.dumps({"status": "success", "data": {"resultType": "vector", "result": [
            {"metric": {"pod": k}, "value": [0, str(v)]} for k, v in values.items()]}})

    vectors = {
        "sum": parse_vector(vector({"a": 6.0}), "pod"),
        "count": parse_vector(vector({"a": 20.0}), "pod"),
        "age": parse_vector(vector({"a": 0.1}), "pod"),
        "waiting": parse_vector(vector({"a": 2}), "pod"),
        "running": parse_vector(vector({}), "pod"),
        "waiting_start": parse_vector(vector({"a": 5}), "pod"),
    }
    a, b = samples_from_vectors([Target("a", "", True), Target("b", "", True)], vectors, 60)
    assert a.mean_queue_wait == pytest.approx(0.3) and a.admission_rate == pytest.approx(20 / 60)
    # The waiting gauge a window ago: without it the demand forecast and capacity learning were off.
    assert a.waiting_start == 5 and a.saturated_throughout
    assert a.demand_rate == pytest.approx(max(0.0, 20 / 60 + (2 - 5) / 60) + 2 / (2 * 60))
    assert not b.scraped


def test_queries_are_windowed_increases_by_pod():
    q = queries('pod=~"a|b"', "pod", 60)
    assert q["count"] == ('sum by (pod) (increase(llmop_request_queue_time_seconds_count'
                          '{pod=~"a|b"}[60s]))')
    assert q["age"].startswith("max by (pod) (llmop_oldest_waiting_request_age_seconds")
    assert q["waiting_start"] == 'sum by (pod) (llmop_num_requests_waiting{pod=~"a|b"} offset 60s)'
