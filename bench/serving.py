"""Serving benchmark: Poisson arrivals against `llmop serve` over HTTP, and the same load on the
offline engine, in one run.

Workload (stated, seeded): prompts of uniform [16, 64] random token ids, outputs of uniform
[8, 24] tokens with ignore_eos (so output lengths are exact), Poisson arrivals at each rate for
`--duration` seconds (then the run waits for the stragglers), plus a saturation burst (all of
`--burst` requests at t = 0). Per rate: TTFT, inter-token latency and queue time p50/p99,
throughput (output tokens/s over first arrival → last finish) and goodput (requests/s meeting the
SLO: TTFT ≤ --slo-ttft and mean ITL ≤ --slo-itl).

- HTTP: a real `llmop serve` subprocess on localhost; the client streams SSE with httpx (one
  event per token) and times TTFT and ITL at the client; queue time comes from the server's
  `llmop_request_queue_time_seconds` histogram (bucket-interpolated quantiles over the rate's
  window, as Prometheus would compute them).
- Offline: `LLMEngine` in this process, requests added at the same arrival times, stepped in a
  loop; latencies from the engine's own timestamps.

HTTP overhead = 1 − HTTP throughput / offline throughput at the same load (bar: ≤ 10% at the
saturation burst). Both sides use the same engine configuration and run one after the other.

    .venv/bin/python -P bench/serving.py [--rates 0.25,0.5,1] [--duration 20] [--burst 16] [--threads 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from llmop.serve_process import ServeProcess


@dataclass
class Req:
    arrival: float  # seconds after the start of the run
    prompt: list[int]
    max_tokens: int


@dataclass
class Result:
    ttft: float | None = None
    itls: list[float] = field(default_factory=list)
    queue: float | None = None
    tokens: int = 0
    start: float = 0.0
    end: float = 0.0
    ok: bool = False


def workload(rate: float, duration: float, burst: int, vocab: int, seed: int) -> list[Req]:
    rng = random.Random(seed)
    times: list[float] = []
    if math.isinf(rate):
        times = [0.0] * burst
    else:
        t = rng.expovariate(rate)
        while t < duration:
            times.append(t)
            t += rng.expovariate(rate)
    return [Req(t, [rng.randrange(100, vocab) for _ in range(rng.randint(16, 64))], rng.randint(8, 24))
            for t in times]


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def summarize(results: list[Result], queue: tuple[float, float] | None, slo_ttft: float, slo_itl: float) -> dict:
    done = [r for r in results if r.ok]
    if not done:
        return {"completed": 0}
    span = max(r.end for r in done) - min(r.start for r in results)
    good = [r for r in done if r.ttft <= slo_ttft and (not r.itls or statistics.fmean(r.itls) <= slo_itl)]
    itls = [x for r in done for x in r.itls]
    q = queue or (pct([r.queue for r in done], 0.5), pct([r.queue for r in done], 0.99))
    return {
        "requests": len(results), "completed": len(done),
        "ttft_p50": pct([r.ttft for r in done], 0.5), "ttft_p99": pct([r.ttft for r in done], 0.99),
        "itl_p50": pct(itls, 0.5), "itl_p99": pct(itls, 0.99),
        "queue_p50": q[0], "queue_p99": q[1],
        "throughput_tok_s": sum(r.tokens for r in done) / span,
        "throughput_req_s": len(done) / span,
        "goodput_req_s": len(good) / span, "good_share": len(good) / len(results),
    }


# --- HTTP ----------------------------------------------------------------------------------------


def start_server(config: dict, log: Path) -> ServeProcess:
    cfg = Path(tempfile.mkdtemp()) / "engine.yaml"
    cfg.write_text(json.dumps(config))  # JSON is YAML; the port is ServeProcess's flag
    return ServeProcess(["--config", str(cfg), "--log-level", "warning"], log=log, stop_timeout_s=120)


def queue_histogram(url: str) -> dict[float, float]:
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(url + "/metrics").text
    return {float(s.labels["le"]): s.value for fam in text_string_to_metric_families(text)
            if fam.name == "llmop_request_queue_time_seconds" for s in fam.samples if s.name.endswith("_bucket")}


def histogram_quantile(q: float, before: dict[float, float], after: dict[float, float]) -> float:
    """Prometheus' histogram_quantile over the bucket deltas (linear inside a bucket)."""
    bounds = sorted(after)
    counts = [after[b] - before.get(b, 0.0) for b in bounds]
    total = counts[-1]
    if total <= 0:
        return float("nan")
    rank, prev_b, prev_c = q * total, 0.0, 0.0
    for b, c in zip(bounds, counts):
        if c >= rank:
            if math.isinf(b):
                return prev_b
            return prev_b + (b - prev_b) * (rank - prev_c) / max(c - prev_c, 1e-12)
        prev_b, prev_c = b, c
    return bounds[-2]


