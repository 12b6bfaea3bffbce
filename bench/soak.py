"""A bounded soak of `llmop serve`: mixed traffic for a while, then what the process holds afterwards.

Why: a leak (a KV block never freed by a cancelled stream, a thread or socket per failed request,
memory that grows with every request) shows only after many requests of every kind. This starts
`llmop serve` as a subprocess, warms it up (the thread pool, the allocator, the grammar cache reach
their working size), snapshots it, runs `--seconds` of load from `--clients` threads, waits for the
engine to go idle, and snapshots it again. The traffic is a mix of: streamed completions read to the
end, streamed chats closed after a few chunks (a client going away mid-stream), non-streamed
requests, structured output, bad requests (invalid JSON, unknown fields, out-of-range values,
unknown models) and, when the server lists adapters (an engine `--config` with `adapters:`), requests
for them (plain, and streams closed early). With `--churn NAME=DIR` one more thread loads the PEFT
directory DIR as adapter NAME through the admin API (its own listener and credential, which this
script sets up), sends it requests and unloads it again, over and over.

A snapshot is the server's RSS, open file descriptors and threads (from /proc), its KV and queue
gauges and its LoRA series (adapters by state, adapters in use by running and waiting requests,
requests accepted per adapter, slot loads and evictions, disk loads) from /metrics, and with
`--churn` the admin listing (which adapters are pinned and resident). Output: one JSON object
(before, after, deltas, requests by kind and status, adapter requests by adapter); `--json FILE`
writes it there too. tests/server/test_soak.py asserts its bands.

    python bench/soak.py --seconds 180 --clients 6 --json bench/results/soak.json
    python bench/soak.py --churn qv=/adapters/qv -- --config engine.yaml   # with adapters
"""

from __future__ import annotations

import argparse
import json
import os
import random
import secrets
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from llmop.serve_process import ServeProcess, free_port

GAUGES = ("llmop_kv_cache_free_blocks", "llmop_kv_cache_total_blocks", "llmop_num_requests_running",
          "llmop_num_requests_waiting", "llmop_lora_adapters", "llmop_lora_slot_loads_total",
          "llmop_lora_slot_evictions_total", "llmop_lora_disk_loads_total")
SUMMED = ("llmop_lora_requests_total",)  # one series per adapter: their sum
MSGS = [{"role": "user", "content": "Name three colours."}]
CHURN_TAIL_S = 5  # the churn stops this long before the clients: their adapter requests end last, so
# the final snapshot shows what they left behind (an unload refreshes the LoRA series on its own)


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
            elif s.name in SUMMED:
                out[s.name] = out.get(s.name, 0) + s.value
            elif s.name == "llmop_lora_requests_info":  # adapters in use: how many names each label lists
                for which in ("running", "waiting"):
                    out[f"lora_{which}_adapters"] = len([a for a in s.labels[f"{which}_lora_adapters"].split(",") if a])
    return out


def snapshot(url: str, pid: int, admin: Admin | None = None) -> dict:
    return {**proc_snapshot(pid), **gauges(url), **(admin.slots() if admin is not None else {})}


def wait_idle(url: str, timeout_s: float = 120) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        g = gauges(url)
        if (g["llmop_num_requests_running"] == g["llmop_num_requests_waiting"] == 0
                and g["llmop_kv_cache_free_blocks"] == g["llmop_kv_cache_total_blocks"]):
            return True
        time.sleep(0.2)
    return False


def _cancelled(client: httpx.Client, rng: random.Random, body: dict) -> int:
    """A stream the client closes after 1-6 chunks: the server must abort it and free its KV (and
    its adapter's slot); returns the status."""
    with client.stream("POST", "/v1/chat/completions", json={
            **body, "messages": MSGS, "max_tokens": 200, "stream": True, "ignore_eos": True}) as r:
        for i, _ in enumerate(r.iter_lines()):
            if i >= rng.randint(1, 6):
                break
        return r.status_code


