"""Multi-LoRA benchmarks (issue 6), each a ratio against a baseline measured in the same run.

1. Step time of a decode batch of 32 requests spread over 1, 4 and 16 distinct adapters (round
   robin), vs the same batch on the base model only (bar: <= 1.3x at 16 adapters). 16 device slots.
2. Throughput (generated tokens/s) with 5 vs 500 registered adapters, adapter popularity following
   a power law (Zipf, alpha = 1) as in S-LoRA, every request arriving at once, lengths varied
   (bar: >= 85% of the 5-adapter throughput at 500). `--max-loras` device slots (default 32, the
   batch size: with 500 adapters a batch of 32 spans ~25 of them), every other adapter in host memory.
3. The naive alternative: merge each adapter into the model's weights and serve its requests as
   one batch, adapter after adapter (the merge and the restore are timed too).

Every configuration has an engine of its own and the engines take turns step by step, so drifts in
this shared machine's speed (30% over minutes) hit them all alike.

Adapters are synthetic (random A and B, rank 16, all seven projections), built in memory: the
benchmarks measure batching and slot traffic, not disk reads. With 500 adapters, their weights are
views of 16 distinct random sets (host memory), but every adapter is a distinct registry entry and
is copied into a device slot on its own.

    .venv/bin/python -P bench/lora.py [--threads 2] [--steps 30] [--requests 128] [--device cpu]
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import statistics
import time

import torch


def random_adapter(name, cfg, rank, seed, dtype):
    from llmop.engine.lora.peft_adapter import TARGET_MODULES, LoraAdapter, module_shapes

    gen = torch.Generator().manual_seed(seed)
    shapes = module_shapes(cfg)
    weights = {}
    for layer in range(cfg.num_layers):
        for m in TARGET_MODULES:
            fin, fout = shapes[m]
            weights[(layer, m)] = ((torch.randn(rank, fin, generator=gen) * 0.02).to(dtype),  # A
                                   (torch.randn(rank, fout, generator=gen) * 0.02).to(dtype))  # B^T
    return LoraAdapter(name, "<memory>", rank, 2.0, frozenset(TARGET_MODULES), weights)


def make_engine(args, **kw):
    from llmop.engine.engine import LLMEngine

    return LLMEngine(None, dtype=args.dtype, device=args.device, max_num_seqs=32, max_num_batched_tokens=1024,
                     kv_cache_memory_bytes=256 << 20, max_lora_rank=args.rank, max_cpu_loras=0, **kw)


def register(eng, n, distinct=16):
    """n adapters, sharing `distinct` random weight sets (each still its own registry entry)."""
    cfg = eng.checkpoint.config
    pool = [random_adapter(f"w{i}", cfg, eng.config.max_lora_rank, i, eng.dtype) for i in range(min(n, distinct))]
    names = []
    for i in range(n):
        name = f"adapter-{i}"
        w = pool[i % len(pool)]
        eng.lora.begin_load(name, "<memory>")
        eng.lora.finish_load(name, type(w)(name, w.source, w.rank, w.scaling, w.target_modules, w.weights))
        names.append(name)
    return names


def greedy(n):
    from llmop.engine.sampling_params import SamplingParams

    return SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True)


# --- 1. step time ---------------------------------------------------------------------------------


def step_times(args) -> dict:
    """One engine per configuration (0 = base only), each with 32 decoding requests; the engines
    take turns a step at a time, so they share the machine's drift; medians of `steps` steps."""
    configs = [0, 1, 4, 16]
    engines = {k: make_engine(args, max_loras=16) for k in configs}
    rng = random.Random(0)
    for k, eng in engines.items():
        names = register(eng, 16, distinct=16)
        vocab = eng.checkpoint.config.vocab_size
        for i in range(32):
            eng.add_request(f"s{k}-{i}", [rng.randrange(100, vocab) for _ in range(16)], greedy(1000),
                            adapter=names[i % k] if k else None)
        while any(t.request.num_computed_tokens < t.request.num_prompt_tokens for t in eng._tracked.values()):
            eng.step()  # prefill
        for _ in range(args.warmup):
            eng.step()
    samples = {k: [] for k in configs}
    for _ in range(args.steps):
        for k, eng in engines.items():
            t0 = time.perf_counter()
            eng.step()
            samples[k].append(time.perf_counter() - t0)
            assert len(slots_used(eng)) == k
    med = {k: statistics.median(v) for k, v in samples.items()}
    return {"base_ms": med[0] * 1e3,
            **{f"{k}_adapters_ms": med[k] * 1e3 for k in configs[1:]},
            **{f"{k}_adapters_ratio": med[k] / med[0] for k in configs[1:]}}


# --- 2. and 3. throughput ------------------------------------------------------------------------
#
# Each configuration runs on an engine of its own, and the engines take turns a step at a time, so
# every one of them sees the same state of this shared machine (whose speed drifts by 30% over
# minutes); a configuration's throughput is its generated tokens over the time of its own steps.