async def run_http(url: str, reqs: list[Req], timeout: float) -> list[Result]:
    results = [Result() for _ in reqs]
    limits = httpx.Limits(max_connections=1000, max_keepalive_connections=1000)

    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=timeout) as client:
        t0 = time.perf_counter()

        async def one(req: Req, res: Result) -> None:
            await asyncio.sleep(max(0.0, req.arrival - (time.perf_counter() - t0)))
            body = {"prompt": req.prompt, "max_tokens": req.max_tokens, "temperature": 0, "ignore_eos": True,
                    "stream": True}
            res.start = time.perf_counter()
            last = None
            async with client.stream("POST", "/v1/completions", json=body) as r:
                if r.status_code != 200:
                    res.end = time.perf_counter()
                    return
                async for line in r.aiter_lines():
                    if not line.startswith("data: ") or line == "data: [DONE]":
                        continue
                    now = time.perf_counter()
                    if last is None:
                        res.ttft = now - res.start
                    else:
                        res.itls.append(now - last)
                    last = now
                    res.tokens += 1
            res.end = time.perf_counter()
            res.ok = res.tokens == req.max_tokens

        await asyncio.gather(*(one(q, r) for q, r in zip(reqs, results)))
    return results


# --- offline ---------------------------------------------------------------------------------------


def run_offline(engine, reqs: list[Req]) -> list[Result]:
    from llmop.engine.sampling_params import SamplingParams

    results = [Result() for _ in reqs]
    last_token: dict[str, float] = {}
    order = sorted(range(len(reqs)), key=lambda i: reqs[i].arrival)
    t0 = time.monotonic()
    nxt = 0
    while nxt < len(order) or engine.has_unfinished():
        now = time.monotonic() - t0
        while nxt < len(order) and reqs[order[nxt]].arrival <= now:
            i = order[nxt]
            engine.add_request(f"bench-{i}", reqs[i].prompt, SamplingParams(max_tokens=reqs[i].max_tokens,
                               temperature=0.0, ignore_eos=True), arrival_time=t0 + reqs[i].arrival)
            results[i].start = reqs[i].arrival
            nxt += 1
        if not engine.has_unfinished():
            time.sleep(max(0.0, reqs[order[nxt]].arrival - now))
            continue
        for out in engine.step():
            res = results[int(out.request_id.split("-")[1])]
            if out.token_time is not None:
                if res.tokens:
                    res.itls.append(out.token_time - last_token[out.request_id])
                last_token[out.request_id] = out.token_time
                res.tokens += len(out.new_token_ids)
            if out.finished:
                res.ttft = out.first_token_time - out.arrival_time
                res.queue = out.first_scheduled_time - out.arrival_time
                res.end = out.finish_time - t0
                res.ok = out.finish_reason == "length"
    return results



