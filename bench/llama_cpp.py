"""llmop against llama.cpp on the same GGUF, in one run: the peer comparisons of issue 17.

- `single`: one stream, a 128-token random prompt and 128 greedy tokens (EOS ignored). llama.cpp
  through llama-cpp-python (`Llama.generate`, the bindings' own token loop), llmop through
  `LLMEngine.step`; each side in a process of its own, the same prompts, taking turns a request at a
  time (who goes first alternates), the first round a warm-up. Reported: TTFT (prompt to first
  token) and decode tok/s (the other 127 tokens), medians over the rounds, and their ratios.
- `concurrent`: 64 requests of 80–500 prompt tokens and 32–192 output tokens (seeded, EOS
  ignored) sent by 16 streaming clients, each sending its next request when its last one ends,
  against `llmop serve --max-num-seqs 16` and `llama-server -np 16` (continuous batching, 16 slots),
  through the same HTTP client and the same `/v1/completions` body. Reported: aggregate output tok/s
  (tokens / first send → last end), TTFT p50/p99, and the ratio llmop / llama-server.

Both sides get `--threads` threads (default: every core), except `llmop serve`, which picks its own
(one core left for the server) unless `--llmop-threads` says. The llmop side runs each `--configs`
entry (`auto` is what a user gets: the engine picks the dtype for the machine). llama.cpp is an
optional peer built from source: `make peers` (bench/llama_cpp_build.sh) first.

    make peers
    .venv/bin/python -P bench/llama_cpp.py [--parts single,concurrent] [--configs auto,fp16w] [--rounds 6]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from llmop.serve_process import ServeProcess, free_port, wait_http_ok

PEERS = Path(os.environ.get("LLMOP_PEERS", Path.home() / ".cache/llmop/peers"))
CONFIGS = {  # llmop engine settings per --configs name
    "auto": {},  # the engine's defaults: fp16 weights over fp32 activations on an x86 CPU without AMX (docs/engine.md)
    "fp32": {"dtype": "float32"},
    "bf16": {"dtype": "bfloat16"},
    "fp16w": {"dtype": "float32", "quantization": "fp16"},
    "int8": {"quantization": "int8"},
}


def llama_cpp_paths() -> tuple[Path, Path]:
    """(the bindings' source dir, the built libraries' dir); SystemExit when `make peers` has not run."""
    src = next(iter(sorted(PEERS.glob("llama_cpp_python-*/"))), None)
    lib = PEERS / "build" / "bin"
    if src is None or not (lib / "llama-server").exists():
        raise SystemExit(f"llama.cpp is not built in {PEERS}: run `make peers` first")
    return src, lib


def gguf() -> str:
    from llmop.engine.checkpoint import embedded_model_path

    return str(embedded_model_path())


# --- single stream ---------------------------------------------------------------------------------


def child_llama_cpp(spec: dict) -> None:
    """Child process: llama-cpp-python; one timed request per prompt read from stdin."""
    from llama_cpp import Llama

    llm = Llama(spec["gguf"], n_ctx=1024, n_batch=512, n_threads=spec["threads"],
                n_threads_batch=spec["threads"], verbose=False)
    print("ready", flush=True)
    for line in sys.stdin:
        prompt, n = json.loads(line), spec["tokens"]
        t0 = time.perf_counter()
        for i, _ in enumerate(llm.generate(prompt, temp=0.0, top_k=1, reset=True)):
            if i == 0:
                t1 = time.perf_counter()
            if i + 1 == n:
                break
        t2 = time.perf_counter()
        print(json.dumps({"ttft": t1 - t0, "decode_tok_s": (n - 1) / (t2 - t1)}), flush=True)


def child_llmop(spec: dict) -> None:
    """Child process: llmop's engine; one timed request per prompt read from stdin."""
    import torch

    torch.set_num_threads(spec["threads"])
    from llmop.engine.engine import LLMEngine
    from llmop.engine.sampling_params import SamplingParams

    eng = LLMEngine(kv_cache_memory_bytes=256 << 20, **CONFIGS[spec["config"]])
    print("ready", flush=True)
    for i, line in enumerate(sys.stdin):
        prompt, n = json.loads(line), spec["tokens"]
        t0 = time.perf_counter()
        eng.add_request(f"r{i}", prompt, SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True))
        t1 = None
        while eng.has_unfinished():
            eng.step()
            t1 = t1 or time.perf_counter()
        t2 = time.perf_counter()
        print(json.dumps({"ttft": t1 - t0, "decode_tok_s": (n - 1) / (t2 - t1)}), flush=True)