def _adapter(client: httpx.Client, rng: random.Random, adapter: str) -> int:
    """A plain completion, or a stream closed early, for `adapter`; returns the status."""
    if rng.random() < 0.5:
        return _cancelled(client, rng, {"model": adapter})
    return client.post("/v1/completions", json={"model": adapter, "prompt": "Hello", "max_tokens": 8}).status_code


def _one(client: httpx.Client, rng: random.Random, adapters: list[str]) -> tuple[str, int]:
    """Send one request of a random kind; returns (kind, status)."""
    kinds = ["stream", "cancel", "plain", "json", "bad"] + (["adapter"] * 2 if adapters else [])
    kind = rng.choice(kinds)
    if kind == "stream":
        with client.stream("POST", "/v1/completions", json={
                "prompt": "Once upon a time", "max_tokens": rng.randint(4, 24), "stream": True}) as r:
            for _ in r.iter_lines():
                pass
            return kind, r.status_code
    if kind == "cancel":
        return kind, _cancelled(client, rng, {})
    if kind == "plain":
        return kind, client.post("/v1/chat/completions", json={
            "messages": MSGS, "max_tokens": rng.randint(1, 12), "n": rng.randint(1, 3)}).status_code
    if kind == "json":
        return kind, client.post("/v1/chat/completions", json={
            "messages": MSGS, "max_tokens": 16, "response_format": {"type": "json_object"}}).status_code
    if kind == "adapter":
        adapter = rng.choice(adapters)
        return f"adapter:{adapter}", _adapter(client, rng, adapter)
    bad = rng.choice([b'{"prompt": "x",', json.dumps({"prompt": "x", "temprature": 1}).encode(),
                      json.dumps({"prompt": "x", "top_p": 7}).encode(),
                      json.dumps({"prompt": "x", "model": "no-such-model"}).encode(),
                      json.dumps({"messages": []}).encode()])
    path = "/v1/chat/completions" if b"messages" in bad else "/v1/completions"
    return kind, client.post(path, content=bad, headers={"content-type": "application/json"}).status_code


class Admin:
    """The admin API (its own listener, with the credential): churns one adapter and lists slots."""

    def __init__(self, url: str, token: str, name: str, source: str):
        self.client = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=120)
        self.name, self.source = name, source

    def slots(self) -> dict:
        """Pinned adapters, and of those how many hold a device slot (they must never leave it)."""
        data = self.client.get("/v1/adapters").json()["data"]
        pinned = [a for a in data if a["pinned"]]
        return {"lora_pinned": len(pinned), "lora_pinned_resident": sum(a["state"] == "resident" for a in pinned)}

    def churn(self, url: str, deadline: float, count, rng: random.Random) -> None:
        """Until `deadline`: load the adapter, send it two requests, unload it (retried while a
        closed stream of its own is still being aborted), pause."""
        with httpx.Client(base_url=url, timeout=120) as c:
            while time.monotonic() < deadline:
                r = self.client.post("/v1/adapters", json={"name": self.name, "source": self.source})
                count(f"admin_load {r.status_code}")
                if r.status_code == 201:
                    for _ in range(2):
                        count(f"churn:{self.name} {_adapter(c, rng, self.name)}")
                    for _ in range(100):
                        r = self.client.delete(f"/v1/adapters/{self.name}")
                        if r.status_code != 409:
                            break
                        time.sleep(0.1)
                    count(f"admin_unload {r.status_code}")
                time.sleep(1)


