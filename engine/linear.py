"""The engine's matmul for linear layers: `x W^T + b`, laid out for what a CPU BLAS does well.

For a few tokens (decode) on the CPU, `F.linear(x, W)` makes the BLAS pack the whole weight for a
GEMM whose M is the few tokens; computing `(W x^T)^T` instead makes the tokens the packed operand
and streams the weight once. One token is a GEMV, which `F.linear` hands to the BLAS as one.
Large batches (prefill) and other devices keep `F.linear`. What chose these paths, and the
weight layout tried instead (input-major weights: a faster GEMV, a much slower 4-token GEMM), is
in docs/benchmarks.md (issue 17).
"""

from __future__ import annotations

import torch
from torch import nn

SMALL_BATCH = 64  # tokens; above this the transpose copy of the output costs more than it saves


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
