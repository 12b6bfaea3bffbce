"""Where one engine step's time goes: a decode step of `--batch` sequences, by part of the step.

The step is first timed without a profiler (median of `--steps`); then cProfile records the same
number of steps and each part's cumulative time is reported as a share of the profiled step, scaled
to the unprofiled median (cProfile's own per-call cost inflates parts with many small calls, so
shares are approximate). Parts: the layers' matmuls, the LM head, attention (KV write and decode),
RMSNorm, RoPE, the rest of the forward (module calls, embedding, SiLU, residual adds), the
runner's tensor building, sampling, and the host's scheduling and bookkeeping.

    .venv/bin/python -P bench/step_profile.py --batch 1 --threads 1
"""

from __future__ import annotations

import argparse
import cProfile
import inspect
import pstats
import random
import statistics
import time

import torch

# part -> (file suffix, function name) whose cumulative time it is
PARTS = {
    "step": ("engine/engine.py", "step"),
    "runner": ("engine/model_runner.py", "execute"),
    "forward": ("engine/model.py", "forward"),  # LlamaForCausalLM.forward: the largest of the model's forwards
    "linear": ("engine/linear.py", "linear"),
    "lm_head": ("engine/model.py", "compute_logits"),
    "attention": ("engine/attention_kernels.py", "forward"),
    "attention_plan": ("engine/attention_kernels.py", "prepare"),
    "rms_norm": ("engine/model.py", "forward@RMSNorm"),
    "rope": ("engine/rope.py", "apply_rope"),
    "inputs": ("engine/model_runner.py", "_inputs"),
    "sample": ("engine/sampler.py", "sample"),
}


def cumulative(stats: pstats.Stats, suffix: str, name: str) -> float:
    """Cumulative seconds of `name` in files ending with `suffix` (the largest entry, which for a
    `forward` name is the outermost; `forward@RMSNorm` picks RMSNorm's by its line number)."""
    times = [(line, ct) for (path, line, fn), (_, _, _, ct, _) in stats.stats.items()
             if path.endswith(suffix) and fn == name.split("@")[0]]
    if "@" in name:
        from llmop.engine import model

        line = inspect.getsourcelines(getattr(model, name.split("@")[1]).forward)[1]
        return sum(ct for ln, ct in times if ln == line)
    return max((ct for _, ct in times), default=0.0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--dtype", default="float32")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from llmop.engine.engine import LLMEngine
    from llmop.engine.sampling_params import SamplingParams

    eng = LLMEngine(device="cpu", kv_cache_memory_bytes=512 << 20, max_num_seqs=args.batch,
                    max_num_batched_tokens=max(1024, args.batch * 128), dtype=args.dtype)
    rng = random.Random(0)
    for i in range(args.batch):
        eng.add_request(f"r{i}", [rng.randrange(100, 49000) for _ in range(128)],
                        SamplingParams(max_tokens=3 * args.steps + 8, temperature=0.0, ignore_eos=True))
    for _ in range(4):  # the prefill and warm-up decodes
        eng.step()
    times = []
    for _ in range(args.steps):
        t = time.perf_counter()
        eng.step()
        times.append(time.perf_counter() - t)
    step_ms = statistics.median(times) * 1e3
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(args.steps):
        eng.step()
    prof.disable()
    stats = pstats.Stats(prof)
    t = {part: cumulative(stats, *where) for part, where in PARTS.items()}
    lm_head_matmul = t["lm_head"]
    parts = {
        "matmuls in the layers": t["linear"] - lm_head_matmul,
        "LM head (matmul of the logits rows)": lm_head_matmul,
        "attention: KV write + decode": t["attention"],
        "RMSNorm": t["rms_norm"],
        "RoPE": t["rope"],
        "rest of the forward (module calls, embedding, SiLU, adds)":
            t["forward"] - (t["linear"] - lm_head_matmul) - t["attention"] - t["rms_norm"] - t["rope"],
        "runner: batch tensors + attention plan": t["inputs"] + t["attention_plan"],
        "sampling": t["sample"],
    }
    parts["host: schedule, batch building, postprocess"] = t["step"] - sum(parts.values())
    print(f"decode step, batch {args.batch}, {args.dtype}, {args.threads} thread(s): median {step_ms:.1f} ms "
          f"unprofiled, {t['step'] / args.steps * 1e3:.1f} ms under cProfile")
    print("\n| part | ms per step (scaled) | share |")
    print("|---|---|---|")
    for name, sec in parts.items():
        share = sec / t["step"]
        print(f"| {name} | {share * step_ms:.1f} | {share:.0%} |")


if __name__ == "__main__":
    main()