def load(url: str, seconds: float, clients: int, seed: int = 0, admin: Admin | None = None) -> Counter:
    """`clients` threads sending random requests for `seconds` (and with `admin` one more churning
    its adapter); counts (kind, status). A kind is `adapter:NAME` for a configured adapter's requests
    and `churn:NAME` for the churned one's."""
    models = httpx.get(url + "/v1/models", timeout=30).json()["data"]
    adapters = [m["id"] for m in models if m.get("parent") and (admin is None or m["id"] != admin.name)]
    counts: Counter = Counter()
    lock = threading.Lock()
    deadline = time.monotonic() + seconds

    def count(key: str) -> None:
        with lock:
            counts[key] += 1

    def client(i: int) -> None:
        rng = random.Random(seed * 1000 + i)
        with httpx.Client(base_url=url, timeout=120) as c:
            while time.monotonic() < deadline:
                try:
                    kind, status = _one(c, rng, adapters)
                except httpx.HTTPError as e:
                    kind, status = "error", type(e).__name__
                count(f"{kind} {status}")

    def churn() -> None:
        try:
            admin.churn(url, deadline - CHURN_TAIL_S, count, random.Random(seed * 1000 + clients))
        except httpx.HTTPError as e:
            count(f"error {type(e).__name__}")

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    threads += [threading.Thread(target=churn, daemon=True)] if admin is not None else []
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + 300)
    return counts


def soak(url: str, pid: int, seconds: float, clients: int, warmup_s: float, admin: Admin | None = None) -> dict:
    load(url, warmup_s, clients, seed=1, admin=admin)  # the churn too: its first load starts threads
    wait_idle(url)
    time.sleep(1)
    before = snapshot(url, pid, admin)
    t0 = time.monotonic()
    counts = load(url, seconds, clients, seed=2, admin=admin)
    elapsed = time.monotonic() - t0
    idle = wait_idle(url)
    time.sleep(1)  # let the server close the connections the clients closed
    after = snapshot(url, pid, admin)
    by_adapter: Counter = Counter()
    for key, n in counts.items():
        kind = key.split()[0]
        if kind.startswith(("adapter:", "churn:")):
            by_adapter[kind.split(":", 1)[1]] += n
    return {"seconds": round(elapsed, 1), "clients": clients, "warmup_s": warmup_s, "idle_after": idle,
            "requests": sum(counts.values()), "by_kind_status": dict(sorted(counts.items())),
            "by_adapter": dict(sorted(by_adapter.items())), "churned": admin.name if admin else None,
            "server_errors": sum(n for k, n in counts.items() if k.split()[1].startswith("5")),
            "before": before, "after": after,
            "delta": {k: round(after[k] - before[k], 1) for k in before if k in after}}


def admin_listener(churn: str, tmp: Path) -> tuple[list[str], Admin]:
    """For `--churn NAME=DIR`: the `llmop serve` flags of an admin listener on a free port with a
    fresh credential (its file under `tmp`) that loads from DIR's parent directory only, and the
    `Admin` that calls it."""
    name, source = churn.split("=", 1)
    port, token, token_file = free_port(), secrets.token_hex(16), tmp / "admin-token"
    token_file.write_text(token + "\n")
    flags = ["--admin-port", str(port), "--admin-token-file", str(token_file),
             "--adapter-roots", str(Path(source).resolve().parent)]
    return flags, Admin(f"http://127.0.0.1:{port}", token, name, source)


def serve(extra: list[str], log: Path) -> ServeProcess:
    """`llmop serve` on a free port, with the embedded model unless `extra` says otherwise."""
    return ServeProcess(["--dtype", "float32", "--max-model-len", "512", "--kv-cache-memory-bytes", str(64 << 20),
                         "--log-level", "warning", *extra], log=log, ready_timeout_s=300)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seconds", type=float, default=180)
    p.add_argument("--clients", type=int, default=6)
    p.add_argument("--warmup-s", type=float, default=20)
    p.add_argument("--json", help="also write the result here")
    p.add_argument("--log", default="soak-serve.log", help="the server's output")
    p.add_argument("--churn", metavar="NAME=DIR", help="load, use and unload the PEFT directory DIR as adapter "
                   "NAME through the admin API, over and over")
    p.add_argument("serve_args", nargs="*", help="extra `llmop serve` flags, after --")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        flags, admin = admin_listener(args.churn, Path(tmp)) if args.churn else ([], None)
        with serve(args.serve_args + flags, Path(args.log)) as server:
            result = soak(server.url, server.pid, args.seconds, args.clients, args.warmup_s, admin)
        if admin is not None:
            admin.client.close()
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
