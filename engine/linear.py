"""The engine's matmul for linear layers: `x W^T + b`, laid out for what a CPU BLAS does well.

For 2-4 tokens on the CPU, `F.linear(x, W)` makes the BLAS pack the whole weight for a GEMM whose
M is the few tokens; computing `(W x^T)^T` instead makes the tokens the packed operand and streams
the weight once. One token is a GEMV, which `F.linear` hands to the BLAS as one; from 5 tokens on
the BLAS's own choice was as fast or faster, so larger batches, prefill and other devices keep
`F.linear`. The measurements behind these bounds, and the input-major weight layout tried instead
(a faster GEMV, a slower 4-token GEMM), are in docs/benchmarks.md (issue 17, `bench/linear_layouts.py`).
"""

from __future__ import annotations

import torch
from torch import nn

SMALL_BATCH = 4  # tokens: the largest batch the (W x^T)^T layout runs


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """`nn.functional.linear`, with the CPU layouts above (same result, contiguous)."""
    m = x.shape[0]
    if x.device.type != "cpu" or x.dim() != 2 or m > SMALL_BATCH or m <= 1:
        return nn.functional.linear(x, weight, bias)
    y = torch.mm(weight, x.t()).t().contiguous()
    return y + bias if bias is not None else y


class Linear(nn.Linear):
    """`nn.Linear` (same parameters and state-dict names) computed through `linear`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias)
