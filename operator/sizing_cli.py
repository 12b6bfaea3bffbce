"""Print the tensor-parallel sizing plan of a model: every term, each candidate size, the verdict.

Reads an LLMDeployment YAML (`-f`), or builds one from flags (`--model llama-3-70b --concurrency 100
--context-length 4096`); flags override the file. Exit status 1 when nothing fits.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from llmop.operator.api import LLMDeploymentSpec
from llmop.operator.sizing.architecture import Architecture
from llmop.operator.sizing.catalog import CATALOG
from llmop.operator.sizing.from_spec import request_for
from llmop.operator.sizing.plan import SizingError, size
from llmop.operator.sizing.report import render, to_status

# flag -> (path in the spec, type, help)
FLAGS: dict[str, tuple[tuple[str, ...], type, str]] = {
    "budget-tokens": (("kvCache", "budgetTokens"), int, "KV budget in tokens per replica"),
    "concurrency": (("kvCache", "concurrency"), int, "sequences at once (with --context-length)"),
    "context-length": (("kvCache", "contextLength"), int, "tokens per sequence"),
    "block-size": (("kvCache", "blockSize"), int, "tokens per KV block"),
    "kv-dtype": (("kvCache", "dtype"), str, "KV cache dtype (auto, bfloat16, float16, float32)"),
    "max-model-len": (("engine", "maxModelLen"), int, "longest sequence in tokens"),
    "memory-per-gpu": (("accelerator", "memoryPerGPU"), str, "e.g. 80Gi"),
    "gpus-per-node": (("accelerator", "gpusPerNode"), int, "GPUs on one node"),
    "utilization": (("accelerator", "memoryUtilization"), float, "share of GPU memory to plan for"),
    "reserved": (("accelerator", "reservedMemory"), str, "per-GPU reserve, e.g. 2Gi"),
    "tensor": (("parallelism", "tensor"), str, "auto or a fixed tensor-parallel size"),
}


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-f", "--file", help="an LLMDeployment YAML file")
    parser.add_argument("--model", help=f"a catalog name or hf:// source ({', '.join(CATALOG)})")
    parser.add_argument("--hf-config", help="a Hugging Face config.json (with --parameters)")
    parser.add_argument("--parameters", type=float, help="parameter count, e.g. 7.2e9")
    for flag, (_, typ, help_) in FLAGS.items():
        parser.add_argument(f"--{flag}", type=typ, help=help_)
    parser.add_argument("--json", action="store_true", help="print status.sizing as JSON")


def spec_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The spec dict the flags describe (pure: reads only the files named)."""
    spec: dict[str, Any] = {}
    if args.file:
        spec = (yaml.safe_load(Path(args.file).read_text()) or {}).get("spec", {}) or {}
    if args.model:
        source = args.model if "://" in args.model or args.model.startswith("/") else f"hf://catalog/{args.model}"
        spec.setdefault("model", {})["source"] = source
    if args.hf_config:
        if args.parameters is None:
            raise SystemExit("--hf-config needs --parameters (config.json does not carry the count)")
        arch = Architecture.from_hf_config(json.loads(Path(args.hf_config).read_text()), int(args.parameters))
        spec.setdefault("model", {}).setdefault("source", "/model")
        spec["model"]["architecture"] = {
            "parameters": arch.parameters, "layers": arch.layers, "attentionHeads": arch.attention_heads,
            "kvHeads": arch.kv_heads, "headDim": arch.head_dim, "dtype": arch.dtype,
            "maxContextLength": arch.max_context_length,
        }  # fmt: skip
    for flag, (path, _, _) in FLAGS.items():
        value = getattr(args, flag.replace("-", "_"))
        if value is None:
            continue
        if flag == "tensor" and value != "auto":
            value = int(value)
        node = spec
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value
    return spec


def run(args: argparse.Namespace) -> int:
    try:
        spec = LLMDeploymentSpec.model_validate(spec_from_args(args))
        req = request_for(spec)
    except ValidationError as err:
        print(f"invalid spec: {err}", file=sys.stderr)
        return 2
    except SizingError as err:
        print(f"cannot size ({err.reason}): {err}", file=sys.stderr)
        return 1
    try:
        plan = size(req)
    except SizingError as err:
        print(render(req, error=err))
        return 1
    if args.json:
        print(json.dumps(to_status(plan).wire(), indent=2))
    else:
        print(render(req, plan))
    return 0
