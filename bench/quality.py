"""Accuracy of the engine's speed options: perplexity on a fixed text and greedy agreement with fp32.

Each configuration (dtype, quantization, KV cache dtype) runs the embedded SmolLM2-135M over the
same token ids: a fixed text (the Zen of Python and the docstrings of `json` and `difflib`, all from
the standard library, so the text is the same wherever a given Python runs), one prefill pass
through the engine's own model, attention and KV cache. Reported per configuration:
- perplexity of the text;
- teacher-forced top-1 agreement with the fp32 model: at each position, is the most likely next
  token the same (this does not compound the way free-running greedy decoding does);
- free-running greedy agreement: tokens of 24-token greedy continuations of a few prompts that
  equal fp32's, position by position (one early difference changes everything after it).

    .venv/bin/python -P bench/quality.py [--configs fp32,bf16,int8,int8-fp32,bf16-kv16]
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import io
import json
import math

import torch

CONFIGS = {
    "auto": dict(),  # the engine's defaults on this machine
    "fp32": dict(dtype="float32"),
    "bf16": dict(dtype="bfloat16"),
    "int8": dict(dtype="bfloat16", quantization="int8"),
    "int8-fp32": dict(dtype="float32", quantization="int8"),
    "fp16w": dict(dtype="float32", quantization="fp16"),
    "fp32-kv-bf16": dict(dtype="float32", kv_cache_dtype="bfloat16"),
}
PROMPTS = ["The Kubernetes operator pattern is", "def fibonacci(n):\n    ",
           "Question: what is 17 times 23?\nAnswer:", "Paris is the capital of France. Berlin is the capital of",
           "Il était une fois, dans un petit village,", "Here is a shopping list:\n1. eggs\n2."]


def fixed_text() -> str:
    with contextlib.redirect_stdout(io.StringIO()) as zen:
        import this  # noqa: F401  (prints the Zen of Python on first import)
    return "\n\n".join([zen.getvalue(), json.__doc__, difflib.__doc__])


def text_logits(engine, ids: list[int]) -> torch.Tensor:
    """float32 logits [len(ids), vocab] of one sequence, in one step of the engine (every row's logits)."""
    from llmop.engine.sampling_params import SamplingParams

    engine.add_request("quality-probe", list(ids), SamplingParams(max_tokens=1))
    out = engine.scheduler.schedule()
    if out.num_batched_tokens != len(ids):
        raise ValueError(f"the text ({len(ids)} tokens) does not fit one step: raise max_num_batched_tokens")
    logits = engine.executor.logits(engine.build_batch(out, all_logits=True))
    engine.abort("quality-probe")
    return logits


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from llmop.engine.llm import LLM
    from llmop.engine.sampling_params import SamplingParams

    names = args.configs.split(",")
    if names[0] != "fp32":
        names = ["fp32"] + [n for n in names if n != "fp32"]
    text = fixed_text()
    greedy = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)
    ref_top, ref_cont, rows = None, None, []
    for name in names:
        llm = LLM(None, kv_cache_memory_bytes=64 << 20, max_num_batched_tokens=4096, **CONFIGS[name])
        ids = llm.tokenizer.encode(text)
        logits = text_logits(llm.engine, ids)
        nll = torch.nn.functional.cross_entropy(logits[:-1], torch.tensor(ids[1:]))
        top = logits[:-1].argmax(-1)
        cont = [o.token_ids for o in llm.generate([llm.tokenizer.encode(p) for p in PROMPTS], greedy)]
        if ref_top is None:
            ref_top, ref_cont = top, cont
        same = sum(a == b for x, y in zip(cont, ref_cont) for a, b in zip(x, y))
        rows.append({"config": name, "text_tokens": len(ids), "perplexity": round(math.exp(float(nll)), 3),
                     "top1_agreement_vs_fp32": round(float((top == ref_top).float().mean()), 4),
                     "greedy_tokens_equal_to_fp32": f"{same}/{sum(map(len, ref_cont))}"})
        print(json.dumps(rows[-1]), flush=True)
        del llm
    print("\n| config | perplexity | top-1 agreement with fp32 (teacher-forced) | greedy tokens equal to fp32 |")
    print("|---|---|---|---|")
    for r in rows:
        print(f"| {r['config']} | {r['perplexity']} | {r['top1_agreement_vs_fp32']:.2%} | {r['greedy_tokens_equal_to_fp32']} |")


if __name__ == "__main__":
    main()
