"""Speculative decoding (n-gram prompt lookup) vs none, two engines stepped in turn in one run.

1. Single stream whose output repeats its input (the model is asked to rewrite a given code block,
   greedy): decode tokens/s with speculation vs without (bar, issue 19: >= 1.8x) and the acceptance
   rate; the texts are checked equal.
2. 32 concurrent ordinary requests (`bench/throughput.py`'s workload: random prompts, Pareto output
   lengths): throughput with speculation enabled vs disabled (bar: >= 0.97x). Above
   `max_batch_size` running requests speculation switches itself off, and random text rarely
   matches an n-gram.

    .venv/bin/python -P bench/speculative.py [--threads 2] [--dtype auto]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import time
from pathlib import Path

import torch

CODE = '''def parse_config(path):
    with open(path) as f:
        lines = f.readlines()
    config = {}
    for line in lines:
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, value = line.split("=", 1)
        config[key.strip()] = value.strip()
    return config


def merge_configs(base, override):
    merged = dict(base)
    for key, value in override.items():
        merged[key] = value
    return merged
'''
REWRITE = "Rewrite the following Python code exactly, adding type hints:\n\n" + CODE + "\nRewritten code:\n"


def step_in_turn(engines: dict, on_outputs=None) -> dict:
    """Step every engine with work, one step each per round; per engine (tokens, seconds).
    `on_outputs(name, outputs)` sees every step's outputs."""
    totals = {n: [0, 0.0] for n in engines}
    while any(e.has_unfinished() for e in engines.values()):
        for n, e in engines.items():
            if e.has_unfinished():
                t0 = time.perf_counter()
                outs = e.step()
                totals[n][1] += time.perf_counter() - t0
                totals[n][0] += sum(len(o.new_token_ids) for o in outs)
                if on_outputs is not None:
                    on_outputs(n, outs)
    return {n: tuple(v) for n, v in totals.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--single-tokens", type=int, default=256)
    ap.add_argument("--requests", type=int, default=32)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from llmop.engine.engine import LLMEngine
    from llmop.engine.sampling_params import SamplingParams

    common = dict(dtype=args.dtype, max_num_seqs=64, max_num_batched_tokens=1024, kv_cache_memory_bytes=1 << 30)
    engines = {"off": LLMEngine(**common), "ngram": LLMEngine(**common, speculative={"method": "ngram"})}
    ids = engines["off"].tokenizer.encode(REWRITE)
    greedy = SamplingParams(max_tokens=args.single_tokens, temperature=0.0, ignore_eos=True)
    texts = {}
    for n, e in engines.items():  # warm-up, and the prefill, outside the timed decode
        e.add_request(f"{n}-warm", ids[:16], SamplingParams(max_tokens=4, temperature=0.0))
        while e.has_unfinished():
            e.step()
    for n, e in engines.items():
        e.add_request("single", ids, greedy)
        out = e.step()  # prefill + first token
        texts[n] = list(out[0].new_token_ids)
    decode = step_in_turn(engines, lambda n, outs: texts[n].extend(t for o in outs for t in o.new_token_ids))
    c = engines["ngram"].speculator.counters
    single = {n: round(tok / sec, 2) for n, (tok, sec) in decode.items()}
    result = {"threads": args.threads, "dtype": str(engines["off"].dtype).removeprefix("torch."),
              "single_stream_decode_tok_s": single, "single_stream_ratio": round(single["ngram"] / single["off"], 3),
              "single_stream_bar_1.8_met": single["ngram"] / single["off"] >= 1.8,
              "same_tokens": texts["off"] == texts["ngram"],
              "acceptance_rate": round(c.accepted_tokens / max(1, c.draft_tokens), 3),
              "tokens_per_draft_step": round(1 + c.accepted_tokens / max(1, c.drafts), 2)}

    spec = importlib.util.spec_from_file_location("bench_throughput", Path(__file__).with_name("throughput.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    reqs = mod.workload(args.requests, engines["off"].vocab_size, seed=3)
    for n, e in engines.items():
        for i, (prompt, olen) in enumerate(reqs):
            e.add_request(f"{n}-{i}", prompt, SamplingParams(max_tokens=olen, temperature=0.0, ignore_eos=True))
    drafts_before = c.drafts
    rates = {n: round(tok / sec, 1) for n, (tok, sec) in step_in_turn(engines).items()}
    result.update({"concurrent_tok_s": rates, "concurrent_ratio": round(rates["ngram"] / rates["off"], 3),
                   "concurrent_bar_0.97_met": rates["ngram"] / rates["off"] >= 0.97,
                   "concurrent_drafts": c.drafts - drafts_before})
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
