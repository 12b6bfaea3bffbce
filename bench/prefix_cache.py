"""Prefix caching (issue 16): each figure against its baseline in the same run.

1. Shared system prompt: a 2,000-token system prompt followed by 64 different short questions (16-48
   tokens, ignore_eos). TTFT p50 with caching vs without, one request at a time (1 output token; the
   two engines take turns, question by question), and for the 64 sent at once with 32 output tokens
   each (a fresh system prompt, so the burst pays its one miss) with the burst's throughput.
2. Nothing in common: the bench/throughput.py workload (prompts 32-512 random tokens, Pareto outputs
   capped at 128), fresh prompts each round, run on both engines in alternating order: generated tok/s
   with caching / without (the bar: caching costs < 3%), per wall second and per CPU second of this
   process (the latter is what a busy machine disturbs less).
3. Hit rate under a bounded cache: 1,000 requests, 60% of which start with one of 5 prefixes of 1,024
   tokens (then 16-64 tokens of their own), 40% with nothing shared (64-512 tokens); 8 output tokens;
   all submitted at once, 16 running (64 in the other parts). The engine's scheduler and block manager are driven without a
   model (hit rates are bookkeeping: which blocks are cached when a request is admitted), with 500
   blocks and with an unbounded pool; `--engine-check` also runs the bounded case on the real engine
   and checks its counters agree.

    .venv/bin/python -P bench/prefix_cache.py [--dtype float32] [--threads 2] [--questions 64]
        [--rounds 3] [--engine-check] [--model HF_DIR] [--attention-backend auto|torch|triton]
        [--kv-bytes N] [--parts hit-rate,system-prompt,no-common-prefix] [--out bench/results/prefix_cache.json]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path

BLOCK = 16


ENGINE: dict = {}  # model, attention backend and KV budget from the command line


def engine(caching: bool, dtype: str, **kw):
    from llmop.engine.engine import LLMEngine

    cfg = dict(dtype=dtype, kv_cache_memory_bytes=1 << 30, max_num_seqs=64, max_num_batched_tokens=2048,
               enable_prefix_caching=caching, **ENGINE)
    return LLMEngine(**{**cfg, **kw})


def drive(eng, reqs, tag: str) -> dict:
    """Submit `reqs` [(ids, params)] at once, step until done: TTFTs, wall and CPU time (this
    process's: unlike wall time, not inflated while another job holds the core), generated tokens."""
    t0, c0 = time.monotonic(), time.process_time()
    for i, (ids, params) in enumerate(reqs):
        eng.add_request(f"{tag}-{i}", ids, params, arrival_time=t0)
    ttft, gen, cached = {}, 0, 0
    while eng.has_unfinished():
        for out in eng.step():
            gen += len(out.new_token_ids)
            if out.first_token_time is not None and out.request_id not in ttft:
                ttft[out.request_id] = out.first_token_time - out.arrival_time
            if out.finished:
                cached += out.num_cached_tokens
    return {"wall_s": time.monotonic() - t0, "cpu_s": time.process_time() - c0, "ttft": list(ttft.values()),
            "generated": gen, "cached": cached}


def random_ids(rng, n, vocab=49152):
    return [rng.randrange(100, vocab) for _ in range(n)]


def random_requests(rng: random.Random, n: int) -> list:
    """The bench/throughput.py workload: prompts of 32-512 random tokens, Pareto outputs capped at 128."""
    from llmop.engine.sampling_params import SamplingParams

    return [(random_ids(rng, rng.randint(32, 512)),
             SamplingParams(max_tokens=max(1, min(128, int(20 * (1 - rng.random()) ** (-1 / 1.5)))),
                            temperature=0.0, ignore_eos=True)) for _ in range(n)]  # fmt: skip


def shared_system_prompt(on, off, n_questions: int, system_tokens: int) -> dict:
    from llmop.engine.sampling_params import SamplingParams

    rng = random.Random(16)
    first_token = SamplingParams(max_tokens=1, temperature=0.0, ignore_eos=True)  # TTFT is all that is timed
    params = SamplingParams(max_tokens=32, temperature=0.0, ignore_eos=True)
    system = random_ids(rng, system_tokens)
    questions = [random_ids(rng, rng.randint(16, 48)) for _ in range(n_questions)]
    seq = {"on": [], "off": []}
    for i, q in enumerate(questions):  # one at a time, the engines taking turns
        for name, eng in (("on", on), ("off", off)) if i % 2 == 0 else (("off", off), ("on", on)):
            seq[name] += drive(eng, [(system + q, first_token)], f"seq-{name}-{i}")["ttft"]
    system2 = random_ids(rng, system_tokens)
    burst = {name: drive(eng, [(system2 + q, params) for q in questions], f"burst-{name}")
             for name, eng in (("on", on), ("off", off))}
    p50 = {k: statistics.median(v) for k, v in seq.items()}
    b50 = {k: statistics.median(v["ttft"]) for k, v in burst.items()}
    tput = {k: v["generated"] / v["wall_s"] for k, v in burst.items()}
    return {
        "sequential_ttft_p50_s": p50, "sequential_speedup": p50["off"] / p50["on"],
        "burst_ttft_p50_s": b50, "burst_ttft_speedup": b50["off"] / b50["on"],
        "burst_tok_s": tput, "burst_throughput_ratio": tput["on"] / tput["off"],
        "burst_wall_s": {k: v["wall_s"] for k, v in burst.items()},
        "burst_cached_tokens": burst["on"]["cached"],
    }


def no_common_prefix(on, off, rounds: int, n: int) -> dict:
    per_round = []
    for r in range(-1, rounds):  # round -1 warms both engines up on these shapes (Triton compiles) and is dropped
        reqs = random_requests(random.Random(1000 + r), n)
        order = (("on", on), ("off", off)) if r % 2 == 0 else (("off", off), ("on", on))
        res = {name: drive(eng, reqs, f"rand{r}-{name}") for name, eng in order}
        assert res["on"]["cached"] == 0
        if r >= 0:
            per_round.append({k: v["generated"] / v["wall_s"] for k, v in res.items()}
                             | {f"{k}_cpu": v["generated"] / v["cpu_s"] for k, v in res.items()})
    ratios = [x["on"] / x["off"] for x in per_round]
    cpu_ratios = [x["on_cpu"] / x["off_cpu"] for x in per_round]
    return {"rounds": per_round, "ratio_on_off": ratios, "median_ratio": statistics.median(ratios),
            "cpu_ratio_on_off": cpu_ratios, "median_cpu_ratio": statistics.median(cpu_ratios)}


def caching_share(eng, n: int, seed: int = 999) -> dict:
    """One more nothing-in-common round on the caching engine under cProfile: the share of its time
    spent in the prefix cache's own code (hashing, lookups, bookkeeping: engine/prefix_cache.py and
    engine/block_hash.py). With the same model calls as without caching (tests/engine/
    test_scheduler.py pins that), this share is what caching costs, whatever else the machine runs."""
    import cProfile
    import pstats

    reqs = random_requests(random.Random(seed), n)
    prof = cProfile.Profile()
    prof.enable()
    drive(eng, reqs, "profiled")
    prof.disable()
    stats = pstats.Stats(prof).stats
    total = sum(v[2] for v in stats.values())
    own = sum(v[2] for (path, _, _), v in stats.items()
              if path.replace("\\", "/").endswith(("engine/prefix_cache.py", "engine/block_hash.py")))
    return {"profiled_s": total, "caching_code_s": own, "caching_share": own / total}


def hit_rate_workload(n=1000, share=0.6, n_prefixes=5, prefix_len=1024, seed=3):
    rng = random.Random(seed)
    prefixes = [random_ids(rng, prefix_len) for _ in range(n_prefixes)]
    out = []
    for _ in range(n):
        if rng.random() < share:
            out.append(rng.choice(prefixes) + random_ids(rng, rng.randint(16, 64)))
        else:
            out.append(random_ids(rng, rng.randint(64, 512)))
    return out


def simulate(prompts, num_blocks: int, max_tokens=8, max_num_seqs=16, budget=2048) -> dict:
    """The engine's scheduler and block manager, stepped as the engine steps them, without a model."""
    from llmop.engine.block_hash import BlockHasher
    from llmop.engine.block_manager import BlockManager
    from llmop.engine.prefix_cache import PrefixCache
    from llmop.engine.request import Request
    from llmop.engine.sampling_params import SamplingParams
    from llmop.engine.scheduler import Scheduler, SchedulerConfig

    bm = BlockManager(num_blocks, BLOCK)
    cache = PrefixCache(bm, BlockHasher(BLOCK))
    s = Scheduler(SchedulerConfig(max_num_seqs, budget, 4096), bm, cache)
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
    reqs = [Request(f"r{i}", p, params) for i, p in enumerate(prompts)]
    for r in reqs:
        s.add(r)
    steps = 0
    while s.has_work():
        out = s.schedule()
        s.commit(out)
        steps += 1
        for c in out.chunks:
            if c.completes:
                c.request.output_token_ids.append(7)
                if len(c.request.output_token_ids) >= max_tokens:
                    s.finish(c.request, "length")
    return {"num_blocks": num_blocks, "token_hit_rate": cache.hits / cache.queries,
            "request_hit_rate": sum(r.num_cached_tokens > 0 for r in reqs) / len(reqs),
            "hits": cache.hits, "queries": cache.queries, "steps": steps, "preemptions": s.num_preemptions}


def engine_hit_rate(prompts, num_blocks: int, dtype: str) -> dict:
    from llmop.engine.sampling_params import SamplingParams

    probe = engine(True, dtype, kv_cache_memory_bytes=1 << 20)
    block_bytes = probe.kv_spec.bytes_per_block
    del probe
    eng = engine(True, dtype, kv_cache_memory_bytes=num_blocks * block_bytes, max_model_len=4096, max_num_seqs=16)
    assert eng.kv_spec.num_blocks == num_blocks
    res = drive(eng, [(p, SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True)) for p in prompts], "hit")
    st = eng.stats()
    return {"token_hit_rate": st.prefix_cache_hits / st.prefix_cache_queries, "hits": st.prefix_cache_hits,
            "queries": st.prefix_cache_queries, "wall_s": res["wall_s"], "preemptions": st.num_preemptions}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--questions", type=int, default=64)
    ap.add_argument("--system-tokens", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--random-requests", type=int, default=32)
    ap.add_argument("--engine-check", action="store_true")
    ap.add_argument("--model", default=None, help="HF checkpoint directory (default: the embedded SmolLM2-135M)")
    ap.add_argument("--attention-backend", default="auto")
    ap.add_argument("--kv-bytes", type=int, default=1 << 30)
    ap.add_argument("--skip-model", action="store_true", help="only the hit-rate simulation")
    ap.add_argument("--parts", default="hit-rate,system-prompt,no-common-prefix",
                    help="comma-separated subset of hit-rate, system-prompt, no-common-prefix")
    ap.add_argument("--out", default="bench/results/prefix_cache.json")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    ENGINE.update(model=args.model, attention_backend=args.attention_backend)
    result: dict = {"dtype": args.dtype, "threads": args.threads, "model": args.model or "embedded SmolLM2-135M",
                    "device": "cuda" if torch.cuda.is_available() else "cpu"}

    parts = set(args.parts.split(","))
    unknown = parts - {"hit-rate", "system-prompt", "no-common-prefix"}
    if unknown:
        ap.error(f"unknown parts: {sorted(unknown)}")
    if args.skip_model:
        parts &= {"hit-rate"}
    prompts = hit_rate_workload()
    if "hit-rate" in parts:
        t0 = time.monotonic()
        result["hit_rate"] = {"bounded": simulate(prompts, 500), "unbounded": simulate(prompts, 200_000)}
        result["hit_rate"]["simulation_s"] = time.monotonic() - t0
        print(json.dumps(result["hit_rate"], indent=1), flush=True)

    if parts & {"system-prompt", "no-common-prefix"}:
        on = engine(True, args.dtype, kv_cache_memory_bytes=args.kv_bytes)
        off = engine(False, args.dtype, kv_cache_memory_bytes=args.kv_bytes)
        warm = list(range(100, 164))
        from llmop.engine.sampling_params import SamplingParams

        for eng in (on, off):
            drive(eng, [(warm, SamplingParams(max_tokens=4, temperature=0.0))], "warm")
        if "system-prompt" in parts:
            result["shared_system_prompt"] = shared_system_prompt(on, off, args.questions, args.system_tokens)
            print(json.dumps(result["shared_system_prompt"], indent=1), flush=True)
        if "no-common-prefix" in parts:
            result["no_common_prefix"] = no_common_prefix(on, off, args.rounds, args.random_requests)
            result["no_common_prefix"] |= caching_share(on, args.random_requests)
            print(json.dumps(result["no_common_prefix"], indent=1), flush=True)
        del on, off
        if args.engine_check and "hit-rate" in parts:
            result["hit_rate"]["engine_bounded"] = engine_hit_rate(prompts, 500, args.dtype)
            print(json.dumps(result["hit_rate"]["engine_bounded"], indent=1), flush=True)

    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