def workload(args, names, seed=1):
    """(prompt, output length, adapter) per request, all arriving at once: adapters Zipf(alpha=1) over
    `names` in popularity order (S-LoRA's power law); prompt and output lengths uniform in [L/2, 3L/2]
    (the same lengths and prompts for every `names`, given the seed: a draw is one random() each)."""
    rng = random.Random(seed)
    cum = list(itertools.accumulate(1 / (i + 1) for i in range(len(names))))
    out = []
    for _ in range(args.requests):
        p = rng.randint(args.prompt_len // 2, args.prompt_len * 3 // 2)
        n = rng.randint(args.output_len // 2, args.output_len * 3 // 2)
        adapter = rng.choices(names, cum_weights=cum)[0]
        out.append(([rng.randrange(100, 40000) for _ in range(p)], n, adapter))
    return out


def slots_used(eng) -> set[int]:
    """Distinct adapter slots of the engine's last step (its ForwardBatch's LoRA mapping)."""
    m = eng.last_batch.lora if eng.last_batch is not None else None
    return set() if m is None or m.token_slots is None else set(m.token_slots) - {-1}


def lora_steps(eng, reqs, tag, seen):
    """Serve every request in one engine, a step per iteration; yields the tokens each step made and
    records (running requests, distinct adapters) per step in `seen`."""
    for i, (prompt, n, a) in enumerate(reqs):
        eng.add_request(f"{tag}-{i}", prompt, greedy(n), adapter=a)
    while eng.has_unfinished():
        outs = eng.step()
        seen.append((len(eng.scheduler.running), len(slots_used(eng))))
        yield sum(len(o.new_token_ids) for o in outs)


class Merged:
    """The naive alternative: the adapter merged into the base weights (W += s B A), then restored."""

    def __init__(self, model):
        self.model = model

    @torch.no_grad()
    def merge(self, adapter):
        from llmop.engine.lora.peft_adapter import module_path

        self.saved = []
        for (layer, m), (a, b_t) in adapter.weights.items():
            w = self.model.get_submodule(module_path(layer, m)).weight
            self.saved.append((w, w.clone()))
            w.add_((adapter.scaling * (b_t.float().t() @ a.float())).to(w.dtype))

    @torch.no_grad()
    def restore(self):
        for w, orig in self.saved:
            w.copy_(orig)


def naive_steps(eng, reqs, adapters, tag):
    """Each adapter's requests as one batch on a merged copy of the weights, adapter after adapter
    (merging and restoring count as part of the next step)."""
    groups: dict[str, list] = {}
    for r in reqs:
        groups.setdefault(r[2], []).append(r)
    merged = Merged(eng.executor.runner.model)
    for a, group in groups.items():
        merged.merge(adapters[a])
        for i, (prompt, n, _) in enumerate(group):
            eng.add_request(f"{tag}-{a}-{i}", prompt, greedy(n))
        while eng.has_unfinished():
            yield sum(len(o.new_token_ids) for o in eng.step())
        merged.restore()


def interleave(runners: dict) -> dict:
    """Advance every generator one step in turn until all finish: name -> (tokens, seconds)."""
    totals = {name: [0, 0.0] for name in runners}
    active = dict(runners)
    while active:
        for name, gen in list(active.items()):
            t0 = time.perf_counter()
            try:
                tokens = next(gen)
            except StopIteration:
                tokens = 0
                del active[name]
            totals[name][0] += tokens
            totals[name][1] += time.perf_counter() - t0
    return {name: tuple(v) for name, v in totals.items()}


def throughput(args) -> dict:
    engines = {n: make_engine(args, max_loras=args.max_loras) for n in (5, 500)}
    plain = {n: make_engine(args, max_loras=args.max_loras) for n in (5, 500)}  # LoRA never enabled
    names = {n: register(engines[n], n) for n in (5, 500)}
    res, rates, seen = {}, {k: [] for k in (5, 500, "naive5", "naive500")}, {5: [], 500: []}
    for rnd in range(args.throughput_rounds):
        reqs = {n: workload(args, names[n], seed=rnd) for n in (5, 500)}
        runners = {}
        for n in (5, 500):
            runners[n] = lora_steps(engines[n], reqs[n], f"t{rnd}-{n}", seen[n])
            adapters = {a: engines[n].lora.registry.host(a) for a in {r[2] for r in reqs[n]}}
            runners[f"naive{n}"] = naive_steps(plain[n], reqs[n], adapters, f"n{rnd}-{n}")
        for name, (tokens, seconds) in interleave(runners).items():
            rates[name].append(tokens / seconds)
        res[f"distinct_adapters_{rnd}"] = len({r[2] for r in reqs[500]})
    for k, v in rates.items():
        res[f"tok_s_{k}"] = statistics.median(v)
    res["ratio_500_vs_5"] = res["tok_s_500"] / res["tok_s_5"]
    res["lora_vs_naive_5"] = res["tok_s_5"] / res["tok_s_naive5"]
    res["lora_vs_naive_500"] = res["tok_s_500"] / res["tok_s_naive500"]
    res["slot_loads_500"] = engines[500].lora.registry.num_slot_loads
    for n in (5, 500):  # per decode-or-prefill step: requests running, adapters in the batch
        res[f"mean_running_{n}"] = statistics.mean(r for r, _ in seen[n])
        res[f"mean_adapters_per_step_{n}"] = statistics.mean(a for _, a in seen[n])
    return res


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--steps", type=int, default=30, help="timed decode steps per step-time configuration")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--requests", type=int, default=128)
    p.add_argument("--prompt-len", type=int, default=32)
    p.add_argument("--output-len", type=int, default=24)
    p.add_argument("--max-loras", type=int, default=32, help="device slots in the throughput runs")
    p.add_argument("--throughput-rounds", type=int, default=1)
    p.add_argument("--skip", choices=["step", "throughput"], default=None)
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    out = {"device": args.device, "dtype": args.dtype, "threads": torch.get_num_threads(), "rank": args.rank}
    if args.skip != "step":
        out["step_time"] = step_times(args)
        print(json.dumps(out["step_time"], indent=1), flush=True)
    if args.skip != "throughput":
        out["throughput"] = throughput(args)
        print(json.dumps(out["throughput"], indent=1), flush=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
