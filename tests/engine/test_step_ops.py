"""The decode step's ops that issue 17 touched or tried compute what the formulas they stand for compute.

RMSNorm stays bitwise HF's steps (a fused op was tried); the CPU linear's layouts (one token
through the GEMV, 2-4 tokens as `(W x^T)^T`) equal `F.linear` to float rounding at every batch
size around them.
"""

import pytest
import torch

from llmop.engine.model import RMSNorm
from llmop.engine.linear import linear


def hf_rms_norm(weight, x, eps):
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(x.dtype)


@pytest.mark.parametrize("tokens", [1, 16, 300])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rms_norm_equals_hf_formula_bitwise(tokens, dtype):
    gen = torch.Generator().manual_seed(tokens)
    norm = RMSNorm(576, 1e-5)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(576, generator=gen))
    norm = norm.to(dtype)
    x = (torch.randn(tokens, 576, generator=gen) * 3).to(dtype)
    with torch.inference_mode():
        assert torch.equal(norm(x), hf_rms_norm(norm.weight, x, 1e-5))


@pytest.mark.parametrize("m", [0, 1, 2, 3, 4, 5, 8, 16, 64, 65, 130])
def test_linear_equals_f_linear_at_every_batch_size(m):
    gen = torch.Generator().manual_seed(m)
    w, b = torch.randn(96, 80, generator=gen), torch.randn(96, generator=gen)
    x = torch.randn(m, 80, generator=gen)
    for bias in (None, b):
        y = linear(x, w, bias)
        assert y.is_contiguous() and y.shape == (m, 96)
        torch.testing.assert_close(y, torch.nn.functional.linear(x, w, bias), rtol=1e-5, atol=1e-5)
