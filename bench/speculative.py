"""Speculative decoding (n-gram prompt lookup, a draft model) vs none, engines stepped in turn in one run.

1. Single stream whose output repeats its input (the model is asked to rewrite a given code block,
   greedy): decode tokens/s with speculation vs without (bar for n-gram, issue 19: >= 1.8x) and the
   acceptance rate; the texts are checked equal.
2. 32 concurrent ordinary requests (`bench/throughput.py`'s workload: random prompts, Pareto output
   lengths): throughput with speculation enabled vs disabled (bar: >= 0.97x). Above
   `max_batch_size` running requests speculation switches itself off, and random text rarely
   matches an n-gram.

The draft model is the embedded model cut after its first `--draft-layers` layers
(`engine/draft_checkpoint.py`, from the HF copy the engine tests cache), or `--draft-model PATH`.

    .venv/bin/python -P bench/speculative.py [--threads 2] [--dtype auto] [--draft-layers 4]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import tempfile
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


HF_COPY = Path(os.environ.get("LLMOP_CACHE", Path.home() / ".cache" / "llmop")) / "test-models" / "smollm2-135m-instruct-hf"


def draft_model(args, workdir: str) -> str:
    """--draft-model, else the embedded model's first --draft-layers layers (written to workdir)."""
    if args.draft_model:
        return args.draft_model
    if not (HF_COPY / "model.safetensors").exists():
        raise SystemExit(f"no HF copy of the embedded model at {HF_COPY}: run tests/engine once, or pass --draft-model")
    from llmop.engine.draft_checkpoint import truncate_checkpoint

    return str(truncate_checkpoint(HF_COPY, args.draft_layers, Path(workdir) / "draft"))


def ratio(rates: dict, name: str) -> float:
    return round(rates[name] / rates["off"], 3)


def acceptance(engine) -> dict:
    c = engine.speculator.counters
    return {"acceptance_rate": round(c.accepted_tokens / max(1, c.draft_tokens), 3),
            "tokens_per_draft_step": round(1 + c.accepted_tokens / max(1, c.drafts), 2)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--single-tokens", type=int, default=256)
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--draft-layers", type=int, default=4)
    ap.add_argument("--draft-model", default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from llmop.engine.engine import LLMEngine
    from llmop.engine.sampling_params import SamplingParams

    common = dict(dtype=args.dtype, max_num_seqs=64, max_num_batched_tokens=1024, kv_cache_memory_bytes=1 << 30)
    workdir = tempfile.TemporaryDirectory()
    engines = {"off": LLMEngine(**common), "ngram": LLMEngine(**common, speculative={"method": "ngram"}),
               "draft": LLMEngine(**common, speculative={"method": "draft", "draft_model": draft_model(args, workdir.name)})}
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
    single = {n: round(tok / sec, 2) for n, (tok, sec) in decode.items()}
    result = {"threads": args.threads, "dtype": str(engines["off"].dtype).removeprefix("torch."),
              "quantization": engines["off"].config.quantization,
              "draft_layers": None if args.draft_model else args.draft_layers,
              "single_stream_decode_tok_s": single,
              "single_stream_ratio": {n: ratio(single, n) for n in ("ngram", "draft")},
              "single_stream_bar_1.8_met_by_ngram": ratio(single, "ngram") >= 1.8,
              "same_tokens": {n: texts["off"] == texts[n] for n in ("ngram", "draft")},
              "single_stream": {n: acceptance(engines[n]) for n in ("ngram", "draft")}}

    spec = importlib.util.spec_from_file_location("bench_throughput", Path(__file__).with_name("throughput.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    reqs = mod.workload(args.requests, engines["off"].vocab_size, seed=3)
    for n, e in engines.items():
        for i, (prompt, olen) in enumerate(reqs):
            e.add_request(f"{n}-{i}", prompt, SamplingParams(max_tokens=olen, temperature=0.0, ignore_eos=True))
    drafts_before = {n: engines[n].speculator.counters.drafts for n in ("ngram", "draft")}
    rates = {n: round(tok / sec, 1) for n, (tok, sec) in step_in_turn(engines).items()}
    result.update({"concurrent_tok_s": rates, "concurrent_ratio": {n: ratio(rates, n) for n in ("ngram", "draft")},
                   "concurrent_bar_0.97_met": {n: ratio(rates, n) >= 0.97 for n in ("ngram", "draft")},
                   "concurrent_drafts": {n: engines[n].speculator.counters.drafts - b for n, b in drafts_before.items()}})
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
