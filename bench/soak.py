"""A bounded soak of `llmop serve`: mixed traffic for a while, then what the process holds afterwards.

Why: a leak (a KV block never freed by a cancelled stream, a thread or socket per failed request,
memory that grows with every request) shows only after many requests of every kind. This starts
`llmop serve` as a subprocess, warms it up (the thread pool, the allocator, the grammar cache reach
their working size), snapshots it, runs `--seconds` of load from `--clients` threads, waits for the
engine to go idle, and snapshots it again. The traffic is a mix of: streamed completions read to the
end, streamed chats closed after a few chunks (a client going away mid-stream), non-streamed
requests, structured output, bad requests (invalid JSON, unknown fields, out-of-range values,
unknown models) and, when the server lists adapters (`--config` with `adapters:`), requests for them.

A snapshot is the server's RSS, open file descriptors and threads (from /proc) and its KV, queue
and adapter gauges (from /metrics). Output: one JSON object (before, after, deltas, requests by
kind and status); `--json FILE` writes it there too. tests/server/test_soak.py asserts its bands.

    python bench/soak.py --seconds 180 --clients 6 --json bench/results/soak.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

GAUGES = ("llmop_kv_cache_free_blocks", "llmop_kv_cache_total_blocks", "llmop_num_requests_running",
          "llmop_num_requests_waiting", "llmop_lora_adapters")
MSGS = [{"role": "user", "content": "Name three colours."}]


def proc_snapshot(pid: int) -> dict:
    status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    return {"rss_mib": round(int(status["VmRSS"].split()[0]) / 1024, 1), "threads": int(status["Threads"]),
            "fds": len(os.listdir(f"/proc/{pid}/fd"))}


def gauges(url: str) -> dict[str, float]:
    out = {}
    for fam in text_string_to_metric_families(httpx.get(url + "/metrics", timeout=30).text):
        for s in fam.samples:
            if s.name in GAUGES:
                state = s.labels.get("state")
                out[s.name + (f"{{{state}}}" if state else "")] = s.value
    return out


def snapshot(url: str, pid: int) -> dict:
    return {**proc_snapshot(pid), **gauges(url)}


def wait_idle(url: str, timeout_s: float = 120) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        g = gauges(url)
        if (g["llmop_num_requests_running"] == g["llmop_num_requests_waiting"] == 0
                and g["llmop_kv_cache_free_blocks"] == g["llmop_kv_cache_total_blocks"]):
            return True
        time.sleep(0.2)
    return False


def _one(client: httpx.Client, rng: random.Random, adapters: list[str]) -> tuple[str, int]:
    """Send one request of a random kind; returns (kind, status)."""
    kinds = ["stream", "cancel", "plain", "json", "bad"] + (["adapter"] if adapters else [])
    kind = rng.choice(kinds)
    if kind == "stream":
        with client.stream("POST", "/v1/completions", json={
                "prompt": "Once upon a time", "max_tokens": rng.randint(4, 24), "stream": True}) as r:
            for _ in r.iter_lines():
                pass
            return kind, r.status_code
    if kind == "cancel":  # the client goes away mid-stream: the server must abort and free its KV
        with client.stream("POST", "/v1/chat/completions", json={
                "messages": MSGS, "max_tokens": 200, "stream": True, "ignore_eos": True}) as r:
            for i, _ in enumerate(r.iter_lines()):
                if i >= rng.randint(1, 6):
                    break
            return kind, r.status_code
    if kind == "plain":
        return kind, client.post("/v1/chat/completions", json={
            "messages": MSGS, "max_tokens": rng.randint(1, 12), "n": rng.randint(1, 3)}).status_code
    if kind == "json":
        return kind, client.post("/v1/chat/completions", json={
            "messages": MSGS, "max_tokens": 16, "response_format": {"type": "json_object"}}).status_code
    if kind == "adapter":
        return kind, client.post("/v1/completions", json={
            "model": rng.choice(adapters), "prompt": "Hello", "max_tokens": 8}).status_code
    bad = rng.choice([b'{"prompt": "x",', json.dumps({"prompt": "x", "temprature": 1}).encode(),
                      json.dumps({"prompt": "x", "top_p": 7}).encode(),
                      json.dumps({"prompt": "x", "model": "no-such-model"}).encode(),
                      json.dumps({"messages": []}).encode()])
    path = "/v1/chat/completions" if b"messages" in bad else "/v1/completions"
    return kind, client.post(path, content=bad, headers={"content-type": "application/json"}).status_code


def load(url: str, seconds: float, clients: int, seed: int = 0) -> Counter:
    """`clients` threads sending random requests for `seconds`; counts (kind, status)."""
    models = httpx.get(url + "/v1/models", timeout=30).json()["data"]
    adapters = [m["id"] for m in models if m.get("parent")]
    counts: Counter = Counter()
    lock = threading.Lock()
    deadline = time.monotonic() + seconds

    def client(i: int) -> None:
        rng = random.Random(seed * 1000 + i)
        with httpx.Client(base_url=url, timeout=120) as c:
            while time.monotonic() < deadline:
                try:
                    kind, status = _one(c, rng, adapters)
                except httpx.HTTPError as e:
                    kind, status = "error", type(e).__name__
                with lock:
                    counts[f"{kind} {status}"] += 1

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + 300)
    return counts


def soak(url: str, pid: int, seconds: float, clients: int, warmup_s: float) -> dict:
    load(url, warmup_s, clients, seed=1)
    wait_idle(url)
    time.sleep(1)
    before = snapshot(url, pid)
    t0 = time.monotonic()
    counts = load(url, seconds, clients, seed=2)
    elapsed = time.monotonic() - t0
    idle = wait_idle(url)
    time.sleep(1)  # let the server close the connections the clients closed
    after = snapshot(url, pid)
    return {"seconds": round(elapsed, 1), "clients": clients, "warmup_s": warmup_s, "idle_after": idle,
            "requests": sum(counts.values()), "by_kind_status": dict(sorted(counts.items())),
            "server_errors": sum(n for k, n in counts.items() if k.split()[1].startswith("5")),
            "before": before, "after": after,
            "delta": {k: round(after[k] - before[k], 1) for k in before if k in after}}


@contextlib.contextmanager
def serve(extra: list[str], log: Path):
    """`llmop serve` on a free port, with the embedded model unless `extra` says otherwise."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    llmop = Path(sys.executable).with_name("llmop")
    cmd = [str(llmop), "serve", "--port", str(port), "--dtype", "float32", "--max-model-len", "512",
           "--kv-cache-memory-bytes", str(64 << 20), "--log-level", "warning", *extra]
    with log.open("ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONSAFEPATH": "1"})
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(1200):
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/ready").status_code == 200:
                    break
            if proc.poll() is not None:
                raise RuntimeError(f"llmop serve exited during start-up (log: {log})")
            time.sleep(0.25)
        else:
            raise RuntimeError("llmop serve did not become ready")
        yield url, proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seconds", type=float, default=180)
    p.add_argument("--clients", type=int, default=6)
    p.add_argument("--warmup-s", type=float, default=20)
    p.add_argument("--json", help="also write the result here")
    p.add_argument("--log", default="soak-serve.log", help="the server's output")
    p.add_argument("serve_args", nargs="*", help="extra `llmop serve` flags, after --")
    args = p.parse_args(argv)
    with serve(args.serve_args, Path(args.log)) as (url, pid):
        result = soak(url, pid, args.seconds, args.clients, args.warmup_s)
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