# --- main ------------------------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", default="0.25,0.5,1", help="request rates (req/s), comma-separated")
    ap.add_argument("--duration", type=float, default=20.0, help="seconds of arrivals per rate")
    ap.add_argument("--burst", type=int, default=16, help="requests of the saturation burst (0: none)")
    ap.add_argument("--max-num-seqs", type=int, default=16)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--slo-ttft", type=float, default=2.0)
    ap.add_argument("--slo-itl", type=float, default=0.25)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1,
                    help="torch CPU threads on both sides (OMP_NUM_THREADS); 0: torch's default")
    ap.add_argument("--skip-offline", action="store_true")
    ap.add_argument("--json", default="bench/results/serving.json",
                    help="write the figures here too (bench/autoscaling_sim.py reads service_rate from it)")
    args = ap.parse_args()
    if args.threads:
        os.environ["OMP_NUM_THREADS"] = str(args.threads)  # before torch loads, here and in the server

    config = {"dtype": args.dtype, "max_num_seqs": args.max_num_seqs, "max_num_batched_tokens": 1024,
              "kv_cache_memory_bytes": 512 << 20, "max_model_len": 1024, "max_waiting_requests": 4096,
              "queue_timeout_s": 600}
    rates = [float(r) for r in args.rates.split(",") if r] + ([math.inf] if args.burst else [])
    vocab = 49152
    loads = {rate: workload(rate, args.duration, args.burst, vocab, args.seed + k) for k, rate in enumerate(rates)}
    figures: dict[str, dict] = {}

    log = Path(tempfile.gettempdir()) / "llmop-bench-serving.log"
    with start_server(config, log) as server:
        url = server.url
        asyncio.run(run_http(url, workload(math.inf, 0, 2, vocab, 99), 300))  # warm-up
        for rate, reqs in loads.items():
            before = queue_histogram(url)
            res = asyncio.run(run_http(url, reqs, 600))
            after = queue_histogram(url)
            q = (histogram_quantile(0.5, before, after), histogram_quantile(0.99, before, after))
            figures[f"http@{rate}"] = summarize(res, q, args.slo_ttft, args.slo_itl)
            print(f"http    rate={rate}: {json.dumps(figures[f'http@{rate}'])}", flush=True)

    if not args.skip_offline:
        from llmop.engine.config import EngineConfig
        from llmop.engine.engine import LLMEngine

        engine = LLMEngine(EngineConfig(**config))
        run_offline(engine, workload(math.inf, 0, 2, vocab, 99))  # warm-up
        for rate, reqs in loads.items():
            figures[f"offline@{rate}"] = summarize(run_offline(engine, reqs), None, args.slo_ttft, args.slo_itl)
            print(f"offline rate={rate}: {json.dumps(figures[f'offline@{rate}'])}", flush=True)

    print("\n| rate (req/s) | side | done | TTFT p50/p99 (s) | ITL p50/p99 (s) | queue p50/p99 (s) | tok/s | goodput (req/s) | in SLO |")
    print("|---|---|---|---|---|---|---|---|---|")
    for rate in rates:
        for side in ("http", "offline"):
            f = figures.get(f"{side}@{rate}")
            if not f or not f.get("completed"):
                continue
            print(f"| {'burst' if math.isinf(rate) else rate} | {side} | {f['completed']}/{f['requests']} | "
                  f"{f['ttft_p50']:.2f} / {f['ttft_p99']:.2f} | {f['itl_p50']:.3f} / {f['itl_p99']:.3f} | "
                  f"{f['queue_p50']:.2f} / {f['queue_p99']:.2f} | {f['throughput_tok_s']:.1f} | "
                  f"{f['goodput_req_s']:.2f} | {f['good_share']:.0%} |")
        h, o = figures.get(f"http@{rate}"), figures.get(f"offline@{rate}")
        if h and o and h.get("completed") and o.get("completed"):
            print(f"|  | HTTP overhead | | | | | {1 - h['throughput_tok_s'] / o['throughput_tok_s']:+.1%} | | |")
    burst = figures.get(f"http@{math.inf}")
    if burst and burst.get("completed"):
        # What one replica serves when saturated: the autoscaling simulation's service rate.
        figures["service_rate"] = {"req_s": burst["throughput_req_s"], "slots": args.max_num_seqs,
                                   "measured_by": f"http burst of {args.burst}", "threads": args.threads}
        print(f"\nservice rate at saturation: {burst['throughput_req_s']:.2f} req/s with {args.max_num_seqs} slots")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
