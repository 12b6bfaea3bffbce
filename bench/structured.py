"""Structured output's cost (issue 18): 16 concurrent requests with a JSON schema vs the same without.

Two engines on the embedded model take turns, one step each, so they see the same machine (its
speed drifts by tens of percent over minutes on shared CPUs): one runs 16 requests constrained by a
JSON schema (greedy, each ending when its grammar does), the other the same 16 prompts free, each
with max_tokens set to the length its constrained twin produced and ignore_eos, so both generate
the same number of tokens. Reported: generated tokens per second of each and their ratio (bar:
the schema costs <= 15%), where the grammar's per-step time goes (mask fill on the engine thread,
mask application in the sampler), and the schema's compile time, cold and from the cache.

    .venv/bin/python -P bench/structured.py [--rounds 5] [--device cpu] [--dtype float32]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 40},
    "age": {"type": "integer", "minimum": 0, "maximum": 120},
    "email": {"type": "string", "pattern": "^[a-z]{2,12}@[a-z]{2,12}\\.(com|org)$"},
    "tags": {"type": "array", "items": {"type": "string", "enum": ["admin", "dev", "ops", "guest"]}, "maxItems": 4},
    "address": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30},
                                                 "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                "required": ["city", "zip"], "additionalProperties": False},
}, "required": ["name", "age", "email", "tags", "address"], "additionalProperties": False}
PROMPTS = [f"User record {i} for the staff directory of a {kind} company, as JSON:"
           for i, kind in enumerate(["shipping", "bakery", "robotics", "insurance"] * 4)]


class Timed:
    """Wraps a function and adds up the time spent in it."""

    def __init__(self, owner, name):
        self.fn, self.total, self.calls = getattr(owner, name), 0.0, 0
        setattr(owner, name, self)

    def __call__(self, *a, **kw):
        t0 = time.perf_counter()
        try:
            return self.fn(*a, **kw)
        finally:
            self.total += time.perf_counter() - t0
            self.calls += 1


def run_pair(grammar_engine, free_engine, grammar_params, free_params, prompt_ids):
    """Both workloads, stepped in turn; returns (seconds, tokens) per engine."""
    out = {}
    for tag, eng, params in (("grammar", grammar_engine, grammar_params), ("free", free_engine, free_params)):
        for i, (ids, p) in enumerate(zip(prompt_ids, params)):
            eng.add_request(f"{tag}-{time.monotonic_ns()}-{i}", ids, p)
        out[tag] = [0.0, 0, []]
    engines = [("grammar", grammar_engine), ("free", free_engine)]
    while any(e.has_unfinished() for _, e in engines):
        for tag, eng in engines:
            if not eng.has_unfinished():
                continue
            t0 = time.perf_counter()
            outs = eng.step()
            out[tag][0] += time.perf_counter() - t0
            out[tag][1] += sum(len(o.new_token_ids) for o in outs)
            out[tag][2] += outs
    return out


def main() -> None:
    from llmop.engine.engine import LLMEngine
    from llmop.engine.grammar.compiler import GrammarCompiler
    from llmop.engine.grammar.spec import GrammarSpec
    from llmop.engine import sampler as sampler_mod
    from llmop.engine import engine as engine_mod
    from llmop.engine.sampling_params import SamplingParams

    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    def engine():
        return LLMEngine(None, dtype=args.dtype, device=args.device, max_num_seqs=16, max_num_batched_tokens=1024,
                         kv_cache_memory_bytes=256 << 20)

    g_eng, f_eng = engine(), engine()
    tok = g_eng.tokenizer
    prompt_ids = [tok.apply_chat_template([{"role": "user", "content": p}]) for p in PROMPTS]
    spec = GrammarSpec.json_schema(SCHEMA)

    # Compile time: cold (a fresh compiler, vocabulary already built) and from the cache.
    fresh = GrammarCompiler(tok, g_eng.vocab_size)
    t0 = time.perf_counter()
    fresh.warm().result()
    vocab_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    fresh.submit(spec).result()
    cold_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    fresh.submit(spec).result()
    cached_s = time.perf_counter() - t0
    fresh.shutdown()
    print(f"grammar vocabulary built in {vocab_s:.2f} s; schema compile cold {cold_s * 1e3:.1f} ms, "
          f"cached {cached_s * 1e6:.0f} us", flush=True)

    grammar_params = [SamplingParams(max_tokens=300, temperature=0.0, grammar=spec)] * len(PROMPTS)
    g_eng.grammars.submit(spec).result()
    # Warm-up round: also learns each constrained request's length.
    warm = run_pair(g_eng, f_eng, grammar_params, [SamplingParams(max_tokens=4, temperature=0.0)] * len(PROMPTS),
                    prompt_ids)
    lengths = {}
    for o in warm["grammar"][2]:
        lengths[o.request_id] = o.num_output_tokens
    ordered = [lengths[k] for k in sorted(lengths, key=lambda r: int(r.rsplit("-", 1)[1]))]
    texts = {}
    for o in warm["grammar"][2]:
        texts[o.request_id] = texts.get(o.request_id, "") + o.new_text
    for t in texts.values():
        json.loads(t)
    free_params = [SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True) for n in ordered]
    print(f"constrained output lengths: {ordered} (sum {sum(ordered)})", flush=True)

    fill = Timed(engine_mod, "fill_bitmasks")
    apply = Timed(sampler_mod, "apply_token_bitmask")
    ratios, rows = [], []
    for r in range(args.rounds):
        fill.total = apply.total = 0.0
        fill.calls = apply.calls = 0
        res = run_pair(g_eng, f_eng, grammar_params, free_params, prompt_ids)
        g_tps = res["grammar"][1] / res["grammar"][0]
        f_tps = res["free"][1] / res["free"][0]
        ratios.append(g_tps / f_tps)
        rows.append((r, f_tps, g_tps, g_tps / f_tps, fill.total / max(fill.calls, 1) * 1e3,
                     apply.total / max(apply.calls, 1) * 1e3, res["grammar"][0] / max(fill.calls, 1) * 1e3))
        print(f"round {r}: free {f_tps:.1f} tok/s, schema {g_tps:.1f} tok/s, ratio {g_tps / f_tps:.3f}; "
              f"per grammar step: mask fill {rows[-1][4]:.2f} ms, mask apply {rows[-1][5]:.2f} ms, "
              f"step {rows[-1][6]:.1f} ms", flush=True)
    print("\n| round | free tok/s | schema tok/s | schema / free | mask fill ms/step | mask apply ms/step | step ms |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        print("| {} | {:.1f} | {:.1f} | {:.3f} | {:.2f} | {:.2f} | {:.1f} |".format(*row))
    print(f"\nmedian schema / free: {statistics.median(ratios):.3f} (cost {100 * (1 - statistics.median(ratios)):.1f}%)")


if __name__ == "__main__":
    main()