class Child:
    """One side of the single-stream comparison, in a process of its own."""

    def __init__(self, name: str, spec: dict, env: dict[str, str]):
        self.name = name
        self.proc = subprocess.Popen([sys.executable, "-P", __file__, "--child", json.dumps(spec)], text=True,
                                     env={**os.environ, **env}, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        if self.proc.stdout.readline().strip() != "ready":
            raise RuntimeError(f"{name} did not start")

    def run(self, prompt: list[int]) -> dict:
        self.proc.stdin.write(json.dumps(prompt) + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait()


def single(args, configs: list[str]) -> list[dict]:
    src, lib = llama_cpp_paths()
    base = {"gguf": gguf(), "threads": args.threads, "tokens": 128}
    sides = [Child("llama.cpp", {**base, "side": "llama_cpp"},
                   {"PYTHONPATH": os.pathsep.join(filter(None, [str(src), str(PEERS / "site"), os.environ.get("PYTHONPATH")])),
                    "LLAMA_CPP_LIB_PATH": str(lib)})]  # an empty entry would put the repo's `operator` first
    sides += [Child(f"llmop {c}", {**base, "side": "llmop", "config": c, "threads": args.llmop_threads}, {})
              for c in configs]
    rng = random.Random(0)
    runs: dict[str, list[dict]] = {s.name: [] for s in sides}
    for r in range(args.rounds + 1):
        prompt = [rng.randrange(100, 49000) for _ in range(128)]
        for s in sides if r % 2 == 0 else sides[::-1]:
            out = s.run(prompt)
            if r:  # round 0 warms up
                runs[s.name].append(out)
    for s in sides:
        s.close()
    peer = {k: statistics.median(o[k] for o in runs["llama.cpp"]) for k in ("ttft", "decode_tok_s")}
    rows = []
    for name, outs in runs.items():
        med = {k: statistics.median(o[k] for o in outs) for k in ("ttft", "decode_tok_s")}
        rows.append({"part": "single", "engine": name, "ttft_s": round(med["ttft"], 3),
                     "decode_tok_s": round(med["decode_tok_s"], 1),
                     "decode_vs_llama_cpp": round(med["decode_tok_s"] / peer["decode_tok_s"], 2),
                     "ttft_vs_llama_cpp": round(med["ttft"] / peer["ttft"], 2),
                     "decode_tok_s_rounds": [round(o["decode_tok_s"], 1) for o in outs]})
        print(json.dumps(rows[-1]), flush=True)
    return rows


# --- concurrent ------------------------------------------------------------------------------------


def workload(n: int, seed: int = 0) -> list[tuple[list[int], int]]:
    rng = random.Random(seed)
    return [([rng.randrange(100, 49000) for _ in range(rng.randint(80, 500))], rng.randint(32, 192))
            for _ in range(n)]


async def drive(url: str, reqs: list[tuple[list[int], int]], clients: int) -> dict:
    """`clients` streaming clients working through `reqs`; tokens counted from each stream's usage."""
    queue = list(enumerate(reqs))
    ttfts: list[float] = []
    tokens = [0] * len(reqs)
    ends: list[float] = []

    async def client(http: httpx.AsyncClient) -> None:
        while queue:
            i, (prompt, n) = queue.pop(0)
            body = {"prompt": prompt, "max_tokens": n, "temperature": 0, "ignore_eos": True, "stream": True,
                    "stream_options": {"include_usage": True}}
            start, first = time.perf_counter(), None
            async with http.stream("POST", "/v1/completions", json=body) as r:
                r.raise_for_status()
                async for line in r.aiter_lines():
                    if not line.startswith("data: ") or line == "data: [DONE]":
                        continue
                    event = json.loads(line[6:])
                    if first is None and event.get("choices") and event["choices"][0].get("text"):
                        first = time.perf_counter()
                    if event.get("usage"):
                        tokens[i] = event["usage"]["completion_tokens"]
            if first is None:
                raise RuntimeError(f"{url}: a stream of {n} tokens sent no text")
            ttfts.append(first - start)
            ends.append(time.perf_counter())

    # a connection per request: llama-server closes kept-alive connections after a few requests
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=httpx.Limits(max_keepalive_connections=0)) as http:
        t0 = time.perf_counter()
        await asyncio.gather(*(client(http) for _ in range(clients)))
    ttfts.sort()
    wanted = sum(n for _, n in reqs)
    if sum(tokens) != wanted:
        raise RuntimeError(f"{url}: {sum(tokens)} output tokens reported, {wanted} asked for")
    return {"tok_s": sum(tokens) / (max(ends) - t0), "ttft_p50": ttfts[len(ttfts) // 2],
            "ttft_p99": ttfts[min(len(ttfts) - 1, int(0.99 * len(ttfts)))], "seconds": max(ends) - t0}


class LlamaServer:
    """`llama-server` on the GGUF with `slots` parallel slots, each with the context one request needs."""

    def __init__(self, lib: Path, slots: int, threads: int, log: Path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [str(lib / "llama-server"), "-m", gguf(), "--port", str(self.port), "-np", str(slots),
               "-c", str(slots * 1024), "-t", str(threads), "-tb", str(threads), "--cont-batching",
               "--threads-http", str(slots + 4)]  # its default, one per core, serves 2 streams at a time here
        with log.open("ab") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        if wait_http_ok(self.url + "/health", self.proc, 120):
            return
        self.stop()
        raise RuntimeError(f"llama-server did not start (log: {log})")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(60)


def concurrent(args, configs: list[str]) -> list[dict]:
    _, lib = llama_cpp_paths()
    reqs = workload(args.requests)
    logs = Path(tempfile.mkdtemp(prefix="llmop-llama-cpp-"))
    results: dict[str, dict] = {}
    server = LlamaServer(lib, args.clients, args.threads, logs / "llama-server.log")
    try:
        results["llama-server"] = asyncio.run(drive(server.url, reqs, args.clients))
    finally:
        server.stop()
    if args.llmop_threads_given:  # else `llmop serve` picks its own (one core left for the server)
        os.environ["OMP_NUM_THREADS"] = str(args.llmop_threads)
    else:
        os.environ.pop("OMP_NUM_THREADS", None)
    for c in configs:
        cfg = logs / f"{c}.json"
        cfg.write_text(json.dumps({"max_num_seqs": args.clients, **CONFIGS[c]}))
        with ServeProcess(["--config", str(cfg), "--log-level", "warning"], log=logs / f"llmop-{c}.log",
                          stop_timeout_s=120) as srv:
            results[f"llmop {c}"] = asyncio.run(drive(srv.url, reqs, args.clients))
    peer = results["llama-server"]
    rows = []
    for name, r in results.items():
        rows.append({"part": "concurrent", "engine": name, "tok_s": round(r["tok_s"], 1),
                     "ttft_p50_s": round(r["ttft_p50"], 2), "ttft_p99_s": round(r["ttft_p99"], 2),
                     "tok_s_vs_llama_server": round(r["tok_s"] / peer["tok_s"], 2),
                     "seconds": round(r["seconds"], 1)})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--parts", default="single,concurrent")
    ap.add_argument("--configs", default="auto", help=f"llmop engines, of {','.join(CONFIGS)}")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--llmop-threads", type=int,
                    help="llmop's torch threads (default: --threads offline; what `llmop serve` picks itself)")
    ap.add_argument("--rounds", type=int, default=6, help="single: timed requests per side")
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        spec = json.loads(args.child)
        return (child_llama_cpp if spec["side"] == "llama_cpp" else child_llmop)(spec)
    args.llmop_threads_given = args.llmop_threads is not None
    args.llmop_threads = args.llmop_threads or args.threads
    configs = args.configs.split(",")
    if unknown := set(configs) - set(CONFIGS):
        raise SystemExit(f"unknown --configs {sorted(unknown)}")
    parts = args.parts.split(",")
    rows = (single(args, configs) if "single" in parts else []) + (
        concurrent(args, configs) if "concurrent" in parts else [])
    serving = args.llmop_threads if args.llmop_threads_given else "its own"
    print(f"\nllama.cpp {args.threads} threads; llmop {args.llmop_threads} offline, {serving} serving")
    for r in rows:
        if r["part"] == "single":
            print(f"| single | {r['engine']} | TTFT {r['ttft_s']} s ({r['ttft_vs_llama_cpp']}x) "
                  f"| {r['decode_tok_s']} tok/s ({r['decode_vs_llama_cpp']}x) |")
        else:
            print(f"| 16 streams | {r['engine']} | TTFT p50 {r['ttft_p50_s']} s, p99 {r['ttft_p99_s']} s "
                  f"| {r['tok_s']} tok/s ({r['tok_s_vs_llama_server']}x) |")


if __name__ == "__main__":
    main()
