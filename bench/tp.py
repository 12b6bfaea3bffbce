"""Tensor parallelism and worker processes: what the RPC to workers costs, and TP=1 vs TP=3.

Three engines on the embedded model serve the same `bench/throughput.py` workload, stepped in turn
(one step each, round after round), so each sees the same state of this shared machine; an
engine's throughput is its generated tokens over the time of its own steps:
  inprocess  TP=1, the model in the engine's process (the default)
  worker     TP=1, the model in one worker process (every step pickles a ForwardBatch both ways)
  tp3        TP=3, three worker processes over gloo (on a 2-core CPU this is for correctness; the
             ranks share the cores)
The bar (issue 14): worker >= 0.95 x inprocess. Also the median decode-only step time of each.

    .venv/bin/python -P bench/tp.py [--requests 32] [--threads 2] [--configs inprocess,worker,tp3]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import time
from pathlib import Path

import torch

CONFIGS = {"inprocess": {}, "worker": {"worker_processes": True}, "tp3": {"tensor_parallel_size": 3}}


def throughput_workload(n: int, vocab: int):
    spec = importlib.util.spec_from_file_location("bench_throughput", Path(__file__).with_name("throughput.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.workload(n, vocab)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--configs", default=",".join(CONFIGS))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from llmop.engine.engine import LLMEngine
    from llmop.engine.sampling_params import SamplingParams

    names = args.configs.split(",")
    engines = {n: LLMEngine(dtype=args.dtype, max_num_seqs=32, max_num_batched_tokens=1024,
                            kv_cache_memory_bytes=512 << 20, **CONFIGS[n]) for n in names}
    try:
        reqs = throughput_workload(args.requests, engines[names[0]].vocab_size)
        for n, eng in engines.items():
            eng.add_request("warm-up", reqs[0][0][:32], SamplingParams(max_tokens=4, temperature=0.0))
            while eng.has_unfinished():
                eng.step()
            for i, (prompt, olen) in enumerate(reqs):
                eng.add_request(f"{n}-{i}", prompt, SamplingParams(max_tokens=olen, temperature=0.0, ignore_eos=True))
        tokens = {n: 0 for n in names}
        seconds = {n: 0.0 for n in names}
        decode_steps: dict[str, list[float]] = {n: [] for n in names}
        while any(e.has_unfinished() for e in engines.values()):
            for n, eng in engines.items():
                if not eng.has_unfinished():
                    continue
                t0 = time.perf_counter()
                outs = eng.step()
                dt = time.perf_counter() - t0
                seconds[n] += dt
                tokens[n] += sum(len(o.new_token_ids) for o in outs)
                b = eng.last_batch
                if b is not None and all(q == 1 for q in b.query_lens):
                    decode_steps[n].append(dt)
        result = {"machine_threads": args.threads, "requests": args.requests, "dtype": args.dtype}
        for n in names:
            result[n] = {"tokens": tokens[n], "seconds": round(seconds[n], 2),
                         "tokens_per_s": round(tokens[n] / seconds[n], 1),
                         "median_decode_step_ms": round(1e3 * statistics.median(decode_steps[n]), 2)
                         if decode_steps[n] else None,
                         "weight_mib_per_rank": [round(r.weight_bytes / 2**20, 1) for r in engines[n].executor.describe()]}
        base = result[names[0]]["tokens_per_s"]
        for n in names[1:]:
            result[n]["ratio_to_" + names[0]] = round(result[n]["tokens_per_s"] / base, 3)
        if "worker" in names and "inprocess" in names:
            ratio = result["worker"]["tokens_per_s"] / result["inprocess"]["tokens_per_s"]
            result["worker_bar_0.95_met"] = ratio >= 0.95
        print(json.dumps(result, indent=2))
    finally:
        for eng in engines.values():
            eng.shutdown()


if __name__ == "__main__":
    main()
