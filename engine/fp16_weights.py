"""fp16 weights with fp32 activations on the CPU (`quantization: fp16`): fbgemm's fp16 GEMM.

Why: a CPU without AVX-512 BF16/AMX runs the engine in fp32 (`dtype: auto`), where decode streams
4 bytes per weight and int8 has no fast kernel for fp32 activations (`bench/cpu_int8_paths.py`).
fbgemm (in every x86 torch build) keeps the weights as fp16 in its own packed layout and multiplies
them into fp32 activations with fp32 accumulation: half the bytes per step, and far more precise
than bf16 weights (10 mantissa bits against 7). A pass replaces the linear layers in place, like
int8's: after tensor-parallel sharding, before LoRA (which wraps the result).

It is what `quantization: auto` (the default) picks on such a CPU when the dtype is `auto` too
and torch runs one thread (`device_caps.auto_quantization`). torch marks these ops deprecated: `fbgemm_fp16_available` says
whether this build still has them; `auto` then keeps fp32 weights, and a configured
`quantization: fp16` is refused at start-up (as it is off the CPU, or with 16-bit activations:
there the weights are 16-bit already).
"""

from __future__ import annotations

import warnings

import torch
from torch import nn

from llmop.engine.device_caps import fbgemm_fp16_available
from llmop.engine.quantization import replace_float_linears

# Deprecated, still the fastest fp32-activation path in torch; one warning per call would flood the log.
warnings.filterwarnings("ignore", message="fbgemm_.* is deprecated")


def unsupported_reason(device: torch.device, dtype: torch.dtype) -> str | None:
    """Why `quantization: fp16` cannot run here, None when it can."""
    if device.type != "cpu" or dtype != torch.float32:
        return (f"quantization: fp16 (fp16 weights, fp32 activations) runs on the CPU with dtype float32; "
                f"this engine has {device.type} and {dtype} (use dtype float16/bfloat16 there instead)")
    if not fbgemm_fp16_available():
        return "quantization: fp16 needs fbgemm's fp16 GEMM, which this torch build lacks"
    return None


class Fp16WeightLinear(nn.Module):
    """`y = x W^T + b` with W held by fbgemm as packed fp16 (`packed_bytes` of it, outside the
    state dict)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None):
        super().__init__()
        self.in_features, self.out_features = weight.shape[1], weight.shape[0]
        self.packed = torch.fbgemm_pack_gemm_matrix_fp16(weight.float().contiguous())
        self.packed_bytes = 2 * weight.numel()
        self.bias = bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.fbgemm_linear_fp16_weight_fp32_activation(x, self.packed, self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, fp16 weights (fbgemm)"


@torch.no_grad()
def convert_fp16(model: nn.Module, device: torch.device, dtype: torch.dtype) -> int:
    """Replace every float linear layer by an `Fp16WeightLinear`, in place; returns how many.
    ValueError where it cannot run (`unsupported_reason`)."""
    if (why := unsupported_reason(device, dtype)) is not None:
        raise ValueError(why)
    return replace_float_linears(model, lambda m: Fp16WeightLinear(m.weight, m.bias))
