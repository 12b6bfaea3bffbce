"""fp16 weights with fp32 activations on the CPU (`quantization: fp16`): fbgemm's fp16 GEMM.

Why: in fp32 a decode step streams 4 bytes per weight, and int8 has no fast kernel for fp32
activations (`bench/cpu_int8_paths.py`); bf16 is emulated on a CPU without AVX-512 BF16, and on
the one with it but no AMX measured in docs/benchmarks.md, oneDNN's bf16 GEMM was slower in decode.
fbgemm (in every x86 torch build) keeps the weights as fp16 in its own packed layout and multiplies
them into fp32 activations with fp32 accumulation: half the bytes per step, and far more precise
than bf16 weights (10 mantissa bits against 7). A pass replaces the linear layers in place, like
int8's: after tensor-parallel sharding, before LoRA (which wraps the result).

torch reaches that kernel through two ops with their own packed formats, and which pays depends on
torch's threads when the weights are packed (`Fp16Op`): `fbgemm_linear_fp16_weight_fp32_activation`
runs it on one thread with the least overhead a call; `quantized::linear_dynamic_fp16` splits it
over every thread, at a higher fixed cost a call (the dispatcher and its packed-params object). So one
thread packs for the first, more for the second (docs/benchmarks.md has both measured in the engine).

It is what `quantization: auto` (the default) picks on a CPU without AMX when the dtype is `auto`
too (`device_caps.auto_quantization`). torch marks the one-thread op deprecated:
`fbgemm_fp16_available` says whether this build has both; where it does not, `auto` keeps float
weights, and a configured `quantization: fp16` is refused at start-up (as it is off the CPU, or with
16-bit activations: there the weights are 16-bit already).
"""

from __future__ import annotations

import enum
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


class Fp16Op(enum.Enum):
    """The torch op that runs fbgemm's fp16 GEMM, each with its own packed format."""

    ONE_THREAD = "fbgemm_linear_fp16_weight_fp32_activation"
    ALL_THREADS = "quantized::linear_dynamic_fp16"

    @classmethod
    def for_threads(cls, threads: int) -> "Fp16Op":
        return cls.ONE_THREAD if threads == 1 else cls.ALL_THREADS


class Fp16WeightLinear(nn.Module):
    """`y = x W^T + b` with W held by fbgemm as packed fp16 (`packed_bytes` of it, outside the
    state dict), packed for `op`."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, op: Fp16Op):
        super().__init__()
        self.in_features, self.out_features = weight.shape[1], weight.shape[0]
        self.op = op
        w = weight.float().contiguous()
        if op is Fp16Op.ONE_THREAD:
            self.packed = torch.fbgemm_pack_gemm_matrix_fp16(w)
        else:
            self.packed = torch.ops.quantized.linear_prepack_fp16(w, None)
        self.packed_bytes = 2 * weight.numel()
        self.bias = bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.op is Fp16Op.ONE_THREAD:
            return torch.fbgemm_linear_fp16_weight_fp32_activation(x, self.packed, self.bias)
        y = torch.ops.quantized.linear_dynamic_fp16(x, self.packed)
        return y if self.bias is None else y + self.bias

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"fp16 weights (fbgemm, {self.op.value})")


@torch.no_grad()
def convert_fp16(model: nn.Module, device: torch.device, dtype: torch.dtype, op: Fp16Op) -> int:
    """Replace every float linear layer by an `Fp16WeightLinear` packed for `op` (the one a rank's
    torch threads call for: `Fp16Op.for_threads`), in place; returns how many. ValueError where it
    cannot run (`unsupported_reason`)."""
    if (why := unsupported_reason(device, dtype)) is not None:
        raise ValueError(why)
    return replace_float_linears(model, lambda m: Fp16WeightLinear(m.weight, m.bias, op))
