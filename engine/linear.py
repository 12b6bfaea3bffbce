"""The engine's matmul for linear layers: `x W^T + b`, laid out for what a CPU BLAS does well.

For a small batch (decode) on the CPU, `F.linear(x, W)` makes the BLAS pack the whole weight for a
GEMM whose M is the few tokens; computing `(W x^T)^T` instead makes the tokens the packed operand
and streams the weight once. Measured on the 2-core build VM over the 210 weights of SmolLM2
(30 layers x 7, fp32, more than the L3 holds): 4 tokens 58 -> 25 ms, 16 tokens 64 -> 50 ms,
64 tokens 135 -> 119 ms; one token runs as two (MKL's GEMV is slower than a 2-column GEMM,
35 -> 28 ms). Large batches (prefill) and other devices keep `F.linear`.
"""

from __future__ import annotations

import torch
from torch import nn

SMALL_BATCH = 64  # tokens; above this the transpose copy of the output costs more than it saves


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """`nn.functional.linear`, with the small-batch CPU layout above (same result, contiguous)."""
    m = x.shape[0]
    if x.device.type != "cpu" or x.dim() != 2 or m > SMALL_BATCH or m == 0:
        return nn.functional.linear(x, weight, bias)
    xt = x.t() if m > 1 else torch.cat([x, x]).t()
    y = torch.mm(weight, xt)[:, :m].t().contiguous()
    return y + bias if bias is not None else y


class Linear(nn.Linear):
    """`nn.Linear` (same parameters and state-dict names) computed through `linear`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias)
