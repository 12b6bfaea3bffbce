"""A real `llmop serve` process with one sequence slot: the waiting queue, its limits and its
signals, then SIGTERM. The tests share one process and run in file order; the last one drains it.

One long request (ignore_eos, 1500 tokens) holds the only slot while others queue behind it;
closing its stream is what lets the queue move, so nothing here depends on how fast the CPU is.
"""

import contextlib
import json
import signal
import threading
import time

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from llmop.serve_process import ServeProcess

QUEUE_TIMEOUT_S = 8


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """`llmop serve --config FILE` plus overriding flags, on a free port."""
    config = tmp_path_factory.mktemp("serve") / "engine.yaml"
    config.write_text(f"dtype: float32\nkv_cache_memory_bytes: {128 << 20}\nmax_model_len: 1024\n"
                      f"max_num_seqs: 4\nmax_waiting_requests: 2\nqueue_timeout_s: {QUEUE_TIMEOUT_S}\n")
    with ServeProcess(["--config", str(config), "--max-num-seqs", "1", "--drain-timeout-s", "120",
                       "--log-level", "warning"], ready_timeout_s=300) as server:
        yield server.proc, server.url


def gauges(url) -> dict[str, float]:
    text = httpx.get(url + "/metrics").text
    return {s.name + "".join(f"{{{v}}}" for k, v in sorted(s.labels.items()) if k != "model"): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def wait_for(url, name, target):
    for _ in range(1200):
        if gauges(url)[name] == target:
            return
        time.sleep(0.05)
    raise AssertionError(f"{name} never reached {target}")


@contextlib.contextmanager
def slot_holder(url):
    """A stream holding the only slot, already running (its first token arrived)."""
    body = {"prompt": "Count: 1, 2, 3,", "max_tokens": 1000, "ignore_eos": True, "stream": True}
    with httpx.Client(timeout=120) as client, client.stream("POST", url + "/v1/completions", json=body) as r:
        assert r.status_code == 200
        lines = r.iter_lines()
        assert next(line for line in lines if line.startswith("data:"))
        yield
    # leaving closes the connection: the server aborts the stream and the slot frees


def in_thread(fn):
    result = {}
    t = threading.Thread(target=lambda: result.setdefault("value", fn()), daemon=True)
    t.start()
    return t, result


def complete(url, **extra):
    return httpx.post(url + "/v1/completions", json={"prompt": "Hi", "max_tokens": 1, **extra}, timeout=120)


def test_queue_gauges_move_while_requests_wait(served):
    _, url = served
    before = gauges(url)
    with slot_holder(url):
        t, waiter = in_thread(lambda: complete(url))
        wait_for(url, "llmop_num_requests_waiting", 1)
        age1 = gauges(url)["llmop_oldest_waiting_request_age_seconds"]
        time.sleep(0.2)
        age2 = gauges(url)["llmop_oldest_waiting_request_age_seconds"]
        assert 0 < age1 < age2  # rises while the queue is stalled, between engine steps too
    t.join(120)
    assert waiter["value"].status_code == 200
    after = gauges(url)
    assert after["llmop_request_queue_time_seconds_count"] - before["llmop_request_queue_time_seconds_count"] == 2
    # the waiter was still waiting at the second scrape, so it queued for longer than age2
    assert after["llmop_request_queue_time_seconds_sum"] - before["llmop_request_queue_time_seconds_sum"] > age2
    assert after["llmop_oldest_waiting_request_age_seconds"] == 0
    assert after["llmop_request_success_total{abort}"] - before["llmop_request_success_total{abort}"] == 1


def test_full_queue_sheds_load_with_429(served):
    _, url = served
    with slot_holder(url):
        waiters = [in_thread(lambda: complete(url)) for _ in range(2)]
        wait_for(url, "llmop_num_requests_waiting", 2)
        r = complete(url)
        assert r.status_code == 429 and int(r.headers["Retry-After"]) >= 1
        assert r.json()["error"]["type"] == "rate_limit_error" and r.json()["error"]["code"] == "queue_full"
        client = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0)
        with pytest.raises(openai.RateLimitError):
            client.completions.create(model="SmolLM2-135M-Instruct", prompt="Hi", max_tokens=1)
    for t, res in waiters:
        t.join(120)
        assert res["value"].status_code == 200
    assert gauges(url)["llmop_request_rejected_total{queue_full}"] == 2


def test_request_past_its_queue_deadline_gets_503(served):
    _, url = served
    with slot_holder(url):
        for stream in (False, True):
            r = complete(url, stream=stream)
            assert r.status_code == 503, r.text
            assert r.json()["error"]["code"] == "queue_timeout"
    m = gauges(url)
    assert m["llmop_request_rejected_total{queue_timeout}"] == 2
    wait_for(url, "llmop_kv_cache_usage_ratio", 0)
    assert complete(url).status_code == 200


def test_sigterm_drains_in_flight_then_exits_0(served):
    proc, url = served
    body = {"prompt": "Count: 1, 2, 3,", "max_tokens": 48, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}
    with httpx.Client(timeout=120) as client, client.stream("POST", url + "/v1/completions", json=body) as r:
        lines = r.iter_lines()
        events = [next(line for line in lines if line.startswith("data:"))]
        proc.send_signal(signal.SIGTERM)
        for _ in range(1200):
            if httpx.get(url + "/ready").status_code == 503:
                break
            time.sleep(0.05)
        assert httpx.get(url + "/ready").status_code == 503
        assert httpx.get(url + "/health").status_code == 200  # alive, just leaving
        refused = complete(url)
        assert refused.status_code == 503 and refused.json()["error"]["code"] == "draining"
        events += [line for line in lines if line.startswith("data:")]
    assert events[-1] == "data: [DONE]"
    chunks = [json.loads(e[5:]) for e in events[:-1]]
    assert chunks[-1]["usage"]["completion_tokens"] == 48
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "length"
    assert proc.wait(120) == 0
