"""Decode speed of engine configurations side by side: engines stepped in turn, one step each.

Each configuration (dtype, quantization, KV dtype) gets an engine of its own, holding `--batch`
sequences of a 128-token random prompt; the engines take turns a step at a time, so a shared
machine's drift hits all of them alike. Reported per configuration: the prefill step (TTFT of the
batch), decode step time (median of `--steps`), decode tok/s, and the ratio to the first
configuration. Works on CUDA too (`--device cuda`: add `--configs bf16,int8,bf16-kvfp8`).

    .venv/bin/python -P bench/decode_speed.py --batch 1 --configs fp32,bf16,int8
    .venv/bin/python -P bench/decode_speed.py --batch 16 --configs bf16,int8
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time

import torch

CONFIGS = {
    "fp32": dict(dtype="float32"),
    "bf16": dict(dtype="bfloat16"),
    "int8": dict(dtype="bfloat16", quantization="int8"),
    "int8-fp32": dict(dtype="float32", quantization="int8"),
    "bf16-kvfp8": dict(dtype="bfloat16", kv_cache_dtype="fp8_e4m3"),
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--configs", default="fp32,bf16,int8")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="auto")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from llmop.engine.engine import LLMEngine
    from llmop.engine.sampling_params import SamplingParams

    engines = {}
    for name in args.configs.split(","):
        eng = LLMEngine(device=args.device, kv_cache_memory_bytes=512 << 20, max_num_seqs=max(args.batch, 1),
                        max_num_batched_tokens=max(1024, args.batch * args.prompt), **CONFIGS[name])
        rng = random.Random(0)
        for i in range(args.batch):
            eng.add_request(f"r{i}", [rng.randrange(100, 49000) for _ in range(args.prompt)],
                            SamplingParams(max_tokens=args.steps + 8, temperature=0.0, ignore_eos=True))
        engines[name] = eng
    prefill, decode = {}, {n: [] for n in engines}
    for name, eng in engines.items():
        t = time.perf_counter()
        eng.step()
        prefill[name] = time.perf_counter() - t
    for _ in range(args.steps):
        for name, eng in engines.items():
            t = time.perf_counter()
            eng.step()
            decode[name].append(time.perf_counter() - t)
    first = None
    rows = []
    for name in engines:
        step = statistics.median(decode[name][2:])
        first = first or step
        rows.append({"config": name, "batch": args.batch, "prefill_s": round(prefill[name], 3),
                     "decode_step_ms": round(step * 1e3, 1), "decode_tok_s": round(args.batch / step, 1),
                     "speedup_vs_first": round(first / step, 2)})
        print(json.dumps(rows[-1]), flush=True)
    print("\n| config | batch | prefill step (s) | decode step (ms) | decode tok/s | vs first |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['config']} | {r['batch']} | {r['prefill_s']} | {r['decode_step_ms']} | {r['decode_tok_s']} "
              f"| {r['speedup_vs_first']}x |")


if __name__ == "__main__":
    main()
