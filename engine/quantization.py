"""Weight-only int8: a pass that stores the linear layers' weights as int8 with per-channel scales.

`quantization: int8` in the engine config. Each output channel (row of W) gets one scale,
`absmax(row) / 127`; activations stay in the model's dtype and the product is `(x Wq^T) * scale`.
Decode streams the weights once per step, so it reads a quarter of fp32's bytes and half of bf16's.

Like the LoRA pass it replaces modules in place and keeps their names, so it composes with the
other passes: tensor parallelism shards the plain weights first, fusion concatenates them, then this
pass quantizes whatever linear layers it finds (a fused weight gets per-channel scales of its
concatenated rows, which are the parts' own), and LoRA wraps the result. The embedding table is
not quantized; a tied LM head gets an int8 copy of its own.

The matmul: `torch._weight_int8pack_mm` on the CPU (bf16/fp16/fp32 activations, int8 weights and
per-channel scales in the activations' dtype), the Triton int8 x bf16 GEMM of `llmop.kernels.int8_matmul`
on CUDA; `ref_int8_matmul` is the torch reference both are tested against.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from llmop.kernels.int8_matmul import int8_matmul, quantize_per_channel

QUANTIZATIONS = ("none", "int8")


class Int8Linear(nn.Module):
    """`y = (x Wq^T) * scale + b` with `Wq` int8 `[out, in]` and `scale` `[out]` in the activations'
    dtype. `weight` keeps the name of the float parameter it replaces (state-dict paths stay HF's)."""

    def __init__(self, qweight: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor | None):
        super().__init__()
        self.in_features, self.out_features = qweight.shape[1], qweight.shape[0]
        self.register_buffer("weight", qweight)
        self.register_buffer("scale", scale)
        self.bias = bias

    @classmethod
    def from_float(cls, weight: torch.Tensor, bias: torch.Tensor | None, dtype: torch.dtype) -> "Int8Linear":
        q, scale = quantize_per_channel(weight)
        return cls(q, scale.to(dtype), bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = int8_matmul(x, self.weight, self.scale)
        return y + self.bias if self.bias is not None else y

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8 per-channel"


def int8_slowdown(device: torch.device, dtype: torch.dtype) -> str | None:
    """Why int8 weights would make this engine slower rather than faster, None when they pay.

    On the CPU the int8 matmul is fast with 16-bit activations only: with fp32 activations (a CPU
    without AVX-512 BF16/AMX, where `dtype: auto` is fp32) `torch._weight_int8pack_mm` and the
    dequantizing fallback are both slower than the fp32 GEMM (`bench/cpu_int8_paths.py`). The
    engine still runs int8 as asked (the memory saving holds); it says so at start-up."""
    if device.type == "cpu" and dtype == torch.float32:
        return ("int8 weights with fp32 activations have no fast CPU kernel: decode will be slower than "
                "quantization: none on this machine (int8 pays with bf16 activations, on CPUs with "
                "AVX-512 BF16 or AMX, and on CUDA)")
    return None


def replace_float_linears(model: nn.Module, make: Callable[[nn.Linear], nn.Module]) -> int:
    """Replace every float `nn.Linear` (the engine's `Linear` included) by `make(layer)`, in place;
    returns how many. The weight passes (int8 here, fp16 weights in `fp16_weights`) run after
    tensor-parallel sharding and before LoRA, which wraps what they leave: a model the LoRA pass
    was applied to is refused. A tied LM head gets its own converted copy (the table stays float)."""
    if any(type(m).__name__ == "LoraLinear" for m in model.modules()):
        raise ValueError("apply weight passes before the LoRA pass: LoRA layers wrap the converted weights")
    targets = [name for name, m in model.named_modules() if isinstance(m, nn.Linear) and m.weight.is_floating_point()]
    for name in targets:  # by name, so each float layer is freed once replaced (a lower load peak)
        parent_name, _, attr = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, attr, make(getattr(parent, attr)))
    return len(targets)


@torch.no_grad()
def quantize_int8(model: nn.Module, dtype: torch.dtype) -> int:
    """Replace every float linear layer by an `Int8Linear`, in place; returns how many."""
    return replace_float_linears(model, lambda m: Int8Linear.from_float(m.weight, m.bias, dtype))
