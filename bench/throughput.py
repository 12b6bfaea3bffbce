"""Offline throughput: llmop's continuous batching vs Hugging Face `generate`, in one run.

Workload (issue 2): N requests, prompt lengths uniform in [32, 512] tokens, output lengths from a
Pareto distribution (shape 1.5, scale 20, capped at 512), ignore_eos. Baselines: HF one request at a
time (on a subset; its rate is per token) and HF static batches of 16 with left padding, each batch
running until its longest member is done (only the tokens each request asked for count).
Also: single-request decode tok/s and time to first token for a 128-token prompt.

    .venv/bin/python -P bench/throughput.py [--requests 64] [--dtype auto] [--quantization auto] [--skip-hf]

`--dtype auto --quantization auto` (the defaults) are the engine's choices for this machine: bf16
with AMX, else fp32 activations with fp16 weights (docs/engine.md). HF runs at its fastest dtype on
the machine (`--hf-dtype auto`: bf16 on a CPU with AVX-512 BF16 or AMX, fp32 without, as
`dtype: auto` alone picks), which need not be the engine's.
"""

from __future__ import annotations

import argparse
import json
import random
import time

import torch


def workload(n: int, vocab: int, seed: int = 0) -> list[tuple[list[int], int]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        plen = rng.randint(32, 512)
        olen = min(512, int(20 * (1 - rng.random()) ** (-1 / 1.5)))  # Pareto(shape 1.5, scale 20)
        out.append(([rng.randrange(100, vocab) for _ in range(plen)], max(1, olen)))
    return out


def bench_llmop(reqs, dtype: str, max_num_seqs: int, max_num_batched_tokens: int = 1024,
                quantization: str = "none") -> dict:
    from llmop.engine.llm import LLM
    from llmop.engine.sampling_params import SamplingParams

    llm = LLM(None, dtype=dtype, max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
              kv_cache_memory_bytes=2 << 30, quantization=quantization)
    llm.generate([reqs[0][0][:32]], SamplingParams(max_tokens=4, temperature=0.0))  # warm-up
    occupancy = []

    def on_step(engine):
        st = engine.stats()
        if st.num_waiting > 0:
            occupancy.append(st.num_running / max_num_seqs)

    params = [SamplingParams(max_tokens=o, temperature=0.0, ignore_eos=True) for _, o in reqs]
    t0 = time.perf_counter()
    outs = llm.generate([p for p, _ in reqs], params, on_step=on_step)
    dt = time.perf_counter() - t0
    gen = sum(len(o.token_ids) for o in outs)
    assert gen == sum(o for _, o in reqs)

    # Single request: TTFT for a 128-token prompt, then decode rate.
    prompt = reqs[1][0][:128]
    eng = llm.engine
    eng.add_request("single", prompt, SamplingParams(max_tokens=129, temperature=0.0, ignore_eos=True))
    t_start = time.perf_counter()
    first = None
    n = 0
    while eng.has_unfinished():
        for o in eng.step():
            n += len(o.new_token_ids)
            if first is None and o.new_token_ids:
                first = time.perf_counter()
    t_end = time.perf_counter()
    return {
        "gen_tokens": gen, "seconds": dt, "tok_per_s": gen / dt,
        "occupancy_while_queued": sum(occupancy) / len(occupancy) if occupancy else None,
        "ttft_128_s": first - t_start, "single_decode_tok_per_s": (n - 1) / (t_end - first),
        "load_s": llm.engine.load_seconds,
    }


def load_hf(dtype: str):
    from transformers import AutoModelForCausalLM

    from llmop.engine.checkpoint import embedded_model_path

    p = embedded_model_path()
    model = AutoModelForCausalLM.from_pretrained(str(p.parent), gguf_file=p.name, dtype=torch.float32)
    return model.to(getattr(torch, dtype)).eval()


@torch.inference_mode()
def bench_hf_single(model, reqs) -> dict:
    gen, t0 = 0, time.perf_counter()
    for ids, n in reqs:
        model.generate(torch.tensor([ids]), max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=0)
        gen += n
    dt = time.perf_counter() - t0
    return {"gen_tokens": gen, "seconds": dt, "tok_per_s": gen / dt, "requests": len(reqs)}


@torch.inference_mode()
def bench_hf_static(model, reqs, batch: int = 16) -> dict:
    gen, t0 = 0, time.perf_counter()
    for i in range(0, len(reqs), batch):
        group = reqs[i : i + batch]
        width = max(len(p) for p, _ in group)
        ids = torch.tensor([[0] * (width - len(p)) + p for p, _ in group])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p, _ in group])
        longest = max(n for _, n in group)
        model.generate(ids, attention_mask=mask, max_new_tokens=longest, min_new_tokens=longest,
                       do_sample=False, pad_token_id=0)
        gen += sum(n for _, n in group)  # tokens the requests asked for; padding steps are waste
    dt = time.perf_counter() - t0
    return {"gen_tokens": gen, "seconds": dt, "tok_per_s": gen / dt, "batch": batch}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16"])
    ap.add_argument("--quantization", default="auto", choices=["auto", "none", "int8", "fp16"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-num-seqs", type=int, default=64)
    ap.add_argument("--max-num-batched-tokens", type=int, default=1024)
    ap.add_argument("--hf-single-requests", type=int, default=6)
    ap.add_argument("--skip-hf", action="store_true")
    ap.add_argument("--hf-dtype", default="auto", choices=["auto", "float32", "bfloat16"],
                    help="HF's dtype; auto: its fastest on this CPU (bf16 with AVX-512 BF16/AMX, else fp32)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    # The engine's defaults and HF's fastest dtype, made concrete here for the report.
    from llmop.engine.device_caps import resolve_dtype, resolve_precision

    precision = resolve_precision(args.dtype, args.quantization, torch.device("cpu"))
    args.dtype = str(precision.dtype).removeprefix("torch.")
    args.quantization = precision.quantization
    args.hf_dtype = str(resolve_dtype(args.hf_dtype, torch.device("cpu"), "none")[0]).removeprefix("torch.")
    reqs = workload(args.requests, vocab=49152)
    result = {"workload": {"requests": len(reqs), "prompt_tokens": sum(len(p) for p, _ in reqs),
                           "gen_tokens": sum(o for _, o in reqs), "dtype": args.dtype,
                           "quantization": args.quantization, "hf_dtype": args.hf_dtype, "threads": args.threads}}
    result["llmop"] = bench_llmop(reqs, args.dtype, args.max_num_seqs, args.max_num_batched_tokens, args.quantization)
    print(json.dumps(result, indent=1), flush=True)
    if not args.skip_hf:
        model = load_hf(args.hf_dtype)
        result["hf_static16"] = bench_hf_static(model, reqs)
        print(json.dumps(result["hf_static16"]), flush=True)
        result["hf_single"] = bench_hf_single(model, reqs[: args.hf_single_requests])
        for k in ("hf_static16", "hf_single"):
            result[f"llmop_over_{k}"] = result["llmop"]["tok_per_s"] / result[k]["tok_per_s"]
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
