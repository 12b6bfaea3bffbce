"""Choose the attention and LoRA implementations by name: "triton", "torch" or "auto".

"auto" (the default) dispatches on every call: Triton for CUDA tensors, the torch reference
otherwise, so a GPU user needs no flag and the CPU engine never launches a kernel.  The op modules
are imported on first use; they import Triton through `llmop.kernels._triton`, which tolerates a
missing or broken Triton, so the "torch" path never needs a working Triton.

Every op of a given kind has the same signature in both implementations (see the op modules):

- `reshape_and_cache(key, value, key_cache, value_cache, slot_mapping)`
- `plan(key_cache, block_tables, seq_lens, query_start_loc=None)`: per-step work every layer shares
  (the torch path's decode gather plan; None for Triton); pass it to decode/prefill as `plan=`
- `decode(query, key_cache, value_cache, block_tables, seq_lens, scale=None, out=None, *, max_seq_len=None, plan=None)`
- `prefill(query, key_cache, value_cache, block_tables, seq_lens, query_start_loc, scale=None, out=None, *, plan=None)`
- `shrink(x, lora_a, token_slot, out=None, *, groups=None)`
- `expand(y, h, lora_b, scaling, token_slot, *, groups=None)`
- `groups(token_slot, num_slots)` (pure torch; compute once per batch, pass to every call)
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

import torch

NAMES = ("auto", "triton", "torch")

# op -> (module, triton function, torch function)
_ATTENTION = {
    "reshape_and_cache": ("reshape_and_cache", "reshape_and_cache", "ref_reshape_and_cache"),
    "decode": ("paged_attention_decode", "paged_attention_decode", "ref_paged_attention_decode"),
    "prefill": ("paged_attention_prefill", "paged_attention_prefill", "ref_paged_attention_prefill"),
    "plan": ("decode_plan", "no_plan", "plan_decode"),
}
_LORA = {
    "shrink": ("lora", "lora_shrink", "ref_lora_shrink"),
    "expand": ("lora", "lora_expand", "ref_lora_expand"),
}


@dataclass(frozen=True)
class AttentionOps:
    """Paged-attention backend: plan once per step, write new k/v into the cache, then decode or
    prefill attention."""

    name: str
    reshape_and_cache: Callable
    decode: Callable
    prefill: Callable
    plan: Callable


@dataclass(frozen=True)
class LoraOps:
    """Batched multi-LoRA backend: `h = shrink(x, ...)`, then `expand(y, h, ...)` in place."""

    name: str
    shrink: Callable
    expand: Callable
    groups: Callable


def _load(module: str, attr: str) -> Callable:
    return getattr(importlib.import_module(f"{__package__}.{module}"), attr)


def _auto(op: str, module: str, triton_fn: str, torch_fn: str) -> Callable:
    """A function that runs the Triton op on CUDA tensors and the reference on anything else."""

    impls: dict[bool, Callable] = {}  # is_cuda -> function, imported on first use

    def dispatch(first, *args, **kwargs):
        cuda = first.is_cuda
        if cuda not in impls:
            impls[cuda] = _load(module, triton_fn if cuda else torch_fn)
        return impls[cuda](first, *args, **kwargs)

    dispatch.__name__ = dispatch.__qualname__ = op
    dispatch.__doc__ = f"{triton_fn} on CUDA tensors, {torch_fn} otherwise."
    return dispatch


def _resolve(table: dict, name: str, device) -> dict:
    if name not in NAMES:
        raise ValueError(f"unknown kernel backend {name!r}; choose one of {NAMES}")
    if name == "auto" and device is not None:
        name = "triton" if torch.device(device).type == "cuda" else "torch"
    if name == "auto":
        return {op: _auto(op, *spec) for op, spec in table.items()}
    pick = 1 if name == "triton" else 2
    return {op: _load(spec[0], spec[pick]) for op, spec in table.items()}


def _check_triton(name: str) -> None:
    if name == "triton":
        from ._triton import HAS_TRITON, TRITON_ERROR

        if not HAS_TRITON:
            raise RuntimeError(f"kernel backend 'triton' requested but Triton is unavailable: {TRITON_ERROR!r}")


def get_attention_ops(name: str = "auto", device: torch.device | str | None = None) -> AttentionOps:
    """The attention ops for backend `name`; with "auto", `device` (if given) fixes the choice now."""
    _check_triton(name)
    return AttentionOps(name=name, **_resolve(_ATTENTION, name, device))


def get_lora_ops(name: str = "auto", device: torch.device | str | None = None) -> LoraOps:
    """The LoRA ops for backend `name`; with "auto", `device` (if given) fixes the choice now."""
    _check_triton(name)
    return LoraOps(name=name, groups=_load("lora", "lora_token_groups"), **_resolve(_LORA, name, device))
