"""`llmop serve --tensor-parallel-size 3`: a real server process with three worker processes.

It answers the openai SDK (stream and non-stream), and SIGTERM leaves no worker behind. Killing a
worker turns `/health` unhealthy within seconds, with the reason, so Kubernetes restarts the pod;
requests get 503 instead of hanging.
"""

import contextlib
import os
import signal
import time
from pathlib import Path

import httpx
import openai
import pytest

from llmop.serve_process import ServeProcess

pytestmark = pytest.mark.slow


def workers_of(pid: int) -> list[int]:
    """The engine's worker processes: children of `pid` started by multiprocessing's spawn."""
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            with contextlib.suppress(FileNotFoundError):
                if b"spawn_main" in Path(f"/proc/{child}/cmdline").read_bytes():
                    out.append(int(child))
    return out


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


@contextlib.contextmanager
def serve_tp3():
    with ServeProcess(["--tensor-parallel-size", "3", "--dtype", "float32", "--kv-cache-memory-bytes",
                       str(16 << 20), "--max-model-len", "512", "--log-level", "warning"]) as server:
        workers = workers_of(server.pid)
        assert len(workers) == 3, workers
        yield server.proc, server.url, workers


def test_tp3_server_answers_the_sdk_and_sigterm_leaves_no_worker():
    with serve_tp3() as (proc, url, workers):
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=300)
        model = client.models.list().data[0].id
        r = client.completions.create(model=model, prompt="The capital of France is", max_tokens=12,
                                      temperature=0.0)
        assert r.usage.completion_tokens == 12 and r.choices[0].text.strip()
        chunks = list(client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "Say hello."}], max_tokens=10, stream=True))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text and chunks[-1].choices[0].finish_reason in ("stop", "length")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(120) == 0
    deadline = time.monotonic() + 10
    while any(alive(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(alive(w) for w in workers), "a worker process outlived the server"


def test_a_killed_worker_makes_health_fail_and_requests_get_503():
    with serve_tp3() as (proc, url, workers):
        assert httpx.get(url + "/health").status_code == 200
        os.kill(workers[1], signal.SIGKILL)
        t0 = time.monotonic()
        while httpx.get(url + "/health").status_code == 200 and time.monotonic() - t0 < 30:
            time.sleep(0.1)
        health = httpx.get(url + "/health")
        assert health.status_code == 503, "health still ok 30 s after a worker died"
        assert time.monotonic() - t0 < 10
        assert "rank" in health.json()["reason"]
        r = httpx.post(url + "/v1/completions", json={"prompt": "Hi", "max_tokens": 4}, timeout=60)
        assert r.status_code == 503 and r.json()["error"]["code"] == "engine_stopped"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(120) != 0  # the engine failed: the pod's container exits non-zero
    assert not any(alive(w) for w in workers)
