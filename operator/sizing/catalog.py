"""Architectures the operator knows by name, so common models size without a config.json.

The operator cannot read weights from a PVC or a private hub repo before a pod exists; for models
not listed here users give `spec.model.architecture`. Numbers are from each model's config.json.
"""

from __future__ import annotations

import re

from llmop.operator.sizing.architecture import Architecture

EMBEDDED = "smollm2-135m"

CATALOG: dict[str, Architecture] = {
    EMBEDDED: Architecture(134_515_008, 30, 9, 3, 64, "bfloat16", 8192, 576, 1536, 49152, True),
    "llama-3-8b": Architecture(8_030_261_248, 32, 32, 8, 128, "bfloat16", 8192, 4096, 14336, 128256),
    "llama-3-70b": Architecture(70_553_706_496, 80, 64, 8, 128, "bfloat16", 8192, 8192, 28672, 128256),
    "llama-3.1-8b": Architecture(8_030_261_248, 32, 32, 8, 128, "bfloat16", 131072, 4096, 14336, 128256),
    "llama-3.1-70b": Architecture(70_553_706_496, 80, 64, 8, 128, "bfloat16", 131072, 8192, 28672, 128256),
    "llama-3.1-405b": Architecture(405_853_388_800, 126, 128, 8, 128, "bfloat16", 131072, 16384, 53248, 128256),
    "mistral-7b": Architecture(7_241_732_096, 32, 32, 8, 128, "bfloat16", 32768, 4096, 14336, 32000),
    "qwen2.5-7b": Architecture(7_615_616_512, 28, 28, 4, 128, "bfloat16", 32768, 3584, 18944, 152064),
}

_SUFFIXES = re.compile(r"(-instruct|-chat|-hf|-v0\.\d|-it)+$")


def normalize(name: str) -> str:
    """'hf://meta-llama/Meta-Llama-3-70B-Instruct@main' -> 'llama-3-70b'."""
    last = name.split("@", 1)[0].rstrip("/").rsplit("/", 1)[-1].lower()
    last = _SUFFIXES.sub("", last)
    return last.removeprefix("meta-")


def lookup(name: str | None) -> Architecture | None:
    """The catalog entry for a model name or source URI, or None."""
    return CATALOG.get(normalize(name)) if name else None
