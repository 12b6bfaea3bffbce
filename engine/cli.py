"""`llmop generate`: run prompts offline on the engine (the embedded model by default)."""

from __future__ import annotations

import argparse
import logging
import time

from llmop.engine.sampling_params import SamplingParams


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("prompts", nargs="*", default=["Write a haiku about Kubernetes."])
    parser.add_argument("--model", default=None, help="HF directory or .gguf file (default: embedded SmolLM2)")
    parser.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16"])
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--raw", action="store_true", help="complete the text as is, without the chat template")


def run(args: argparse.Namespace) -> int:
    from llmop.engine.llm import LLM

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    llm = LLM(args.model, dtype=args.dtype)
    params = SamplingParams(max_tokens=args.max_tokens, temperature=args.temperature)
    tok = llm.tokenizer
    prompts = [p if args.raw else tok.apply_chat_template([{"role": "user", "content": p}]) for p in args.prompts]
    t0 = time.monotonic()
    outs = llm.generate(prompts, params)
    dt = time.monotonic() - t0
    for prompt, out in zip(args.prompts, outs):
        print(f"### {prompt}\n{out.text}\n[{len(out.token_ids)} tokens, finish_reason={out.finish_reason}]\n")
    n = sum(len(o.token_ids) for o in outs)
    print(f"{n} tokens in {dt:.2f}s ({n / dt:.1f} tok/s)")
    return 0
